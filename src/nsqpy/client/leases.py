"""nsqpy's lease commands (an extension of nsqpy's nsqd; Go nsqd has none), client side.

A lease is a batch of a channel's messages taken under a name: asked again, from any
connection, it gives exactly the same messages, and it is finished or requeued as a whole
(docs/nsqd.md, "Leases"). ``LeaseConnection`` is an ``NsqdConnection`` (the same handshake:
TLS, snappy/deflate, AUTH) whose IDENTIFY asks for ``"leases": true``; ``leases_supported``
says whether nsqd agreed. It needs no SUB::

    conn = await LeaseConnection.open("127.0.0.1:4150", Config())
    reserved = await conn.reserve("events", "spark", "q1.7.0", count=500, max_bytes=0,
                                  wait=0.0, ttl=600.0)           # sized on the planner
    frames = await conn.fetch("events", "spark", "q1.7.0")      # read anywhere, any times
    columns = await conn.fetch_columns("events", "spark", "q1.7.0")  # the same, as columns
    await conn.finish_lease("events", "spark", "q1.7.0")

nsqd writes a lease's message frames and its ``LEASED`` response together, so the frames that
arrive since the previous ``LEASED`` are that lease's: they are kept as two buffers, the
messages' headers and their bodies (``LeasedFrames``), not as ``Message`` objects, since they
are answered as a lease, not one by one, and a reader turns them into columns.

Answers come in order, except that a lease waiting for messages is answered at its seal: a
waiting ``reserve`` therefore has the connection to itself until it is answered.
Lease errors (``LeaseError``) leave the connection open, as nsqd does.
"""

from __future__ import annotations

import asyncio
import struct
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Final, NamedTuple

from nsqpy.client.config import Config
from nsqpy.client.connection import MAX_FRAME_SIZE, Delegate, NsqdConnection
from nsqpy.client.errors import ProtocolError, ServerError
from nsqpy.protocol import commands, lease_columns
from nsqpy.protocol.constants import FRAME_TYPE_MESSAGE, OK
from nsqpy.protocol.lease_columns import LeaseColumns

#: A message frame's payload: timestamp (int64 ns), attempts (uint16), id (16 bytes), body.
HEAD: Final = struct.Struct(">qH16s")
#: A frame's size and type.
_FRAME: Final = struct.Struct(">ii")
#: The sizes of a message frame the fast loop takes (frame type word, header, no body; the
#: client's limit); others go the ordinary way.
_MIN: Final = 4 + HEAD.size - 1
_MAX: Final = MAX_FRAME_SIZE
_LEASED: Final = b"LEASED "


@dataclass(frozen=True, slots=True)
class Reserved:
    """``LEASED <name> <count> <bytes>``: what a lease holds (``size``: bytes of bodies)."""

    name: str
    count: int
    size: int


class LeasedMessage(NamedTuple):
    id: bytes
    body: bytes
    timestamp: int
    attempts: int


@dataclass(frozen=True, slots=True)
class LeasedFrames:
    """A fetched lease: message ``i``'s header (``HEAD``: timestamp, attempts, id) is
    ``heads[26*i : 26*(i+1)]`` and its body ``bodies[ends[i-1] : ends[i]]``."""

    name: str
    heads: bytes
    bodies: bytes
    ends: array[int]

    @property
    def count(self) -> int:
        return len(self.ends)

    def messages(self) -> list[LeasedMessage]:
        out = []
        start = 0
        for i, (timestamp, attempts, msg_id) in enumerate(HEAD.iter_unpack(self.heads)):
            end = self.ends[i]
            out.append(LeasedMessage(msg_id, self.bodies[start:end], timestamp, attempts))
            start = end
        return out


def parse_leased(reply: bytes) -> Reserved:
    parts = reply.split(b" ")
    if len(parts) != 4 or parts[0] != _LEASED.strip() or not (parts[2] + parts[3]).isdigit():
        raise ProtocolError(f"unexpected answer to a lease command: {reply!r}")
    return Reserved(parts[1].decode(), int(parts[2]), int(parts[3]))


class LeaseConnection(NsqdConnection):
    """A V2 connection for lease commands (see the module docstring)."""

    def __init__(self, address: str, config: Config, delegate: Delegate | None = None) -> None:
        super().__init__(address, config, delegate)
        self._heads = bytearray()
        self._bodies = bytearray()
        self._ends: array[int] = array("q")
        #: the frames of each LEASED answer received, in order, until its command takes them
        self._answers: deque[tuple[bytearray, bytearray, array[int]]] = deque()
        self._gate = asyncio.Lock()

    @property
    def leases_supported(self) -> bool:
        return self.settings.leases

    # --- commands ------------------------------------------------------------------------------

    async def fetch(self, topic: str, channel: str, name: str) -> LeasedFrames:
        """The messages of the lease ``name`` (which must exist): LEASE's short form."""
        reply = await self._leased(commands.lease(topic, channel, name), waits=False)
        heads, bodies, ends = self._answers.popleft()
        found = parse_leased(reply)
        if (found.count, found.size) != (len(ends), len(bodies)):
            raise ProtocolError(f"{self.address}: {reply!r} after {len(ends)} message frames")
        return LeasedFrames(found.name, bytes(heads), bytes(bodies), ends)

    async def fetch_columns(self, topic: str, channel: str, name: str) -> LeaseColumns:
        """The messages of the lease ``name`` (which must exist) column by column, in one
        frame (``nsqpy.protocol.lease_columns``): LEASE_COLUMNS."""
        async with self._gate:
            answer = self.command(commands.lease_columns(topic, channel, name))
        reply = await self._await(answer)
        try:
            return lease_columns.decode(reply)
        except lease_columns.ColumnsError as exc:
            raise ProtocolError(f"{self.address}: {exc}") from None

    async def reserve(
        self,
        topic: str,
        channel: str,
        name: str,
        *,
        count: int,
        max_bytes: int,
        wait: float,
        ttl: float,
        before_ns: int = 0,
    ) -> Reserved:
        """Take (or find again) the lease ``name``, answered with its size only. One that took
        nothing is not kept by nsqd: the same name may be asked again."""
        command = commands.lease_reserve(
            topic, channel, name, count, max_bytes, _ms(wait), max(1, _ms(ttl)), before_ns
        )
        return await self._reserved(command, waits=wait > 0)

    async def reserved(self, topic: str, channel: str, name: str) -> Reserved:
        """The size of the lease ``name``, which must exist (LEASE_RESERVE's short form)."""
        return await self._reserved(commands.lease_reserved(topic, channel, name), waits=False)

    async def finish_lease(self, topic: str, channel: str, name: str) -> None:
        await self._ok(commands.lease_fin(topic, channel, name))

    async def requeue_lease(self, topic: str, channel: str, name: str, delay: float = 0.0) -> None:
        await self._ok(commands.lease_req(topic, channel, name, _ms(delay)))

    async def _reserved(self, command: bytes, *, waits: bool) -> Reserved:
        reply = await self._leased(command, waits=waits)
        self._answers.popleft()  # a reserve carries no frames
        return parse_leased(reply)

    async def _ok(self, command: bytes) -> None:
        async with self._gate:
            answer = self.command(command)
        reply = await self._await(answer)
        if reply != OK:
            raise ProtocolError(f"{self.address}: expected OK, got {reply!r}")

    async def _leased(self, command: bytes, *, waits: bool) -> bytes:
        if waits:  # answered at its seal: nothing else may be asked meanwhile
            async with self._gate:
                return await self._await(self.command(command))
        async with self._gate:
            answer = self.command(command)
        return await self._await(answer)

    async def _await(self, answer: asyncio.Future[bytes]) -> bytes:
        try:
            return await answer
        except asyncio.CancelledError:
            # its answer may still come and would be taken for the next command's
            self.close()
            raise

    # --- frames --------------------------------------------------------------------------------

    def _identify_fields(self) -> dict[str, object]:
        return {**super()._identify_fields(), "leases": True}

    def _process(self) -> None:
        """Runs of message frames first, in a loop of their own (a lease brings thousands at
        a time); anything else, and whatever a run leaves, as any connection parses it."""
        buf = self._buf
        end = len(buf)
        pos = 0
        view = memoryview(buf)
        heads, bodies, ends = self._heads, self._bodies, self._ends
        unpack = _FRAME.unpack_from
        try:
            while end - pos >= 8:
                size, frame_type = unpack(buf, pos)
                stop = pos + 4 + size
                if frame_type != FRAME_TYPE_MESSAGE or stop > end or not _MIN < size <= _MAX:
                    break
                heads += view[pos + 8 : pos + 8 + HEAD.size]
                bodies += view[pos + 8 + HEAD.size : stop]
                ends.append(len(bodies))
                pos = stop
        finally:
            view.release()  # before the buffer may be resized
        if pos:
            del buf[:pos]
        super()._process()

    def _on_message(self, buf: bytearray, start: int, stop: int) -> None:
        # what the loop above left: a short or oversized frame fails in its own way
        if stop - start < HEAD.size:
            self._fail(ProtocolError(f"{self.address}: short message frame"))
            return
        self._heads += buf[start : start + HEAD.size]
        self._bodies += buf[start + HEAD.size : stop]
        self._ends.append(len(self._bodies))

    def _on_response(self, data: bytes) -> None:
        if data.startswith(_LEASED):
            self._answers.append((self._heads, self._bodies, self._ends))
            self._heads, self._bodies, self._ends = bytearray(), bytearray(), array("q")
        super()._on_response(data)

    def _on_error(self, data: bytes) -> None:
        # nsqd keeps the connection after a lease error and closes it itself after a fatal
        # one, so the error only answers its command
        err = ServerError.from_frame(data)
        if self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(err)
        else:
            super()._on_error(data)


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))

"""nsqpy's V2 commands for leases (``nsqpy.nsqd.core.lease``); not in nsqd.

Only a connection that sent ``"leases": true`` (with ``feature_negotiation``) in IDENTIFY has
them; for any other ``LEASE`` is an unknown command, answered (fatally) as nsqd answers one.
They need no SUB and work in any state, from any connection::

    LEASE <topic> <channel> <lease> <count> <bytes> <wait_ms> [<ttl_ms>]
    LEASE <topic> <channel> <lease>             (a lease that exists)
    LEASE_RESERVE <topic> <channel> <lease> <count> <bytes> <wait_ms> [<ttl_ms> [<before_ns>]]
    LEASE_RESERVE <topic> <channel> <lease>     (a lease that exists)
    LEASE_COLUMNS <topic> <channel> <lease>     (a lease that exists)
    LEASE_FIN <topic> <channel> <lease>
    LEASE_REQ <topic> <channel> <lease> <delay_ms>

``LEASE`` is answered with the lease's messages as ordinary message frames, then the response
``LEASED <lease> <count> <bytes>``, all written at once (so the ``count`` message frames just
before ``LEASED`` are the lease's, even on a connection that also consumes). A lease that waits
for messages is answered when sealed; other commands' replies may come first meanwhile. Asked
again, from any connection, the same frames (ids, bodies, timestamps, attempts) come back.
``LEASE_FIN`` and ``LEASE_REQ`` answer ``OK``, again for a repeat.

``LEASE_RESERVE`` takes (or finds) the lease as ``LEASE`` does but is answered with the
response ``LEASED <lease> <count> <bytes>`` alone: a planner sizes a batch that its executors
then fetch with ``LEASE``. Two differences serve such a planner. A reserve that seals with no
message keeps no lease (it is finished and forgotten at once), so an idle channel can be
polled under the name of the next batch until messages come. ``before_ns`` (unix ns, 0: no
bound) bounds the publish time of what a new lease takes: the first message published later
stays at the head of the queue and the lease is full ("what was published before the run").

``LEASE_COLUMNS`` is ``LEASE``'s short form answered with one response frame that holds the
lease's messages column by column (``nsqpy.protocol.lease_columns``): what the Spark source's
executors read, without a frame to parse per message.

Leased messages are not in any connection's in-flight: ``FIN``/``REQ``/``TOUCH`` of their ids
fail as for any id not in flight (``E_FIN_FAILED`` ..., non-fatal) and change nothing.

Errors are non-fatal: ``E_INVALID`` (parameters), ``E_BAD_TOPIC``, ``E_BAD_CHANNEL``, and
``E_<CODE> <CMD> <lease> failed <CODE>`` for ``TOPIC_NOT_FOUND``, ``CHANNEL_NOT_FOUND``,
``EPHEMERAL_CHANNEL``, ``LEASE_NOT_FOUND``, ``LEASE_MISMATCH``, ``LEASE_FINISHED`` and
``LEASE_REQUEUED``, the codes of the HTTP routes (``server/http_leases.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Final, Protocol

from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.lease import Lease, LeaseBook, LeaseError, is_valid_lease_name
from nsqpy.nsqd.server.context import Daemon
from nsqpy.protocol import lease_columns
from nsqpy.protocol.errors import ClientError
from nsqpy.protocol.frames import encode_error, encode_message, encode_response
from nsqpy.protocol.identify import ClientSettings
from nsqpy.protocol.names import is_valid_name
from nsqpy.protocol.text import byte_to_base10, go_quote

Handler = Callable[[list[bytes], bytes | None, float], None]

_MS: Final = 1_000_000
_OK: Final = encode_response(b"OK")


class LeaseConnection(Protocol):
    """What the commands use of a ``V2Connection``."""

    nsqd: Daemon
    loop: asyncio.AbstractEventLoop
    settings: ClientSettings
    _auth_on: bool

    def _send_frame(self, frame: bytes) -> None: ...
    def _reply_after_commit(self, cmd: str, topic: str, frame: bytes = ...) -> None: ...
    def is_closing(self) -> bool: ...
    def _check_auth(
        self,
        handler: Handler,
        params: list[bytes],
        body: bytes | None,
        cmd: str,
        topic: str,
        channel: str,
    ) -> bool: ...


def lease_handler(conn: LeaseConnection, name: bytes) -> Handler | None:
    """The handler of lease command ``name`` for ``conn``, if it negotiated leases."""
    command = _COMMANDS.get(name)
    if command is None or not conn.settings.leases:
        return None
    return partial(command, conn)


def _invalid(desc: str) -> ClientError:
    return ClientError("E_INVALID", desc, fatal=False)


def _failed(cmd: str, lease: str, code: str) -> ClientError:
    return ClientError(f"E_{code}", f"{cmd} {lease} failed {code}", fatal=False)


def _number(cmd: str, what: str, raw: bytes, low: int, high: int) -> int:
    value = byte_to_base10(raw)
    if value is None:
        raise _invalid(f"{cmd} could not parse {what} {raw.decode('utf-8', 'replace')}")
    if not low <= value <= high:
        raise _invalid(f"{cmd} {what} {value} out of range {low}-{high}")
    return value


def _target(
    conn: LeaseConnection, cmd: str, params: list[bytes], counts: tuple[int, ...]
) -> tuple[str, str, str]:
    """The topic, channel and lease names (checked), or the command's error."""
    if len(params) not in counts:
        raise _invalid(f"{cmd} invalid number of parameters")
    if not is_valid_name(params[1]):
        raise ClientError(
            "E_BAD_TOPIC", f"{cmd} topic name {go_quote(params[1])} is not valid", fatal=False
        )
    if not is_valid_name(params[2]):
        raise ClientError(
            "E_BAD_CHANNEL", f"{cmd} channel name {go_quote(params[2])} is not valid", fatal=False
        )
    lease = params[3].decode("utf-8", "replace")
    if not is_valid_lease_name(lease):
        raise _invalid(f"{cmd} lease name {go_quote(params[3])} is not valid")
    return params[1].decode(), params[2].decode(), lease


def _channel(conn: LeaseConnection, cmd: str, topic: str, channel: str, lease: str) -> Channel:
    found = conn.nsqd.broker.topics.get(topic)
    if found is None:
        raise _failed(cmd, lease, "TOPIC_NOT_FOUND")
    chan = found.channels.get(channel)
    if chan is None:
        raise _failed(cmd, lease, "CHANNEL_NOT_FOUND")
    if chan.ephemeral:
        raise _failed(cmd, lease, "EPHEMERAL_CHANNEL")
    return chan


def _lease(
    conn: LeaseConnection,
    params: list[bytes],
    body: bytes | None,
    now: float,
    *,
    reserve: bool = False,
    columns: bool = False,
) -> None:
    cmd = "LEASE_RESERVE" if reserve else "LEASE_COLUMNS" if columns else "LEASE"
    counts = (4, 7, 8, 9) if reserve else (4,) if columns else (4, 7, 8)
    topic, channel_name, name = _target(conn, cmd, params, counts)
    opts = conn.nsqd.opts
    max_ms = opts.max_msg_timeout // _MS
    count = max_bytes = None
    wait_ms = before = 0
    ttl_ms = min(opts.lease_ttl, opts.max_msg_timeout) // _MS
    if len(params) > 4:
        count = _number(cmd, "count", params[4], 1, opts.max_rdy_count)
        max_bytes = _number(cmd, "bytes", params[5], 0, 1 << 62)
        wait_ms = _number(cmd, "wait", params[6], 0, max_ms)
        if len(params) > 7:
            ttl_ms = _number(cmd, "ttl", params[7], 1, max_ms)
        if len(params) > 8:
            before = _number(cmd, "before", params[8], 0, (1 << 63) - 1)
    if conn._auth_on and not conn._check_auth(
        partial(_lease, conn, reserve=reserve, columns=columns), params, body, cmd, topic,
        channel_name,
    ):
        return
    book = LeaseBook.of(_channel(conn, cmd, topic, channel_name, name))
    try:
        lease = book.lease(
            name, count, max_bytes, ttl=ttl_ms / 1000, wait=wait_ms / 1000, now=now, before=before
        )
    except LeaseError as err:
        code = "LEASE_NOT_FOUND" if err.code == "MISSING_ARG_COUNT" else err.code
        raise _failed(cmd, name, code) from None
    answer = partial(_reserved, book, conn.loop) if reserve else _columns if columns else _answer
    if lease.sealed:
        _reply(conn, cmd, topic, answer(lease), lease)
    else:
        _when_sealed(conn, book, lease, cmd, answer)


def _answer(lease: Lease) -> bytes:
    frames = [encode_message(m.timestamp, m.attempts, m.id, m.body) for m in lease.messages]
    frames.append(_leased(lease))
    return b"".join(frames)


def _columns(lease: Lease) -> bytes:
    return encode_response(lease_columns.encode(lease.name, lease.messages))


def _leased(lease: Lease) -> bytes:
    return encode_response(f"LEASED {lease.name} {len(lease.messages)} {lease.size}".encode())


def _reserved(book: LeaseBook, loop: asyncio.AbstractEventLoop, lease: Lease) -> bytes:
    """LEASE_RESERVE's answer; a lease sealed empty is let go (see the module docstring)."""
    book.release_empty(lease.name, loop.time())
    return _leased(lease)


def _when_sealed(
    conn: LeaseConnection,
    book: LeaseBook,
    lease: Lease,
    cmd: str,
    answer: Callable[[Lease], bytes],
) -> None:
    """Answer once ``lease`` is sealed: by the queue scan (full) or at the end of its wait."""
    loop = conn.loop

    def sealed(_: Lease) -> None:
        timer.cancel()
        frame = answer(lease)  # also when the client is gone: a reserve lets an empty lease go
        if not conn.is_closing():
            _reply(conn, cmd, book.channel.topic_name, frame, lease)

    def due() -> None:
        book.seal(lease, loop.time())
        if not lease.sealed:  # the channel (and its leases) went meanwhile
            if sealed in lease.waiters:
                lease.waiters.remove(sealed)
            if not conn.is_closing():
                conn._send_frame(encode_error(_failed(cmd, lease.name, "LEASE_NOT_FOUND").wire))

    lease.waiters.append(sealed)
    timer = loop.call_at(lease.fill_until, due)


def _settle(
    conn: LeaseConnection, cmd: str, params: list[bytes], body: bytes | None
) -> tuple[LeaseBook, str, int] | None:
    counts = (5,) if cmd == "LEASE_REQ" else (4,)
    topic, channel_name, name = _target(conn, cmd, params, counts)
    delay_ms = 0
    if cmd == "LEASE_REQ":
        delay_ms = _number(cmd, "timeout", params[4], 0, conn.nsqd.opts.max_req_timeout // _MS)
    handler = _lease_fin if cmd == "LEASE_FIN" else _lease_req
    if conn._auth_on and not conn._check_auth(
        partial(handler, conn), params, body, cmd, topic, channel_name
    ):
        return None
    channel = _channel(conn, cmd, topic, channel_name, name)
    if channel.leases is None:
        raise _failed(cmd, name, "LEASE_NOT_FOUND")
    return LeaseBook.of(channel), name, delay_ms


def _lease_fin(conn: LeaseConnection, params: list[bytes], body: bytes | None, now: float) -> None:
    target = _settle(conn, "LEASE_FIN", params, body)
    if target is None:
        return
    book, name, _ = target
    try:
        lease = book.finish(name, now)
    except LeaseError as err:
        raise _failed("LEASE_FIN", name, err.code) from None
    _reply(conn, "LEASE_FIN", book.channel.topic_name, _OK, lease)


def _lease_req(conn: LeaseConnection, params: list[bytes], body: bytes | None, now: float) -> None:
    target = _settle(conn, "LEASE_REQ", params, body)
    if target is None:
        return
    book, name, delay_ms = target
    try:
        lease = book.requeue(name, delay_ms / 1000, now)
    except LeaseError as err:
        raise _failed("LEASE_REQ", name, err.code) from None
    _reply(conn, "LEASE_REQ", book.channel.topic_name, _OK, lease)


def _reply(conn: LeaseConnection, cmd: str, topic: str, frame: bytes, lease: Lease) -> None:
    """--durable: answer once the lease journal's record is on stable storage (the group
    commit after it), in its place among the connection's replies; at once otherwise. A
    record the journal could not write is answered as a failed sync (not fatal)."""
    if not conn.nsqd.store.durable:
        conn._send_frame(frame)
        return
    if not lease.recorded:
        frame = encode_error(f"E_{cmd}_FAILED {cmd} failed to sync".encode())
    conn._reply_after_commit(cmd, topic, frame)


_COMMANDS: Final[
    dict[bytes, Callable[[LeaseConnection, list[bytes], bytes | None, float], None]]
] = {
    b"LEASE": _lease,
    b"LEASE_RESERVE": partial(_lease, reserve=True),
    b"LEASE_COLUMNS": partial(_lease, columns=True),
    b"LEASE_FIN": _lease_fin,
    b"LEASE_REQ": _lease_req,
}

"""nsqd's side of discovery: registering topics and channels with every nsqlookupd.

One task per ``--lookupd-tcp-address`` owns that connection: it connects (1 s timeout),
sends the V1 magic and IDENTIFY, registers every topic and channel nsqd has, then sends the
REGISTER / UNREGISTER commands queued by topic and channel changes and a PING every 15 s.
Any failure closes the connection and the task reconnects with backoff; since every
(re)connect registers the full state again, commands that arrive while disconnected are
simply dropped. ``PUT /config/nsqlookupd_tcp_addresses`` reconciles the set of peers at once.

When a topic is created at run time nsqd asks each lookupd (over HTTP) which channels the
topic has in the cluster and creates them before the topic hands out its first messages
(NSQ #1520). The topic holds its messages meanwhile, even if a consumer subscribes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from typing import Any, Final

import aiohttp

from nsqpy._internal import aioweb
from nsqpy.protocol import lookup as v1
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.names import is_ephemeral, is_valid_name

log = logging.getLogger("nsqpy.nsqd")

PING_INTERVAL: Final = 15.0
IO_TIMEOUT: Final = 1.0
MAX_BACKOFF: Final = 15.0

#: Every registration nsqd holds now: (topic, channel), channel "" for a topic on its own.
Registrations = Callable[[], list[tuple[str, str]]]


class LookupPeer:
    """One nsqlookupd connection, kept up by its own task."""

    def __init__(
        self, address: str, identity: dict[str, Any], registrations: Registrations
    ) -> None:
        self.address = address
        self.identity = identity
        self.registrations = registrations
        self.info: dict[str, Any] = {}  # the lookupd's IDENTIFY reply
        self.connected = asyncio.Event()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=100_000)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def send(self, command: bytes) -> None:
        """Queue a command; dropped while disconnected (a reconnect re-registers everything).

        Queued from the moment a (re)connect takes its snapshot of the registrations, so a
        change is either in the snapshot or sent after it.
        """
        if self.connected.is_set():
            try:
                self._queue.put_nowait(command)
            except asyncio.QueueFull:
                log.error("LOOKUPD(%s): command queue full, dropping", self.address)

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            try:
                await self._session()
            except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as err:
                log.error("LOOKUPD(%s): %s", self.address, str(err) or type(err).__name__)
            self.connected.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _session(self) -> None:
        host, _, port = self.address.rpartition(":")
        async with asyncio.timeout(IO_TIMEOUT):
            family, addr = await _resolve(host.strip("[]"), int(port))
            reader, writer = await asyncio.open_connection(addr[0], addr[1], family=family)
        try:
            log.info("LOOKUP connecting to %s", self.address)
            writer.write(v1.MAGIC_V1)
            self.info = json.loads(
                await self._command(reader, writer, v1.encode_identify(self.identity))
            )
            log.info("LOOKUPD(%s): peer info %s", self.address, self.info)
            while not self._queue.empty():
                self._queue.get_nowait()
            # Queue changes from the moment of the snapshot: a topic created while the
            # snapshot's REGISTERs are on the wire is in neither unless send() keeps it.
            self.connected.set()
            for topic, channel in self.registrations():
                await self._command(reader, writer, v1.encode_register(topic, channel))
            await self._serve(reader, writer)
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Send queued commands, PING when idle, and notice at once if lookupd goes away.

        nsqlookupd never speaks unprompted, so a read that completes while idle means the
        connection closed (a restarted lookupd): reconnect now rather than at the next PING.
        """
        while True:
            get = asyncio.ensure_future(self._queue.get())
            closed = asyncio.ensure_future(reader.read(1))
            try:
                done, _ = await asyncio.wait(
                    {get, closed}, timeout=PING_INTERVAL, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                # also when stop() cancels us mid-wait: a pending task left behind would be
                # destroyed with the loop ("Task was destroyed but it is pending!")
                for task in (get, closed):
                    if not task.done():
                        task.cancel()
                await asyncio.gather(get, closed, return_exceptions=True)
            if closed in done:
                raise ConnectionError("connection closed by nsqlookupd")
            command = get.result() if get in done else v1.PING
            await self._command(reader, writer, command)

    async def _command(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, command: bytes
    ) -> bytes:
        writer.write(command)
        async with asyncio.timeout(IO_TIMEOUT):
            await writer.drain()
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            if not 0 <= size <= 5 * 1024 * 1024:
                raise ValueError(f"invalid response size {size}")
            data = await reader.readexactly(size)
        if data.startswith(b"E_"):
            raise ValueError(f"{command.split(b' ')[0].strip().decode()} failed: {data.decode()}")
        return data


class Lookup:
    """The set of lookupd peers nsqd talks to."""

    def __init__(
        self, identity: dict[str, Any], registrations: Registrations, http_timeout: float
    ) -> None:
        self.identity = identity
        self.registrations = registrations
        self.http_timeout = http_timeout
        self.peers: dict[str, LookupPeer] = {}

    def set_addresses(self, addresses: list[str]) -> None:
        """Connect new peers, drop removed ones (``PUT /config/nsqlookupd_tcp_addresses``)."""
        wanted = dict.fromkeys(addresses)
        for address in list(self.peers):
            if address not in wanted:
                peer = self.peers.pop(address)
                asyncio.get_running_loop().create_task(peer.stop())
        if set(wanted) - set(self.peers):
            aioweb.import_client()  # once, now, rather than when the first topic is created
        for address in wanted:
            if address not in self.peers:
                peer = LookupPeer(address, self.identity, self.registrations)
                self.peers[address] = peer
                peer.start()

    def notify(self, event: str, topic: str, channel: str) -> None:
        if event in ("topic_created", "channel_created"):
            command = v1.encode_register(topic, channel)
        else:
            command = v1.encode_unregister(topic, channel)
        for peer in self.peers.values():
            peer.send(command)

    async def channels_for(self, topic: str) -> list[str]:
        """Channels the cluster knows for ``topic`` (nsqd's pre-creation query)."""
        urls = [
            f"http://{p.info['broadcast_address']}:{p.info['http_port']}/channels"
            for p in self.peers.values()
            if p.info.get("broadcast_address") and p.info.get("http_port")
        ]
        if not urls:
            return []
        found: dict[str, None] = {}
        client_timeout = aiohttp.ClientTimeout(total=self.http_timeout)
        async with aiohttp.ClientSession(timeout=client_timeout) as http:
            for url in urls:
                try:
                    async with http.get(
                        url,
                        params={"topic": topic},
                        headers={"Accept": "application/vnd.nsq; version=1.0"},
                    ) as resp:
                        resp.raise_for_status()
                        data = json.loads(await resp.read())
                except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                    log.error(
                        "failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                        topic,
                        err,
                    )
                    continue
                for name in data.get("channels") or []:
                    if isinstance(name, str) and is_valid_name(name) and not is_ephemeral(name):
                        found[name] = None
        return list(found)

    async def stop(self) -> None:
        for peer in self.peers.values():
            await peer.stop()
        self.peers.clear()


async def _resolve(host: str, port: int) -> tuple[int, tuple[Any, ...]]:
    """The first address for host:port; the lookup survives its caller being cancelled.

    A cancelled ``open_connection`` leaves its resolver future to fail later with nobody to
    read the error; shielding a task whose outcome is always consumed avoids that.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    infos = await asyncio.shield(task)
    if not infos:
        raise OSError(f"no address for {host}")
    return infos[0][0], infos[0][4]


def identity(broadcast_address: str, tcp_port: int, http_port: int) -> dict[str, Any]:
    """nsqd's IDENTIFY body for nsqlookupd."""
    return {
        "version": NSQ_VERSION,
        "tcp_port": tcp_port,
        "http_port": http_port,
        "hostname": socket.gethostname(),
        "broadcast_address": broadcast_address,
    }

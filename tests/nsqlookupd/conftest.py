"""nsqlookupd fixtures: in-process daemons on port 0 with a controllable clock, V1 clients."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from daemon_process import in_process, with_overrides

from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions

SECOND = 1_000_000_000
START_NS = 1_700_000_000 * SECOND


class FakeClock:
    """Wall-clock nanoseconds that move only when told to."""

    def __init__(self, now: int = START_NS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * SECOND)


LookupdFactory = Callable[..., Awaitable[NSQLookupd]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def lookupd_factory(clock: FakeClock) -> AsyncIterator[LookupdFactory]:
    """Start in-process nsqlookupd instances (option overrides as keywords), on ``clock``."""

    def build(n: int, overrides: dict[str, Any]) -> NSQLookupd:
        opts = NsqlookupdOptions(
            tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", broadcast_address="lookupd.test"
        )
        return NSQLookupd(with_overrides(opts, overrides), clock=clock)

    async with in_process(build) as start:
        yield start


@pytest.fixture
async def lookupd(lookupd_factory: LookupdFactory) -> NSQLookupd:
    return await lookupd_factory()


def peer_info(**overrides: Any) -> dict[str, Any]:
    """An IDENTIFY body as nsqd sends it."""
    info: dict[str, Any] = {
        "version": "1.3.0",
        "tcp_port": 4150,
        "http_port": 4151,
        "hostname": "nsqd-host",
        "broadcast_address": "nsqd.test",
    }
    info.update(overrides)
    return info


class V1Client:
    """A raw nsqlookupd V1 connection (what nsqd's lookup peer does, byte by byte)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int, magic: bytes = b"  V1") -> V1Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        if magic:
            writer.write(magic)
        return client

    @property
    def address(self) -> str:
        host, port = self.writer.get_extra_info("sockname")[:2]
        return f"{host}:{port}"

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def read(self) -> bytes:
        """One ``[size][data]`` response's data."""
        async with asyncio.timeout(5):
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            return await self.reader.readexactly(size)

    async def read_raw(self, n: int) -> bytes:
        async with asyncio.timeout(5):
            return await self.reader.readexactly(n)

    async def command(self, line: bytes) -> bytes:
        self.send(line)
        return await self.read()

    async def identify(self, **overrides: Any) -> dict[str, Any]:
        body = json.dumps(peer_info(**overrides)).encode()
        reply = await self.command(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        result: dict[str, Any] = json.loads(reply)
        return result

    async def assert_closed(self) -> None:
        """The server closed the connection (EOF, nothing more sent)."""
        async with asyncio.timeout(5):
            assert await self.reader.read() == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


V1Connect = Callable[..., Awaitable[V1Client]]


@pytest.fixture
async def connect(lookupd: NSQLookupd) -> AsyncIterator[V1Connect]:
    """Open V1 connections to ``lookupd`` (magic sent unless ``magic=b""``); closed after."""
    clients: list[V1Client] = []

    async def open_client(magic: bytes = b"  V1") -> V1Client:
        client = await V1Client.connect(lookupd.tcp_port, magic)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()

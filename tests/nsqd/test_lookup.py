"""nsqd's registration with nsqlookupd, in process: what it announces about itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from conftest import NsqdFactory, wait_for

from nsqpy.nsqd.server.lookup import LookupPeer, identity
from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions
from nsqpy.protocol import lookup as v1


@pytest.fixture
async def lookupd() -> AsyncIterator[NSQLookupd]:
    daemon = NSQLookupd(
        NsqlookupdOptions(
            tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", broadcast_address="127.0.0.1"
        )
    )
    await daemon.start()
    yield daemon
    await daemon.stop()


async def test_broadcast_address_and_ports_override_what_nsqd_registers(
    nsqd_factory: NsqdFactory, lookupd: NSQLookupd
) -> None:
    nsqd = await nsqd_factory(
        nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_port}"],
        broadcast_address="nsqd.example",
        broadcast_tcp_port=5150,
        broadcast_http_port=5151,
    )
    nsqd.broker.get_topic("announced")
    await wait_for(lambda: bool(lookupd.registry.find_producers("topic", "announced", "")))
    (producer,) = lookupd.registry.find_producers("topic", "announced", "")
    peer = producer.peer
    assert (peer.broadcast_address, peer.tcp_port, peer.http_port) == ("nsqd.example", 5150, 5151)


async def test_real_ports_are_registered_without_overrides(
    nsqd_factory: NsqdFactory, lookupd: NSQLookupd
) -> None:
    nsqd = await nsqd_factory(
        nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_port}"], broadcast_address="127.0.0.1"
    )
    nsqd.broker.get_topic("t")
    await wait_for(lambda: bool(lookupd.registry.find_producers("topic", "t", "")))
    (producer,) = lookupd.registry.find_producers("topic", "t", "")
    assert (producer.peer.tcp_port, producer.peer.http_port) == (nsqd.tcp_port, nsqd.http_port)


class HeldLookupd:
    """A stub nsqlookupd that records commands and holds its first REGISTER reply."""

    def __init__(self) -> None:
        self.commands: list[bytes] = []
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(4) == b"  V1"
        while line := await reader.readline():
            self.commands.append(line.strip())
            if line.startswith(b"IDENTIFY"):
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                reply = json.dumps({"tcp_port": 0, "http_port": 0}).encode()
            else:
                if not self.holding.is_set():
                    self.holding.set()
                    await self.release.wait()
                reply = b"OK"
            writer.write(len(reply).to_bytes(4, "big") + reply)
            await writer.drain()


async def test_a_change_made_while_registering_everything_is_not_lost() -> None:
    """A topic created while the (re)connect's REGISTERs are in flight is still registered."""
    stub = HeldLookupd()
    server = await asyncio.start_server(stub.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    peer = LookupPeer(f"127.0.0.1:{port}", identity("127.0.0.1", 1, 2), lambda: [("t", "")])
    peer.start()
    try:
        await asyncio.wait_for(stub.holding.wait(), 5)
        peer.send(v1.encode_register("created-meanwhile", ""))
        stub.release.set()
        await wait_for(lambda: b"REGISTER created-meanwhile" in stub.commands)
        assert stub.commands[1:] == [b"REGISTER t", b"REGISTER created-meanwhile"]
    finally:
        await peer.stop()
        server.close()
        await server.wait_closed()

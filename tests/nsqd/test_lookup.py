"""nsqd's registration with nsqlookupd, in process: what it announces about itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from conftest import NsqdFactory, wait_for

from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions


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

"""Producer against real in-process nsqd daemons on port 0."""

from __future__ import annotations

import asyncio

import pytest
from conftest import POLL_INTERVAL, NsqdFactory

from nsqpy.client import Config, InvalidError, NotConnectedError, Producer
from nsqpy.nsqd.app import NSQD


def addr(daemon: NSQD) -> str:
    return f"127.0.0.1:{daemon.tcp_port}"


def depth(daemon: NSQD, topic: str) -> int:
    t = daemon.broker.topics.get(topic)
    return 0 if t is None else t.message_count


async def test_publish_kinds_and_pipelining(nsqd: NSQD) -> None:
    async with Producer(addr(nsqd)) as p:
        await p.publish("t", b"one")
        await p.multi_publish("t", [b"two", b"three\nwith newline"])
        await p.deferred_publish("t", b"later", 0.5)
        await asyncio.gather(*(p.publish("t", b"x%d" % i) for i in range(500)))
    assert depth(nsqd, "t") == 504


async def test_server_error_is_raised_and_connection_reopens(nsqd: NSQD) -> None:
    async with Producer(addr(nsqd)) as p:
        with pytest.raises(InvalidError) as info:
            await p.publish("bad!", b"x")
        assert info.value.code == "E_BAD_TOPIC"
        # nsqd closed that connection after the fatal error; the next publish redials
        await p.publish("t", b"after")
    assert depth(nsqd, "t") == 1


async def test_round_robin_spreads_and_failover_sticks(nsqd_factory: NsqdFactory) -> None:
    a, b = await nsqd_factory(), await nsqd_factory()
    async with Producer([addr(a), addr(b)]) as p:
        for _ in range(10):
            await p.publish("rr", b"m")
    assert (depth(a, "rr"), depth(b, "rr")) == (5, 5)
    async with Producer([addr(a), addr(b)], strategy="failover") as p:
        for _ in range(10):
            await p.publish("fo", b"m")
    assert (depth(a, "fo"), depth(b, "fo")) == (10, 0)


async def test_failover_when_first_daemon_stops(nsqd_factory: NsqdFactory) -> None:
    a, b = await nsqd_factory(), await nsqd_factory()
    async with Producer([addr(a), addr(b)], strategy="failover") as p:
        await p.publish("f", b"1")
        await a.stop()
        await p.publish("f", b"2")
    assert depth(b, "f") == 1


async def test_reconnects_after_daemon_restart(nsqd_factory: NsqdFactory) -> None:
    first = await nsqd_factory()
    port = first.tcp_port
    async with Producer(addr(first)) as p:
        await p.publish("r", b"1")
        await first.stop()
        with pytest.raises(NotConnectedError):
            await p.publish("r", b"lost")
        second = await nsqd_factory(tcp_address=f"127.0.0.1:{port}")

        async with asyncio.timeout(20):
            while True:
                try:
                    await p.publish("r", b"2")
                    break
                except NotConnectedError:
                    await asyncio.sleep(POLL_INTERVAL)
    assert depth(second, "r") >= 1


async def test_unreachable_raises_not_connected() -> None:
    p = Producer("127.0.0.1:1", config=Config(dial_timeout=0.5))
    with pytest.raises(NotConnectedError):
        await p.connect()
    with pytest.raises(NotConnectedError):
        await p.publish("t", b"x")
    await p.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Producer([])
    with pytest.raises(ValueError):
        Producer("nohostport")
    with pytest.raises(ValueError):
        Producer("127.0.0.1:4150", strategy="random")  # type: ignore[arg-type]

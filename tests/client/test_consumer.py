"""Consumer against real nsqd daemons (in-process, port 0)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from conftest import NsqdFactory, wait_for

from nsqpy.client import Config, Consumer, Message, Producer
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.core.client import STATE_CLOSING


def addr(daemon: NSQD) -> str:
    return f"127.0.0.1:{daemon.tcp_port}"


def channel_stats(daemon: NSQD, topic: str, channel: str) -> tuple[int, int]:
    """(depth, in_flight) of a channel."""
    ch = daemon.broker.topics[topic].channels[channel]
    return ch.depth, ch.in_flight_count


async def publish(daemon: NSQD, topic: str, bodies: list[bytes]) -> None:
    async with Producer(addr(daemon)) as p:
        await p.multi_publish(topic, bodies)


async def test_handler_mode_finishes_every_message(nsqd: NSQD) -> None:
    bodies = [b"m%d" % i for i in range(300)]
    await publish(nsqd, "t", bodies)
    got: list[bytes] = []
    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=lambda m: got.append(m.body),
                 max_in_flight=50)
    await c.start()
    await wait_for(lambda: len(got) == 300)
    await wait_for(lambda: channel_stats(nsqd, "t", "ch") == (0, 0))
    await c.close()
    assert got == bodies
    assert c.stats.messages_finished == 300


async def test_async_iteration_and_explicit_answers(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"a", b"b", b"c"])
    seen: list[tuple[bytes, int]] = []
    async with Consumer("t", "ch", nsqd_tcp_addresses=[addr(nsqd)], max_in_flight=10) as c:
        async for msg in c:
            seen.append((msg.body, msg.attempts))
            assert msg.topic == "t" and msg.channel == "ch"
            assert msg.nsqd_address == addr(nsqd)
            if msg.body == b"b" and msg.attempts == 1:
                msg.requeue(0, backoff=False)
            else:
                msg.finish()
            if len(seen) == 4:
                break
    assert sorted(seen) == [(b"a", 1), (b"b", 1), (b"b", 2), (b"c", 1)]
    assert channel_stats(nsqd, "t", "ch") == (0, 0)


async def test_async_handler_runs_concurrently(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"x"] * 4)
    running = 0
    peak = 0
    release = asyncio.Event()
    done = 0

    async def handler(msg: Message) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        done += 1

    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=handler, concurrency=4,
                 max_in_flight=4)
    await c.start()
    await wait_for(lambda: peak == 4)
    release.set()
    await wait_for(lambda: done == 4)
    await c.close()
    assert c.stats.messages_finished == 4


async def test_handler_exception_requeues_and_max_attempts_gives_up(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"poison"])
    attempts: list[int] = []
    given_up: list[bytes] = []

    def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        msg.requeue(0)  # fail fast, no requeue delay
        raise RuntimeError("boom")

    cfg = Config(max_attempts=3, backoff_multiplier=0.01, max_backoff_duration=0.05)
    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=handler, config=cfg,
                 on_give_up=lambda m: given_up.append(m.body))
    await c.start()
    await wait_for(lambda: given_up == [b"poison"])
    await wait_for(lambda: channel_stats(nsqd, "t", "ch") == (0, 0))
    await c.close()
    assert attempts == [1, 2, 3]
    assert c.stats.messages_given_up == 1


async def test_backoff_pauses_then_recovers(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"fail", *[b"ok"] * 20])
    handled: list[bytes] = []
    failed = False

    def handler(msg: Message) -> None:
        nonlocal failed
        handled.append(msg.body)
        if msg.body == b"fail" and not failed:
            failed = True
            raise RuntimeError("transient")

    cfg = Config(backoff_multiplier=0.05, max_backoff_duration=0.2, default_requeue_delay=0)
    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=handler, config=cfg,
                 max_in_flight=1)
    await c.start()
    await wait_for(lambda: c.backoff_level == 1)
    conn = next(iter(c.connections.values()))
    assert conn.rdy == 0 or conn.rdy == 1  # paused, then testing the water with RDY 1
    await wait_for(lambda: len(handled) == 22)
    await wait_for(lambda: c.backoff_level == 0 and conn.rdy == 1)
    await c.close()
    assert Counter(handled) == Counter({b"ok": 20, b"fail": 2})


async def test_max_in_flight_spread_over_connections(nsqd_factory: NsqdFactory) -> None:
    daemons = [await nsqd_factory() for _ in range(3)]
    c = Consumer("t", "ch", nsqd_tcp_addresses=[addr(d) for d in daemons], handler=lambda m: None,
                 max_in_flight=10)
    await c.start()
    await wait_for(lambda: len(c.connections) == 3)
    assert sorted(conn.rdy for conn in c.connections.values()) == [3, 3, 4]
    await c.close()


async def test_low_rdy_redistributes_to_every_daemon(nsqd_factory: NsqdFactory) -> None:
    """More connections than max_in_flight: RDY 1 rotates so every nsqd is drained."""
    daemons = [await nsqd_factory() for _ in range(4)]
    for i, d in enumerate(daemons):
        await publish(d, "t", [b"d%d-%d" % (i, j) for j in range(3)])
    got: list[bytes] = []
    cfg = Config(low_rdy_idle_timeout=0.1, rdy_redistribute_interval=0.05)
    c = Consumer("t", "ch", nsqd_tcp_addresses=[addr(d) for d in daemons],
                 handler=lambda m: got.append(m.body), max_in_flight=2, config=cfg)
    await c.start()
    await wait_for(lambda: len(c.connections) == 4)
    assert sum(conn.rdy for conn in c.connections.values()) <= 2
    await wait_for(lambda: len(got) == 12, timeout=10)
    assert {b.split(b"-")[0] for b in got} == {b"d0", b"d1", b"d2", b"d3"}
    await c.close()


async def test_reconnects_after_daemon_restart(nsqd_factory: NsqdFactory) -> None:
    first = await nsqd_factory()
    port = first.tcp_port
    got: list[bytes] = []
    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(first), handler=lambda m: got.append(m.body))
    await c.start()
    await wait_for(lambda: len(c.connections) == 1)
    await first.stop()
    await wait_for(lambda: len(c.connections) == 0)
    second = await nsqd_factory(tcp_address=f"127.0.0.1:{port}")
    await wait_for(lambda: len(c.connections) == 1, timeout=20)
    await publish(second, "t", [b"after restart"])
    await wait_for(lambda: got == [b"after restart"])
    await c.close()


async def test_close_drains_in_flight(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"slow", b"queued"])
    started = asyncio.Event()
    release = asyncio.Event()
    handled: list[bytes] = []

    async def handler(msg: Message) -> None:
        started.set()
        await release.wait()
        handled.append(msg.body)

    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=handler, max_in_flight=1)
    await c.start()
    await started.wait()
    closing = asyncio.ensure_future(c.close(timeout=10))
    ch = nsqd.broker.topics["t"].channels["ch"]
    # CLS reached nsqd while the handler still holds its message
    await wait_for(lambda: all(cl.state == STATE_CLOSING for cl in ch.clients.values()))
    assert not closing.done()
    release.set()
    await closing
    assert handled == [b"slow"]
    assert c.stats.messages_finished == 1
    await wait_for(lambda: channel_stats(nsqd, "t", "ch") == (1, 0))


async def test_auto_touch_keeps_a_slow_message(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory()
    await publish(nsqd, "t", [b"slow"])
    release = asyncio.Event()
    attempts: list[int] = []
    touches: list[int] = []

    async def handler(msg: Message) -> None:
        attempts.append(msg.attempts)
        await release.wait()

    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), handler=handler,
                 config=Config(auto_touch=True, msg_timeout=1.0))
    await c.start()
    await wait_for(lambda: attempts == [1])
    conn = next(iter(c.connections.values()))
    sent = conn.send

    def spy(data: bytes) -> None:
        if data.startswith(b"TOUCH"):
            touches.append(1)
        sent(data)

    conn.send = spy  # type: ignore[method-assign]
    # held for two 1 s timeouts: only TOUCH keeps it from coming back
    await wait_for(lambda: len(touches) >= 4, timeout=10)
    release.set()
    await wait_for(lambda: c.stats.messages_finished == 1)
    await c.close()
    assert attempts == [1]
    assert nsqd.broker.topics["t"].channels["ch"].timeout_count == 0


def test_validation() -> None:
    with pytest.raises(ValueError):
        Consumer("bad topic", "ch", nsqd_tcp_addresses="127.0.0.1:4150")
    with pytest.raises(ValueError):
        Consumer("t", "ch")


async def test_change_max_in_flight_zero_stops_deliveries(nsqd: NSQD) -> None:
    await publish(nsqd, "t", [b"a", b"b", b"c"])
    got: list[Message] = []
    c = Consumer("t", "ch", nsqd_tcp_addresses=addr(nsqd), max_in_flight=1,
                 handler=lambda m: (got.append(m), m.disable_auto_response()))
    await c.start()
    await wait_for(lambda: len(got) == 1)
    c.change_max_in_flight(0)
    got[0].requeue(0, backoff=False)  # without RDY 0 this would come straight back
    ch = nsqd.broker.topics["t"].channels["ch"]
    await wait_for(lambda: (ch.depth, ch.in_flight_count) == (3, 0))
    assert len(got) == 1
    c.change_max_in_flight(2)
    await wait_for(lambda: len(got) == 3)
    await c.close(timeout=0.5)

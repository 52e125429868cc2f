"""The blocking facade (driven from a plain thread) and the HTTP publisher."""

from __future__ import annotations

import asyncio

import pytest
from conftest import wait_for

from nsqpy.client import HTTPError, NsqdHTTPClient
from nsqpy.client import sync as nsq_sync
from nsqpy.nsqd.app import NSQD


def run_blocking_round_trip(tcp: str) -> list[tuple[bytes, int]]:
    with nsq_sync.Producer(tcp) as p:
        p.publish("s", b"one")
        p.multi_publish("s", [b"two", b"three"])
        p.deferred_publish("s", b"four", 0.05)
    got: list[tuple[bytes, int]] = []
    with nsq_sync.Consumer("s", "ch", nsqd_tcp_addresses=tcp, max_in_flight=10) as c:
        for msg in c:
            got.append((msg.body, msg.attempts))
            if msg.body == b"one" and msg.attempts == 1:
                msg.requeue(0, backoff=False)
            else:
                msg.finish()
            if len(got) == 5:
                break
        assert c.get(timeout=0.01) is None  # nothing left
    return got


async def test_blocking_producer_and_consumer(nsqd: NSQD) -> None:
    tcp = f"127.0.0.1:{nsqd.tcp_port}"
    got = await asyncio.to_thread(run_blocking_round_trip, tcp)
    assert sorted(got) == [(b"four", 1), (b"one", 1), (b"one", 2), (b"three", 1), (b"two", 1)]
    ch = nsqd.broker.topics["s"].channels["ch"]
    await wait_for(lambda: (ch.depth, ch.in_flight_count) == (0, 0))


async def test_http_publish(nsqd: NSQD) -> None:
    async with NsqdHTTPClient(f"127.0.0.1:{nsqd.http_port}") as http:
        await http.publish("h", b"one")
        await http.publish("h", b"later", defer=1.0)
        await http.multi_publish("h", [b"a\nb", b"c"])
        stats = await http.stats(topic="h")
        with pytest.raises(HTTPError) as info:
            await http.publish("bad!", b"x")
    assert info.value.status == 400 and info.value.code == "INVALID_TOPIC"
    (topic,) = stats["topics"]
    assert topic["topic_name"] == "h" and topic["message_count"] == 4

"""The sampler's history through the API: every topic at once (/api/history/topics) and one
node's totals (/api/history?node=...), against lookupd + 2 real nsqd.

Each test starts its own nsqadmin with an injected clock and an hour-long interval, so only
the rounds the test takes (``sample_once``) are recorded, at the timestamps it chooses (up to
ten per series).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nsqpy.nsqadmin.app import NSQAdmin

from .conftest import AdminCluster, eventually

SECOND = 1_000_000_000


async def _value(value: Any) -> Any:
    return value


class Rounds:
    """An nsqadmin whose sampler records a round only when ``take(ts)`` says so."""

    def __init__(self, admin: NSQAdmin, now: list[float]) -> None:
        self.admin = admin
        self._now = now

    async def take(self, ts: float) -> None:
        assert self.admin.sampler is not None
        self._now[0] = ts
        await self.admin.sampler.sample_once()


async def manual_rounds(c: AdminCluster) -> Rounds:
    now = [1_000.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    admin = await c.start_admin(
        clock=clock, sample_interval=3600 * SECOND, history_duration=10 * 3600 * SECOND
    )
    sampler = admin.sampler
    assert sampler is not None
    await eventually(lambda: _value(sampler.rounds >= 1), True)  # the start-up round is done
    return Rounds(admin, now)


async def publish(c: AdminCluster, topic: str, count: int, node: int) -> None:
    await c.publish(topic, [b"m%d" % i for i in range(count)], node=node)


async def orders_and_clicks(c: AdminCluster) -> None:
    """orders (channel archive) on both nsqd, 3 messages on 0 and 2 on 1; clicks (no channel)
    on nsqd 1 only, 4 messages."""
    for node, count in ((0, 3), (1, 2)):
        await c.nsqd_post(node, "/topic/create?topic=orders")
        await c.nsqd_post(node, "/channel/create?topic=orders&channel=archive")
        await publish(c, "orders", count, node)
    await publish(c, "clicks", 4, 1)
    await c.wait_producers("orders", 2)
    await c.wait_producers("clicks", 1)


async def test_history_topics_gives_every_topic_at_once(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    rounds = await manual_rounds(c)
    await orders_and_clicks(c)
    await rounds.take(1_000.0)
    await publish(c, "orders", 3, 0)
    await publish(c, "orders", 1, 1)  # orders: +4 in 2 s
    await rounds.take(1_002.0)
    await publish(c, "clicks", 3, 1)  # clicks: +3 in 4 s; orders: +0
    await rounds.take(1_006.0)

    doc = await c.get_json("/api/history/topics", admin=rounds.admin)
    assert list(doc) == ["interval", "topics", "message"]
    assert (doc["interval"], doc["message"]) == (3600, "")
    assert doc["topics"] == {
        "clicks": {"ts": 1006, "depth": 7, "message_count": 7, "rate": 0.75,
                   "rates": [None, 0.0, 0.75]},
        "orders": {"ts": 1006, "depth": 0, "message_count": 9, "rate": 0.0,
                   "rates": [None, 2.0, 0.0]},
    }  # fmt: skip
    # the same numbers as one topic's /api/history
    one = await c.get_json("/api/history?topic=orders", admin=rounds.admin)
    assert [p["rate"] for p in one["points"]] == doc["topics"]["orders"]["rates"]

    # bounded: the last N rounds, the first of them with its true rate
    two = await c.get_json("/api/history/topics?points=2", admin=rounds.admin)
    assert two["topics"]["orders"]["rates"] == [2.0, 0.0]
    assert two["topics"]["clicks"]["rates"] == [0.0, 0.75]
    last = await c.get_json("/api/history/topics?points=1", admin=rounds.admin)
    assert last["topics"]["clicks"] == {
        "ts": 1006, "depth": 7, "message_count": 7, "rate": 0.75, "rates": [0.75],
    }  # fmt: skip
    for bad in ("0", "601", "-1", "x", "1.5"):
        reply = await c.api("GET", f"/api/history/topics?points={bad}", admin=rounds.admin)
        assert (reply.status, reply.message) == (400, "INVALID_POINTS"), bad
    empty = await c.get_json("/api/history/topics?points=", admin=rounds.admin)  # the default
    assert empty["topics"]["orders"]["rates"] == [None, 2.0, 0.0]

    # a deleted topic leaves the answer at the next round
    await c.nsqd_post(1, "/topic/delete?topic=clicks")
    await rounds.take(1_008.0)
    after = await c.get_json("/api/history/topics", admin=rounds.admin)
    assert list(after["topics"]) == ["orders"]


async def test_history_topics_rates_are_rounded(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    rounds = await manual_rounds(c)
    await publish(c, "thirds", 1, 0)
    await c.wait_producers("thirds", 1)
    await rounds.take(1_000.0)
    await publish(c, "thirds", 1, 0)
    await rounds.take(1_003.0)
    doc = await c.get_json("/api/history/topics", admin=rounds.admin)
    assert doc["topics"]["thirds"]["rates"] == [None, 0.333]


async def test_history_of_one_node_is_its_totals(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    rounds = await manual_rounds(c)
    await orders_and_clicks(c)
    await rounds.take(1_000.0)
    await publish(c, "clicks", 2, 1)
    await publish(c, "orders", 1, 1)
    await publish(c, "orders", 5, 0)
    await rounds.take(1_002.0)

    async def fields(query: str, *keys: str) -> list[tuple[Any, ...]]:
        doc = await c.get_json(f"/api/history?{query}", admin=rounds.admin)
        assert doc["message"] == ""
        return [tuple(p[k] for k in keys) for p in doc["points"]]

    keys = ("ts", "depth", "message_count", "rate")
    node1 = f"node={c.node(1)}"
    # nsqd 1's topics: orders (its messages went on to archive, so depth 0) and clicks (no
    # channel: its depth is its messages); nsqd 0's 8 orders are not counted
    assert await fields(node1, *keys) == [(1000, 4, 6, None), (1002, 6, 9, 1.5)]
    assert await fields(f"node={c.node(0)}", *keys) == [(1000, 0, 3, None), (1002, 0, 8, 2.5)]
    # channel=*: the node's channels, where a backlog waits once a topic has channels
    assert await fields(f"{node1}&channel=*", *keys, "in_flight_count") == [
        (1000, 2, 2, None, 0),
        (1002, 3, 3, 0.5, 0),
    ]
    assert await fields("channel=*", *keys) == [(1000, 5, 5, None), (1002, 11, 11, 3.0)]
    assert await fields(f"topic=orders&channel=*&{node1}", "depth") == [(2,), (3,)]
    # the cluster total is both nodes' totals
    assert await fields("", *keys) == [(1000, 4, 9, None), (1002, 6, 17, 4.0)]
    assert await fields("node=127.0.0.1:1", *keys) == []


@pytest.mark.parametrize("path", ["/api/history/topics", "/api/history?node=127.0.0.1:1"])
async def test_history_without_topics_is_empty(admin_cluster: AdminCluster, path: str) -> None:
    doc = await admin_cluster.get_json(path)
    assert doc["message"] == ""
    assert doc.get("topics", {}) == {} and doc.get("points", []) == []

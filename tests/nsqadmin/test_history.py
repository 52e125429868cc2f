"""The sampled history (pure, timestamps given by the test) and the alerts parser."""

from __future__ import annotations

from typing import Any

import pytest

from nsqpy.nsqadmin.history import History
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.nsqadmin.sampler import history_capacity, parse_alerts

SECOND = 1_000_000_000


def stats(*topics: dict[str, Any]) -> dict[str, Any]:
    return {"version": "1.3.0", "topics": list(topics)}


def topic(name: str, depth: int, messages: int, *channels: dict[str, Any]) -> dict[str, Any]:
    return {
        "topic_name": name,
        "depth": depth,
        "message_count": messages,
        "channels": list(channels),
    }


def channel(
    name: str, depth: int, messages: int, in_flight: int = 0, deferred: int = 0
) -> dict[str, Any]:
    return {
        "channel_name": name,
        "depth": depth,
        "message_count": messages,
        "in_flight_count": in_flight,
        "deferred_count": deferred,
    }


def point(points: list[dict[str, Any]], i: int) -> tuple[Any, ...]:
    p = points[i]
    keys = ("ts", "depth", "in_flight_count", "deferred_count", "message_count", "rate")
    return tuple(p[k] for k in keys)


def test_topic_points_sum_nodes_and_rates_are_per_second() -> None:
    h = History(capacity=10)
    h.record(100.0, {"a:1": stats(topic("t", 5, 10)), "b:1": stats(topic("t", 1, 2))})
    h.record(102.0, {"a:1": stats(topic("t", 7, 20)), "b:1": stats(topic("t", 1, 6))})
    h.record(104.0, {"a:1": stats(topic("t", 0, 20)), "b:1": stats(topic("t", 0, 6))})
    points = h.points("t")
    assert [point(points, i) for i in range(3)] == [
        (100.0, 6, 0, 0, 12, None),  # no rate for a first point
        (102.0, 8, 0, 0, 26, 7.0),  # (10 + 4) messages / 2 s
        (104.0, 0, 0, 0, 26, 0.0),
    ]
    assert [p["message_count"] for p in h.points("t", node="b:1")] == [2, 6, 6]
    assert h.points("other") == []


def test_channel_points_and_topic_in_flight_sums() -> None:
    h = History(capacity=10)
    h.record(
        10.0,
        {"a:1": stats(topic("t", 0, 3, channel("c", 2, 3, in_flight=1, deferred=0),
                                        channel("d", 0, 3, in_flight=2, deferred=1)))},
    )  # fmt: skip
    assert point(h.points("t", "c"), 0) == (10.0, 2, 1, 0, 3, None)
    assert point(h.points("t"), 0) == (10.0, 0, 3, 1, 3, None)


def test_cluster_total_is_every_topic() -> None:
    h = History(capacity=10)
    h.record(1.0, {"a:1": stats(topic("t", 1, 1, channel("c", 1, 1)), topic("u", 2, 4))})
    h.record(2.0, {"a:1": stats(topic("t", 1, 3, channel("c", 1, 3)), topic("u", 2, 5))})
    points = h.points()
    assert [(p["depth"], p["message_count"], p["rate"]) for p in points] == [
        (3, 5, None),
        (3, 8, 3.0),  # channels are not counted twice
    ]


def test_rings_are_bounded() -> None:
    h = History(capacity=3)
    for i in range(10):
        h.record(float(i), {"a:1": stats(topic("t", i, i))})
    assert [p["ts"] for p in h.points("t")] == [7.0, 8.0, 9.0]
    with pytest.raises(ValueError):
        History(capacity=0)


def test_counter_going_backwards_gives_no_rate() -> None:
    h = History(capacity=10)
    h.record(1.0, {"a:1": stats(topic("t", 0, 50))})
    h.record(2.0, {"a:1": stats(topic("t", 0, 3))})  # nsqd restarted
    h.record(3.0, {"a:1": stats(topic("t", 0, 5))})
    assert [p["rate"] for p in h.points("t")] == [None, None, 2.0]


def test_vanished_series_and_nodes_are_dropped_but_failed_nodes_kept() -> None:
    h = History(capacity=10)
    a_stats = stats(topic("t", 0, 1, channel("c", 0, 1)))
    h.record(1.0, {"a:1": a_stats, "b:1": stats(topic("u", 0, 1))})
    assert len(h) == 3
    h.record(2.0, {"a:1": stats(topic("t", 0, 1)), "b:1": None})  # channel deleted; b down
    assert h.points("t", "c") == []
    assert [p["ts"] for p in h.points("u")] == [1.0]  # kept while b is only failing
    h.record(3.0, {"a:1": stats()})  # topic deleted, b gone from the cluster
    assert len(h) == 0


def test_capacity_from_options() -> None:
    opts = NsqadminOptions(sample_interval=2 * SECOND, history_duration=600 * SECOND)
    assert history_capacity(opts) == 300
    opts = NsqadminOptions(sample_interval=7 * SECOND, history_duration=20 * SECOND)
    assert history_capacity(opts) == 3


def test_alerts_parser() -> None:
    doc = {
        "topics": [],
        "alerts": [
            {"topic": "t", "channel": "c", "kind": "depth", "value": 1234, "threshold": 1000,
             "since": 1700000000},
            {"topic": "t", "channel": "", "kind": "age", "value": 90 * SECOND,
             "threshold": 60 * SECOND, "since": 1700000001},
            {"topic": "t", "kind": "bogus", "value": 1},
            "junk",
        ],
    }  # fmt: skip
    assert parse_alerts("h:4151", doc) == [
        {"node": "h:4151", "topic": "t", "channel": "c", "kind": "depth", "value": 1234,
         "threshold": 1000, "since": 1700000000},
        {"node": "h:4151", "topic": "t", "channel": "", "kind": "age", "value": 90.0,
         "threshold": 60.0, "since": 1700000001},
    ]  # fmt: skip
    assert parse_alerts("h:4151", {"topics": []}) == []


def test_topic_summaries_sum_nodes_and_keep_the_last_rates() -> None:
    h = History(capacity=10)
    h.record(100.0, {"a:1": stats(topic("t", 5, 10)), "b:1": stats(topic("t", 1, 2))})
    h.record(102.0, {"a:1": stats(topic("t", 7, 20)), "b:1": stats(topic("t", 1, 6))})
    h.record(104.0, {"a:1": stats(topic("t", 0, 20), topic("u", 3, 3)), "b:1": None})
    assert h.topic_summaries(limit=60) == {
        "t": {"ts": 104.0, "depth": 0, "message_count": 20, "rate": 0.0,
              "rates": [None, 7.0, 0.0]},  # b failed the last round: its part is missing
        "u": {"ts": 104.0, "depth": 3, "message_count": 3, "rate": None, "rates": [None]},
    }  # fmt: skip
    assert h.topic_summaries(limit=2)["t"]["rates"] == [7.0, 0.0]
    # the same sums as points(): one pass for every topic instead of a query per topic
    assert [p["rate"] for p in h.points("t")] == h.topic_summaries(limit=3)["t"]["rates"]
    with pytest.raises(ValueError):
        h.topic_summaries(limit=0)


def test_topic_summaries_cut_series_keep_true_rates() -> None:
    # b misses rounds 3..5, so its last samples reach further back than a's: every kept
    # round's rate must still use each series' real previous sample
    h = History(capacity=20)
    for i in range(10):
        b = None if 3 <= i <= 5 else stats(topic("t", 0, 100 * i))
        h.record(float(i), {"a:1": stats(topic("t", 0, i)), "b:1": b})
    full = [p["rate"] for p in h.points("t")]
    for limit in range(1, 11):
        assert h.topic_summaries(limit)["t"]["rates"] == full[-limit:], limit
    assert full[6] == 1.0 + 100 * 4 / 4  # b's rate across its gap, averaged over 4 s


def test_node_totals_and_every_channel() -> None:
    h = History(capacity=10)
    a_stats = stats(
        topic("t", 1, 5, channel("c", 2, 4, in_flight=1), channel("d", 3, 4)),
        topic("u", 7, 7),
    )
    h.record(1.0, {"a:1": a_stats, "b:1": stats(topic("t", 9, 9, channel("c", 9, 9)))})
    assert point(h.points(node="a:1"), 0) == (1.0, 8, 1, 0, 12, None)  # t and u, not b
    assert point(h.points(channel="*", node="a:1"), 0) == (1.0, 5, 1, 0, 8, None)
    assert point(h.points("t", "*"), 0) == (1.0, 14, 1, 0, 17, None)  # both nodes' channels
    assert h.points("u", "*") == []

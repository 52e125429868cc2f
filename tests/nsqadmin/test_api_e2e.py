"""/api/topics/:topic's end-to-end latency aggregate over two real nsqds that compute it.

Each nsqd runs with ``e2e_processing_latency_percentiles=[0.99, 0.5]`` (the
``--e2e-processing-latency-percentile=0.99,0.5`` flag); a raw V2 consumer FINs every message,
with the channel's wall clock moved a known amount ahead on each node (and a little more for
each later FIN), so the two nodes report clearly different latencies, and p99 differs from
p50. nsqadmin must merge them as NSQ's ``quantile.E2eProcessingLatencyAggregate.Add`` does:
per quantile the count-weighted average, the max, and NSQ's ``min`` (the last node's value, a
quirk kept), counts summed, host ``*``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from v2client import RawV2

from nsqpy.nsqd.app import NSQD

from .conftest import AdminCluster, eventually

MS = 1_000_000
QUANTILES = [0.99, 0.5]
#: node i's FINs happen this much "later" on its channel's clock, and this many messages;
#: each FIN STEP later than the one before.
AHEAD = (100 * MS, 400 * MS)
COUNTS = (6, 10)  # enough for perks' p50 to be another sample than its p99
STEP = 10 * MS


async def _true(value: Any) -> Any:
    return value


async def consume(c: AdminCluster, nsqd: NSQD, count: int, ahead: int) -> None:
    """Publish ``count`` messages to timed/work on ``nsqd``; FIN k is ``ahead + k * STEP`` ns
    late."""
    consumer = await RawV2.connect(nsqd.tcp_port)
    try:
        await consumer.sub("timed", "work", rdy=count)  # the channel exists before the publish
        chan = nsqd.broker.topics["timed"].channels["work"]
        late = [ahead]
        chan.wall_ns = lambda: time.time_ns() + late[0]
        url = f"http://127.0.0.1:{nsqd.http_port}/mpub?topic=timed"
        async with c.http.post(url, data=b"\n".join(b"m%d" % i for i in range(count))) as resp:
            assert resp.status == 200
        for k in range(count):
            msg = await consumer.message()
            late[0] = ahead + k * STEP
            consumer.cmd(f"FIN {msg.id.decode()}")
            # nsqd reads the clock when it handles the FIN: let it, before the clock moves on
            await eventually(lambda: _true(chan.e2e_summary().count), k + 1)
    finally:
        await consumer.close()


def expected_aggregate(per_node: list[dict[str, Any]]) -> dict[float, dict[str, float]]:
    """NSQ's merge of the nodes' percentiles, in the order nsqadmin lists the nodes."""
    merged: dict[float, dict[str, float]] = {}
    for e2e in per_node:
        for p in e2e["percentiles"]:
            total = merged.setdefault(p["quantile"], {"count": 0.0, "average": 0.0, "max": 0.0})
            total["max"] = max(total["max"], p["value"])
            total["min"] = min(p["value"], total["max"])
            total["count"] += e2e["count"]
            total["average"] += (p["value"] - total["average"]) * e2e["count"] / total["count"]
    return merged


async def test_topic_and_channel_e2e_aggregate_two_nsqds(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    started = time.time_ns()
    timed = [await c.start_nsqd(e2e_processing_latency_percentiles=QUANTILES) for _ in range(2)]
    for nsqd, count, ahead in zip(timed, COUNTS, AHEAD, strict=True):
        await consume(c, nsqd, count, ahead)
    elapsed = time.time_ns() - started
    await c.wait_producers("timed", 2)

    doc = await c.get_json("/api/topics/timed")
    names = [f"127.0.0.1:{n.http_port}" for n in timed]
    assert sorted(n["node"] for n in doc["nodes"]) == sorted(names)
    # each node's own figures, as its nsqd reports them
    stats = {}
    for nsqd, name in zip(timed, names, strict=True):
        [topic] = (await c.nsqd_stats(c.nsqds.index(nsqd), "timed"))["topics"]
        stats[name] = topic
    for node, count, ahead in zip(names, COUNTS, AHEAD, strict=True):
        values = [p["value"] for p in stats[node]["e2e_processing_latency"]["percentiles"]]
        assert stats[node]["e2e_processing_latency"]["count"] == count
        assert all(ahead <= v <= ahead + count * STEP + elapsed for v in values), values
        assert values[0] > values[1]  # p99 is the latest FIN, p50 one in the middle
    # per node in the API: the node's value as min, max and average, with its count
    for one in doc["nodes"]:
        raw = stats[one["node"]]["e2e_processing_latency"]
        e2e = one["e2e_processing_latency"]
        assert e2e["count"] == raw["count"]
        for p, r in zip(e2e["percentiles"], raw["percentiles"], strict=True):
            assert p == {
                "average": r["value"], "count": raw["count"], "max": r["value"],
                "min": r["value"], "quantile": r["quantile"], "value": r["value"],
            }  # fmt: skip

    total = doc["e2e_processing_latency"]
    assert (total["count"], total["host"], total["topic"], total["channel"]) == (
        sum(COUNTS), "*", "timed", "",
    )  # fmt: skip
    order = [stats[one["node"]]["e2e_processing_latency"] for one in doc["nodes"]]
    want = expected_aggregate(order)
    assert [p["quantile"] for p in total["percentiles"]] == QUANTILES
    for p in total["percentiles"]:
        assert list(p) == ["average", "count", "max", "min", "quantile"]  # a Go map: sorted
        w = want[p["quantile"]]
        assert p["count"] == sum(COUNTS)
        assert p["max"] == w["max"] and p["min"] == w["min"]
        assert p["average"] == pytest.approx(w["average"])
        # between the nodes, nearer the slow one: 10 of 16 messages waited over 400 ms
        assert AHEAD[0] < p["average"] < AHEAD[1] + COUNTS[1] * STEP + elapsed
        assert p["max"] >= AHEAD[1]
    p99, p50 = total["percentiles"]
    assert p99["average"] > p50["average"]

    # the channel aggregate merges the same way; /api/topics/:topic/:channel gives the same
    [channel] = doc["channels"]
    assert channel["e2e_processing_latency"]["channel"] == "work"
    by_channel = await c.get_json("/api/topics/timed/work")
    assert by_channel["e2e_processing_latency"] == channel["e2e_processing_latency"]
    for p in channel["e2e_processing_latency"]["percentiles"]:
        assert p["count"] == sum(COUNTS)
        assert AHEAD[0] < p["average"] < AHEAD[1] + COUNTS[1] * STEP + elapsed

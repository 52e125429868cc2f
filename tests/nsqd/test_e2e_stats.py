"""End-to-end processing latency in a real nsqd: recorded on FIN over TCP, shown by /stats.

The percentiles come from the command line exactly as nsqd parses it (repeatable and
comma-split, sorted descending). Where values are checked precisely, the channel's wall
clock (its injected ``wall_ns``) is moved ahead by a known amount before each FIN.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import HttpApi
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.client import ClientState
from nsqpy.nsqd.core.topic import Topic
from nsqpy.nsqd.options import parse_nsqd_args

MS = 1_000_000
FLAGS = [
    "--e2e-processing-latency-percentile=1.0,0.99",
    "--e2e-processing-latency-percentile=0.5",
]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def start(nsqd_factory: NsqdFactory, flags: list[str]) -> NSQD:
    opts = parse_nsqd_args(flags)
    return await nsqd_factory(
        e2e_processing_latency_percentiles=opts.e2e_processing_latency_percentiles
    )


def api(session: aiohttp.ClientSession, nsqd: NSQD) -> HttpApi:
    return HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")


async def consume_and_finish(nsqd: NSQD, topic: str, channel: str, count: int) -> RawV2:
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub(topic, channel, rdy=count)
    for _ in range(count):
        msg = await consumer.message()
        consumer.cmd(f"FIN {msg.id.decode()}")
    chan = nsqd.broker.topics[topic].channels[channel]
    await wait_for(lambda: chan.in_flight_count == 0 and chan.e2e_summary().count == count)
    return consumer


def test_the_flag_is_repeatable_and_comma_split() -> None:
    assert parse_nsqd_args(FLAGS).e2e_processing_latency_percentiles == [1.0, 0.99, 0.5]


async def test_stats_json_shape_and_plausible_values(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await start(nsqd_factory, FLAGS)
    http = api(session, nsqd)
    started = time.time_ns()
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c")  # the channel exists before the publish
    reply = await http.post("/mpub?topic=t", b"\n".join(b"m%d" % i for i in range(30)))
    assert reply.status == 200
    await consume_and_finish(nsqd, "t", "c", 30)
    elapsed = time.time_ns() - started

    reply = await http.get("/stats?format=json")
    # Go's encoding: a map's keys sorted, and the 100th percentile as 1, not 1.0
    assert b'"percentiles":[{"quantile":1,"value":' in reply.body
    [topic] = reply.json["topics"]
    [channel] = topic["channels"]
    for latency in (channel["e2e_processing_latency"], topic["e2e_processing_latency"]):
        assert list(latency) == ["count", "percentiles"]
        assert latency["count"] == 30
        assert [list(p) for p in latency["percentiles"]] == [["quantile", "value"]] * 3
        assert [p["quantile"] for p in latency["percentiles"]] == [1, 0.99, 0.5]
        values = [p["value"] for p in latency["percentiles"]]
        assert all(0 < v <= elapsed for v in values), (values, elapsed)
        assert values == sorted(values, reverse=True)
    await consumer.close()


async def test_values_follow_the_latencies(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    """FIN k happens k * 100ms "later" on the channel's clock: the percentiles see it."""
    nsqd = await start(nsqd_factory, FLAGS)
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=1)
    chan = nsqd.broker.topics["t"].channels["c"]
    ahead = 0
    chan.wall_ns = lambda: time.time_ns() + ahead
    started = time.time_ns()
    reply = await api(session, nsqd).post("/mpub?topic=t", b"\n".join([b"x"] * 20))
    assert reply.status == 200
    for k in range(1, 21):
        msg = await consumer.message()
        ahead = k * 100 * MS
        consumer.cmd(f"FIN {msg.id.decode()}")
        await wait_for(lambda k=k: chan.e2e_summary().count == k)
    slack = time.time_ns() - started  # how late, in real time, any FIN could have been
    summary = chan.e2e_summary()
    assert summary.percentiles is not None
    p100, p99, p50 = (value for _, value in summary.percentiles)
    assert 2000 * MS <= p100 <= 2000 * MS + slack
    assert 1900 * MS <= p99 <= 2000 * MS + slack
    assert 900 * MS <= p50 <= 1200 * MS + slack  # rank 10 or 11 of 20, give or take one
    await consumer.close()


async def test_topic_merges_its_channels(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await start(nsqd_factory, FLAGS)
    consumers = [await RawV2.connect(nsqd.tcp_port) for _ in range(2)]
    for consumer, channel in zip(consumers, ("a", "b"), strict=True):
        await consumer.sub("t", channel)
    http = api(session, nsqd)
    assert (await http.post("/mpub?topic=t", b"1\n2\n3\n4")).status == 200
    await consume_and_finish(nsqd, "t", "a", 4)
    await consume_and_finish(nsqd, "t", "b", 4)
    stats = (await http.get("/stats?format=json")).json
    [topic] = stats["topics"]
    assert [c["e2e_processing_latency"]["count"] for c in topic["channels"]] == [4, 4]
    assert topic["e2e_processing_latency"]["count"] == 8
    for consumer in consumers:
        await consumer.close()


async def test_configured_but_nothing_finished_yet(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await start(nsqd_factory, FLAGS)
    http = api(session, nsqd)
    for topic in ("lonely", "t"):
        assert (await http.post(f"/topic/create?topic={topic}")).status == 200
    assert (await http.post("/channel/create?topic=t&channel=c")).status == 200
    stats = (await http.get("/stats?format=json")).json
    lonely, t = stats["topics"]
    # a topic without channels has nothing to merge: null, as nsqd's nil quantile gives
    assert lonely["e2e_processing_latency"] == {"count": 0, "percentiles": None}
    zeros = [{"quantile": q, "value": 0} for q in (1, 0.99, 0.5)]
    assert t["channels"][0]["e2e_processing_latency"] == {"count": 0, "percentiles": zeros}
    assert t["e2e_processing_latency"] == {"count": 0, "percentiles": zeros}


async def test_without_the_flag_percentiles_are_null(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await start(nsqd_factory, [])
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=1)
    http = api(session, nsqd)
    assert (await http.post("/pub?topic=t", b"hello")).status == 200
    msg = await consumer.message()
    consumer.cmd(f"FIN {msg.id.decode()}")
    chan = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: chan.in_flight_count == 0)
    assert chan.e2e is None
    [topic] = (await http.get("/stats?format=json")).json["topics"]
    null = {"count": 0, "percentiles": None}
    assert topic["e2e_processing_latency"] == null
    assert topic["channels"][0]["e2e_processing_latency"] == null
    text = (await http.get("/stats")).body.decode()
    assert re.search(r"^   \[t +\] depth: .* e2e%: $", text, re.M)
    assert re.search(r"^      \[c +\] depth: .* e2e%: $", text, re.M)
    await consumer.close()


async def test_text_stats_show_human_durations(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await start(nsqd_factory, FLAGS)
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c")
    http = api(session, nsqd)
    assert (await http.post("/mpub?topic=t", b"a\nb\nc")).status == 200
    await consume_and_finish(nsqd, "t", "c", 3)
    text = (await http.get("/stats")).body.decode()
    human = r"\d+\.\d(?:s|ms|us|ns)"
    triple = rf"{human}, {human}, {human}"
    assert re.search(rf"^   \[t +\] depth: 0 +be-depth: 0 +msgs: 3 +e2e%: {triple}$", text, re.M)
    channel_line = rf"^      \[c +\] depth: 0 .* msgs: 3 +e2e%: {triple}$"
    assert re.search(channel_line, text, re.M), text
    await consumer.close()


def test_the_latency_hook_costs_nothing_when_off() -> None:
    """Without the flag no channel carries a window: FIN's only extra work is a None check."""
    channel = Channel("t", "c", mem_queue_size=10, max_msg_timeout=60.0)
    assert channel.e2e is None
    assert channel.e2e_summary().percentiles is None


def test_finish_and_finish_many_record_now_minus_publish_time() -> None:
    """The domain objects alone, on an injected wall clock: exact latencies."""
    clock = [1_000 * MS]
    topic = Topic("t", mem_queue_size=100, max_msg_timeout=60.0, wall_ns=lambda: clock[0])
    channel, _ = topic.get_channel("c", 0.0)
    channel.track_e2e(600 * 1000 * MS, [1.0, 0.5])
    client = ClientState(1, lambda msg: None)
    client.writable = True
    channel.add_client(client)
    ids = [b"%016x" % i for i in range(4)]
    topic.put([b"body"] * 4, ids, 990 * MS, 0.0)  # published 10ms before the clock
    channel.set_rdy(client, 4, 0.0)
    channel.finish(client, ids[0], 0.0)  # FIN: 10ms
    clock[0] += 20 * MS
    assert channel.finish_many(client, ids[1:], 0.0) == []  # three FINs at 30ms each
    assert channel.e2e_summary().percentiles == [(1.0, 30.0 * MS), (0.5, 30.0 * MS)]
    assert channel.e2e_summary().count == 4
    other, _ = topic.get_channel("untracked", 0.0)  # a channel without a window is skipped
    assert other.e2e is None
    summary = topic.e2e_summary()
    assert (summary.count, summary.percentiles) == (4, [(1.0, 30.0 * MS), (0.5, 30.0 * MS)])

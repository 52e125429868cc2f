"""nsqd's ``GET /metrics`` over real sockets, read with prometheus_client's parser and checked
family by family against ``/stats`` taken at the same (quiet) moment."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import HttpApi
from prometheus_client.parser import text_string_to_metric_families
from v2client import RawV2

from nsqpy.nsqd.app import NSQD

PROM_CT = "text/plain; version=0.0.4; charset=utf-8"
ODD_TOPIC = "a.b_c#ephemeral"

#: /metrics sample name -> /stats JSON field, per topic and per channel.
TOPIC_SAMPLES = {
    "nsq_topic_depth": "depth",
    "nsq_topic_backend_depth": "backend_depth",
    "nsq_topic_messages_total": "message_count",
    "nsq_topic_message_bytes_total": "message_bytes",
    "nsq_topic_paused": "paused",
}
CHANNEL_SAMPLES = {
    "nsq_channel_depth": "depth",
    "nsq_channel_backend_depth": "backend_depth",
    "nsq_channel_in_flight": "in_flight_count",
    "nsq_channel_deferred": "deferred_count",
    "nsq_channel_messages_total": "message_count",
    "nsq_channel_requeues_total": "requeue_count",
    "nsq_channel_timeouts_total": "timeout_count",
    "nsq_channel_clients": "client_count",
    "nsq_channel_paused": "paused",
}
DAEMON_SAMPLES = {
    "nsq_build_info",
    "nsq_health",
    "nsq_start_time_seconds",
    "nsq_topics",
    "nsq_channels",
    "nsq_connections",
    "nsq_producers",
}
E2E = {"nsq_topic_e2e_processing_latency_seconds", "nsq_channel_e2e_processing_latency_seconds"}

Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name -> type, sample name -> {label set: value})."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            key = frozenset(sample.labels.items())
            assert key not in samples.setdefault(sample.name, {}), sample
            samples[sample.name][key] = sample.value
    return types, samples


def key(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


async def consumer(nsqd: NSQD, topic: str, channel: str, rdy: int) -> RawV2:
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub(topic, channel, rdy=rdy)
    chan = nsqd.broker.topics[topic].channels[channel]
    await wait_for(lambda: any(c.rdy == rdy for c in chan.clients.values()))
    return conn


async def busy_nsqd(nsqd_factory: NsqdFactory, api_for: Any) -> tuple[NSQD, HttpApi, list[RawV2]]:
    """Topics and channels in every state: queued in memory and on disk, in flight, deferred,
    requeued, paused, held by a channel-less topic, ephemeral; a producer and consumers."""
    nsqd = await nsqd_factory(mem_queue_size=3, e2e_processing_latency_percentiles=[1.0, 0.5])
    api: HttpApi = api_for(nsqd)
    for path in (
        "/topic/create?topic=orders",
        "/channel/create?topic=orders&channel=audit",
        "/channel/create?topic=orders&channel=archive",
        "/channel/create?topic=orders&channel=paused",
        "/channel/pause?topic=orders&channel=paused",
        "/topic/create?topic=held",
        "/topic/create?topic=stopped",
        "/topic/pause?topic=stopped",
    ):
        assert (await api.post(path)).status == 200
    producer = await RawV2.connect(nsqd.tcp_port)
    for i in range(6):
        await producer.pub("orders", b"order %d" % i)
    assert (await api.post("/mpub?topic=held", b"a\nbb\nccc\ndddd\neeeee")).status == 200
    assert (await api.post("/pub?topic=stopped", b"x")).status == 200
    reader = await consumer(nsqd, "orders", "archive", rdy=3)
    first, second, _third = [await reader.message() for _ in range(3)]
    reader.cmd(f"FIN {first.id.decode()}")
    reader.cmd(f"REQ {second.id.decode()} 60000")
    odd = await consumer(nsqd, ODD_TOPIC, "x#ephemeral", rdy=0)
    assert (await api.post(f"/pub?topic={quote(ODD_TOPIC)}", b"odd")).status == 200
    chan = nsqd.broker.topics["orders"].channels["archive"]
    # the FIN and the REQ each open the window for one more message: 3 in flight again
    await wait_for(lambda: chan.deferred_count == 1 and chan.in_flight_count == 3)
    return nsqd, api, [producer, reader, odd]


@pytest.fixture
def api_for(session: aiohttp.ClientSession) -> Any:
    return lambda nsqd: HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")


async def test_metrics_match_stats(nsqd_factory: NsqdFactory, api_for: Any) -> None:
    nsqd, api, conns = await busy_nsqd(nsqd_factory, api_for)
    before = (await api.get("/stats?format=json")).json
    reply = await api.get("/metrics")
    after = (await api.get("/stats?format=json")).json
    for doc in (before, after):
        del doc["memory"]
    assert before == after  # nothing moved meanwhile: /metrics saw the same numbers
    assert reply.status == 200
    assert reply.headers["Content-Type"] == PROM_CT
    assert "X-NSQ-Content-Type" not in reply.headers
    types, samples = parse(reply.body.decode())
    checked = check_queues(before, samples) | check_daemon(nsqd, before, samples)
    unchecked = {n for n in samples if n.startswith("nsq_") and n not in checked}
    assert not unchecked
    assert types["nsq_topic_messages"] == "counter"  # the parser drops _total
    assert types["nsq_channel_depth"] == "gauge"
    assert types["nsq_channel_e2e_processing_latency_seconds"] == "gauge"
    for conn in conns:
        await conn.close()


def check_queues(stats: dict[str, Any], samples: Samples) -> set[str]:
    """Every topic and channel figure equals /stats'; returns the sample names checked."""
    topics = stats["topics"]
    assert {t["topic_name"] for t in topics} == {"orders", "held", "stopped", ODD_TOPIC}
    for name, field in TOPIC_SAMPLES.items():
        expected = {key(topic=t["topic_name"]): float(t[field]) for t in topics}
        assert samples[name] == expected, name
    for name, field in CHANNEL_SAMPLES.items():
        expected = {
            key(topic=t["topic_name"], channel=c["channel_name"]): float(c[field])
            for t in topics
            for c in t["channels"]
        }
        assert samples[name] == expected, name
    archive = samples["nsq_channel_in_flight"][key(topic="orders", channel="archive")]
    assert archive == 3  # the fixture's state really is varied
    assert samples["nsq_channel_backend_depth"][key(topic="orders", channel="audit")] == 3
    assert samples["nsq_topic_paused"][key(topic="stopped")] == 1
    check_e2e(topics, samples)
    return set(TOPIC_SAMPLES) | set(CHANNEL_SAMPLES) | E2E


def check_e2e(topics: list[dict[str, Any]], samples: Samples) -> None:
    """Percentiles as /stats shows them (ns there, seconds here), quantile labels as Go prints
    floats ("1", "0.5")."""
    expected: dict[str, dict[frozenset[tuple[str, str]], float]] = {name: {} for name in E2E}
    for topic in topics:
        owners: list[tuple[str, dict[str, Any], dict[str, str]]]
        owners = [("nsq_topic_e2e_processing_latency_seconds", topic, {})]
        owners += [
            ("nsq_channel_e2e_processing_latency_seconds", c, {"channel": c["channel_name"]})
            for c in topic["channels"]
        ]
        for name, owner, extra in owners:
            for p in owner["e2e_processing_latency"]["percentiles"] or ():
                q = f"{p['quantile']:g}"
                labels = key(topic=topic["topic_name"], **extra, quantile=q)
                expected[name][labels] = p["value"] / 1e9
    # the fixture FINs one message on orders/archive with percentiles configured
    archive = key(topic="orders", channel="archive", quantile="1")
    assert archive in expected["nsq_channel_e2e_processing_latency_seconds"]
    for name in E2E:
        got = samples.get(name, {})
        assert got.keys() == expected[name].keys()
        for labels, value in expected[name].items():
            assert math.isclose(got[labels], value)


def check_daemon(nsqd: NSQD, stats: dict[str, Any], samples: Samples) -> set[str]:
    topics = stats["topics"]
    [(info_labels, info)] = samples["nsq_build_info"].items()
    assert info == 1 and dict(info_labels)["version"] == stats["version"]
    assert dict(info_labels)["daemon"] == "nsqd"
    assert samples["nsq_health"] == {key(): 1.0} and stats["health"] == "OK"
    assert samples["nsq_start_time_seconds"] == {key(): stats["start_time"]}
    assert samples["nsq_topics"] == {key(): len(topics)}
    assert samples["nsq_channels"] == {key(): sum(len(t["channels"]) for t in topics)}
    assert samples["nsq_producers"] == {key(): len(stats["producers"])} == {key(): 1}
    consumers = sum(c["client_count"] for t in topics for c in t["channels"])
    assert samples["nsq_connections"] == {key(): consumers + len(stats["producers"])}
    return DAEMON_SAMPLES


async def test_process_metrics_are_there(nsqd: NSQD, api_for: Any) -> None:
    api: HttpApi = api_for(nsqd)
    stats = (await api.get("/stats?format=json")).json
    _, samples = parse((await api.get("/metrics")).body.decode())
    [rss] = samples["process_resident_memory_bytes"].values()
    assert rss > 1 << 20
    [cpu] = samples["process_cpu_seconds_total"].values()
    assert cpu > 0
    [fds] = samples["process_open_fds"].values()
    assert fds >= 4  # at least the listeners and this connection
    gc_runs = sum(samples["python_gc_collections_total"].values())
    assert gc_runs >= stats["memory"]["gc_total_runs"]  # taken earlier, and it only grows
    assert "process_start_time_seconds" in samples
    assert "nsq_alert_active" not in samples  # no alert rules configured


async def test_odd_names_survive_the_labels(nsqd: NSQD, api_for: Any) -> None:
    api: HttpApi = api_for(nsqd)
    names = ["a.b_c#ephemeral", "-_.", "x" * 64]
    for name in names:
        assert (await api.post(f"/topic/create?topic={quote(name)}")).status == 200
        query = f"topic={quote(name)}&channel={quote(name)}"
        assert (await api.post(f"/channel/create?{query}")).status == 200
    text = (await api.get("/metrics")).body.decode()
    assert 'nsq_channel_depth{topic="a.b_c#ephemeral",channel="a.b_c#ephemeral"} 0\n' in text
    _, samples = parse(text)
    assert set(samples["nsq_channel_depth"]) == {key(topic=n, channel=n) for n in names}


async def test_metrics_stay_open_when_the_http_api_needs_auth(
    nsqd_factory: NsqdFactory, api_for: Any
) -> None:
    nsqd = await nsqd_factory(http_auth_required=True, auth_http_addresses=["127.0.0.1:1"])
    api: HttpApi = api_for(nsqd)
    assert (await api.post("/topic/create?topic=t")).status == 401
    reply = await api.get("/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == PROM_CT


async def test_metrics_is_get_only(nsqd: NSQD, api_for: Any) -> None:
    api: HttpApi = api_for(nsqd)
    reply = await api.post("/metrics")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")

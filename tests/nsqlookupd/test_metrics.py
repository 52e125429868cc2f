"""nsqlookupd's ``GET /metrics``: a real nsqd and a raw V1 peer register, and every figure is
checked against what ``/topics``, ``/channels``, ``/lookup`` and ``/nodes`` say."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import HttpApi
from prometheus_client.parser import text_string_to_metric_families

from nsqpy.nsqlookupd.app import NSQLookupd

from .conftest import FakeClock, V1Connect

PROM_CT = "text/plain; version=0.0.4; charset=utf-8"
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@pytest.fixture
async def api(lookupd: NSQLookupd) -> AsyncIterator[HttpApi]:
    async with aiohttp.ClientSession() as session:
        yield HttpApi(session, f"http://127.0.0.1:{lookupd.http_port}")


async def scrape(api: HttpApi) -> Samples:
    reply = await api.get("/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == PROM_CT
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def one(samples: Samples, name: str) -> float:
    [value] = samples[name].values()
    return value


async def expected_from_the_api(api: HttpApi) -> dict[str, Any]:
    """The same figures, computed from the discovery API's answers."""
    topics = (await api.get("/topics")).v1_json["topics"]
    nodes = (await api.get("/nodes")).v1_json["producers"]
    per_topic: dict[str, dict[str, int]] = {}
    for topic in topics:
        channels = (await api.get(f"/channels?topic={topic}")).v1_json["channels"]
        producers = (await api.get(f"/lookup?topic={topic}")).v1_json["producers"]
        tombstoned = sum(
            stone
            for node in nodes
            for name, stone in zip(node["topics"], node["tombstones"], strict=True)
            if name == topic
        )
        per_topic[topic] = {
            "channels": len(channels),
            "producers": len(producers),
            "tombstoned": tombstoned,
        }
    return {"topics": topics, "nodes": len(nodes), "per_topic": per_topic}


def check(samples: Samples, expected: dict[str, Any], connections: int) -> None:
    per_topic = expected["per_topic"]
    assert one(samples, "nsq_lookupd_topics") == len(expected["topics"])
    assert one(samples, "nsq_lookupd_producers") == expected["nodes"]
    assert one(samples, "nsq_lookupd_connections") == connections
    assert one(samples, "nsq_lookupd_channels") == sum(t["channels"] for t in per_topic.values())
    for name, field in (
        ("nsq_lookupd_topic_channels", "channels"),
        ("nsq_lookupd_topic_producers", "producers"),
        ("nsq_lookupd_topic_tombstoned_producers", "tombstoned"),
    ):
        got = samples.get(name, {})
        assert got == {(("topic", t),): v[field] for t, v in per_topic.items()}, name
    [(labels, value)] = samples["nsq_build_info"].items()
    assert value == 1 and dict(labels)["daemon"] == "nsqlookupd"


async def test_metrics_match_the_discovery_api(
    api: HttpApi,
    lookupd: NSQLookupd,
    nsqd_factory: NsqdFactory,
    connect: V1Connect,
    clock: FakeClock,
) -> None:
    samples = await scrape(api)
    check(samples, await expected_from_the_api(api), connections=0)
    assert "nsq_lookupd_topic_producers" not in samples

    nsqd = await nsqd_factory(
        nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_port}"], broadcast_address="127.0.0.1"
    )
    nsqd_api = HttpApi(api.session, f"http://127.0.0.1:{nsqd.http_port}")
    for path in (
        "/channel/create?topic=orders&channel=archive",  # 404: the topic comes first
        "/topic/create?topic=orders",
        "/channel/create?topic=orders&channel=archive",
        "/channel/create?topic=orders&channel=audit",
        "/topic/create?topic=users",
    ):
        await nsqd_api.post(path)
    peer = await connect()
    await peer.identify(broadcast_address="raw", hostname="raw-host")
    for line in (b"REGISTER orders tail\n", b"REGISTER clicks\n"):
        assert await peer.command(line) == b"OK"
    db = lookupd.registry
    await wait_for(lambda: len(db.channels("orders")) == 3 and db.has_topic("users"))
    assert (await api.post("/topic/create?topic=planned")).status == 200
    node = f"127.0.0.1:{nsqd.http_port}"
    assert (await api.post(f"/topic/tombstone?topic=users&node={node}")).status == 200

    samples = await scrape(api)
    expected = await expected_from_the_api(api)
    check(samples, expected, connections=2)
    assert expected["per_topic"]["orders"] == {"channels": 3, "producers": 2, "tombstoned": 0}
    assert expected["per_topic"]["users"] == {"channels": 0, "producers": 0, "tombstoned": 1}
    assert expected["nodes"] == 2

    clock.advance(301)  # both producers go quiet for longer than --inactive-producer-timeout
    samples = await scrape(api)
    check(samples, await expected_from_the_api(api), connections=2)
    assert one(samples, "nsq_lookupd_producers") == 0
    assert "process_resident_memory_bytes" in samples
    assert "python_gc_collections_total" in samples

"""nsqadmin's read API against a real cluster (nsqlookupd + 2 nsqd, all on port 0)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from v2client import RawV2

from nsqpy.nsqd.options import NsqdOptions

from .conftest import AdminCluster, eventually

SECOND = 1_000_000_000
TOPIC_FIELDS = [
    "node", "hostname", "topic_name", "depth", "memory_depth", "backend_depth",
    "message_count", "nodes", "channels", "paused", "e2e_processing_latency",
]  # fmt: skip
CHANNEL_FIELDS = [
    "node", "hostname", "topic_name", "channel_name", "depth", "memory_depth", "backend_depth",
    "in_flight_count", "deferred_count", "requeue_count", "timeout_count", "message_count",
    "client_count", "nodes", "clients", "paused", "e2e_processing_latency",
]  # fmt: skip
CLIENT_FIELDS = [
    "node", "remote_address", "version", "client_id", "hostname", "user_agent", "connect_ts",
    "connected", "in_flight_count", "ready_count", "finish_count", "requeue_count",
    "message_count", "sample_rate", "deflate", "snappy", "authed", "auth_identity",
    "auth_identity_url", "tls", "tls_cipher_suite", "tls_version", "tls_negotiated_protocol",
    "tls_negotiated_protocol_is_mutual",
]  # fmt: skip


async def two_node_topic(c: AdminCluster, topic: str = "orders", channel: str = "archive") -> None:
    """``topic`` on both nsqd with ``channel``: 3 messages on nsqd 0, 2 on nsqd 1."""
    for node, count in ((0, 3), (1, 2)):
        await c.nsqd_post(node, f"/topic/create?topic={topic}")
        await c.nsqd_post(node, f"/channel/create?topic={topic}&channel={channel}")
        await c.publish(topic, [b"m%d" % i for i in range(count)], node=node)
    await c.wait_producers(topic, 2)


async def test_topics_and_inactive_topics(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    reply = await c.api("GET", "/api/topics")
    assert reply.v1_json == {"topics": None, "message": ""}  # Go's nil slice when empty
    await c.publish("live", [b"x"], node=1)
    await c.wait_producers("live", 1)
    created = await c.api("POST", "/api/topics", {"topic": "lonely", "channel": "ch"})
    assert created.v1_json == {"message": ""}
    assert await c.get_json("/api/topics") == {"topics": ["live", "lonely"], "message": ""}
    inactive = await c.get_json("/api/topics?inactive=true")
    assert inactive == {"topics": {"lonely": ["ch"]}, "message": ""}


async def test_topic_aggregates_two_nodes(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    await c.nsqd_post(1, "/channel/pause?topic=orders&channel=archive")
    doc = await c.get_json("/api/topics/orders")
    assert list(doc) == [*TOPIC_FIELDS, "message"]
    assert doc["node"] == "*" and doc["topic_name"] == "orders" and doc["message"] == ""
    assert (doc["depth"], doc["message_count"], doc["paused"]) == (0, 5, False)
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert set(nodes) == {c.node(0), c.node(1)}
    assert nodes[c.node(0)]["message_count"] == 3 and nodes[c.node(1)]["message_count"] == 2
    assert list(nodes[c.node(0)]) == TOPIC_FIELDS
    assert nodes[c.node(0)]["nodes"] is None
    assert nodes[c.node(0)]["channels"][0]["node"] == c.node(0)
    [channel] = doc["channels"]
    assert list(channel) == CHANNEL_FIELDS
    assert (channel["channel_name"], channel["depth"], channel["memory_depth"]) == ("archive", 5, 5)
    assert channel["message_count"] == 5 and channel["node"] == "*"
    assert channel["paused"] is True  # paused on one node
    assert sorted(n["depth"] for n in channel["nodes"]) == [2, 3]
    assert doc["e2e_processing_latency"] == {
        "count": 0, "percentiles": None, "topic": "orders", "channel": "", "host": "*",
    }  # fmt: skip


async def test_channel_lists_clients_with_rdy_and_in_flight(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    consumers = []
    for node, rdy in ((0, 2), (1, 1)):
        conn = await RawV2.connect(c.nsqds[node].tcp_port)
        await conn.identify(client_id=f"worker{node}", hostname=f"host{node}",
                            user_agent="test-agent/1.0", feature_negotiation=True)  # fmt: skip
        await conn.sub("orders", "archive", rdy=rdy)
        for _ in range(rdy):
            await conn.message()  # held in flight: never FINed
        consumers.append(conn)
    try:
        doc = await c.get_json("/api/topics/orders/archive")
        assert list(doc) == [*CHANNEL_FIELDS, "message"]
        assert (doc["node"], doc["topic_name"], doc["channel_name"]) == ("*", "orders", "archive")
        assert (doc["depth"], doc["in_flight_count"], doc["client_count"]) == (2, 3, 2)
        assert doc["message_count"] == 5
        by_host = {client["hostname"]: client for client in doc["clients"]}
        assert [client["hostname"] for client in doc["clients"]] == ["host0", "host1"]
        first = by_host["host0"]
        assert list(first) == CLIENT_FIELDS
        assert (first["node"], first["client_id"], first["user_agent"]) == (
            c.node(0), "worker0", "test-agent/1.0",
        )  # fmt: skip
        assert (first["ready_count"], first["in_flight_count"], first["version"]) == (2, 2, "V2")
        assert by_host["host1"]["node"] == c.node(1) and by_host["host1"]["ready_count"] == 1
        assert first["connected"] >= 0 and first["connected"] % SECOND == 0
        assert await c.get_json("/api/topics/orders/nope") == {"message": ""}  # Go: nil stats
    finally:
        for conn in consumers:
            await conn.close()


async def test_nodes_and_one_node(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    doc = await c.get_json("/api/nodes")
    assert doc["message"] == ""
    nodes = {f"{n['broadcast_address']}:{n['http_port']}": n for n in doc["nodes"]}
    assert set(nodes) == {c.node(0), c.node(1)}
    node = nodes[c.node(0)]
    assert list(node) == [
        "remote_addresses", "remote_address", "hostname", "broadcast_address", "tcp_port",
        "http_port", "version", "topics", "out_of_date",
    ]  # fmt: skip
    assert node["tcp_port"] == c.nsqds[0].tcp_port and node["version"] == "1.3.0"
    assert node["topics"] == [{"topic": "orders", "tombstoned": False}]
    assert node["out_of_date"] is False
    assert node["remote_addresses"] == [f"{c.lookupd_http}/{node['remote_address']}"]

    one = await c.get_json(f"/api/nodes/{c.node(1)}")
    assert list(one) == ["node", "topics", "total_messages", "total_clients", "message"]
    assert (one["node"], one["total_messages"], one["total_clients"]) == (c.node(1), 2, 0)
    [topic] = one["topics"]
    assert (topic["node"], topic["topic_name"], topic["message_count"]) == (c.node(1), "orders", 2)
    assert topic["channels"][0]["clients"] == []  # clients included for one node

    missing = await c.api("GET", "/api/nodes/127.0.0.1:1")
    assert (missing.status, missing.message) == (404, "NODE_NOT_FOUND")


async def test_counter(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    doc = await c.get_json("/api/counter")
    assert doc == {
        "stats": {
            f"orders:archive:{c.node(i)}": {
                "node": c.node(i), "topic_name": "orders", "channel_name": "archive",
                "message_count": count,
            }
            for i, count in ((0, 3), (1, 2))
        },
        "message": "",
    }  # fmt: skip


async def test_node_down_is_a_warning_and_all_down_a_502(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[], nsqd_http_addresses=[c.nsqd_http(0), c.nsqd_http(1)]
    )
    down = c.nsqd_http(1)
    await c.stop_nsqd(1)
    topics = await c.get_json("/api/topics", admin=admin)
    assert topics["topics"] == ["orders"]
    assert topics["message"] == (
        f'WARNING: Get "http://{down}/stats?format=json": '
        f"dial tcp {down}: connect: connection refused"
    )
    topic = await c.get_json("/api/topics/orders", admin=admin)
    assert topic["message"].startswith(
        f'WARNING: Get "http://{down}/stats?format=json&topic=orders'
    )
    assert topic["message_count"] == 3  # the node that answered
    nodes = await c.get_json("/api/nodes", admin=admin)
    assert [n["http_port"] for n in nodes["nodes"]] == [c.nsqds[0].http_port]
    assert nodes["message"].startswith(f'WARNING: Get "http://{down}/info"')

    await c.stop_nsqd(0)
    reply = await c.api("GET", "/api/topics", admin=admin)
    assert reply.status == 502
    assert reply.message.startswith("UPSTREAM_ERROR: failed to query any nsqd: Get ")
    assert "\n" in reply.message  # one error per nsqd, as Go's ErrList


async def test_lookupd_down_is_a_warning(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(nsqlookupd_http_addresses=[c.lookupd_http, "127.0.0.1:1"])
    doc = await c.get_json("/api/topics/orders", admin=admin)
    assert doc["message_count"] == 5
    assert doc["message"] == (
        'WARNING: Get "http://127.0.0.1:1/lookup?topic=orders": '
        "dial tcp 127.0.0.1:1: connect: connection refused"
    )
    only_dead = await c.start_admin(nsqlookupd_http_addresses=["127.0.0.1:1"])
    reply = await c.api("GET", "/api/nodes", admin=only_dead)
    assert reply.status == 502
    assert reply.message == (
        'UPSTREAM_ERROR: failed to query any nsqlookupd: Get "http://127.0.0.1:1/nodes": '
        "dial tcp 127.0.0.1:1: connect: connection refused"
    )
    unknown = await c.api("GET", "/api/topics/nope")  # lookupd's 404 is an upstream error
    assert unknown.status == 502
    assert unknown.message == (
        "UPSTREAM_ERROR: failed to query any nsqlookupd: got response 404 Not Found "
        '"{\\"message\\":\\"TOPIC_NOT_FOUND\\"}"'
    )


async def test_history_points_and_rates(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    now = [1_000.0]
    admin = await c.start_admin(
        clock=lambda: now[0], sample_interval=3600 * SECOND, history_duration=7200 * SECOND
    )
    sampler = admin.sampler
    assert sampler is not None
    await eventually(lambda: _true(sampler.rounds >= 1), True)  # the start-up round is done
    await two_node_topic(c)
    await admin.sampler.sample_once()
    await c.publish("orders", [b"a", b"b", b"c"], node=0)
    await c.publish("orders", [b"d"], node=1)
    now[0] = 1_002.0
    await admin.sampler.sample_once()
    doc = await c.get_json("/api/history?topic=orders&channel=archive", admin=admin)
    assert doc["interval"] == 3600 and doc["message"] == ""
    points = [p for p in doc["points"] if p["ts"] >= 1_000.0]
    assert points == [
        {"ts": 1000, "depth": 5, "in_flight_count": 0, "deferred_count": 0,
         "message_count": 5, "rate": None},
        {"ts": 1002, "depth": 9, "in_flight_count": 0, "deferred_count": 0,
         "message_count": 9, "rate": 2.0},
    ]  # fmt: skip
    one = await c.get_json(f"/api/history?topic=orders&node={c.node(1)}", admin=admin)
    assert [p["message_count"] for p in one["points"] if p["ts"] >= 1_000.0] == [2, 3]
    total = await c.get_json("/api/history", admin=admin)
    assert [p["message_count"] for p in total["points"] if p["ts"] >= 1_000.0] == [5, 9]
    assert (await c.get_json("/api/history?topic=nope", admin=admin))["points"] == []


async def test_background_sampler_fills_history(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await c.publish("ticks", [b"x"], node=0)
    await c.wait_producers("ticks", 1)

    async def sampled() -> bool:
        doc = await c.get_json("/api/history?topic=ticks")
        return len(doc["points"]) >= 2

    await eventually(sampled, True)


async def test_alerts_absent_means_none(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    assert c.admin.sampler is not None
    await c.admin.sampler.sample_once()
    assert await c.get_json("/api/alerts") == {"alerts": [], "message": ""}


@pytest.mark.skipif(
    not hasattr(NsqdOptions(), "alert_depths"), reason="nsqd has no backlog alerts yet"
)
async def test_alerts_pass_through_from_nsqd(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    alerting = await c.start_nsqd(alert_depths=["backlog=2"], alert_check_interval=SECOND // 20)
    port = alerting.http_port
    async with c.http.post(f"http://127.0.0.1:{port}/mpub?topic=backlog", data=b"1\n2\n3") as r:
        assert r.status == 200
    await c.wait_producers("backlog", 1)
    assert c.admin.sampler is not None

    async def alerts() -> list[dict[str, Any]]:
        await c.admin.sampler.sample_once()  # type: ignore[union-attr]
        return list((await c.get_json("/api/alerts"))["alerts"])

    await eventually(lambda: _alert_count(alerts), 1)
    [alert] = await alerts()
    assert {k: alert[k] for k in ("node", "topic", "channel", "kind", "value", "threshold")} == {
        "node": f"127.0.0.1:{port}", "topic": "backlog", "channel": "", "kind": "depth",
        "value": 3, "threshold": 2,
    }  # fmt: skip
    assert isinstance(alert["since"], int)


async def _true(value: bool) -> bool:
    return value


async def _alert_count(probe: Any) -> int:
    return len(await probe())


async def test_many_concurrent_requests(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    replies = await asyncio.gather(*(c.api("GET", "/api/topics/orders") for _ in range(20)))
    assert {r.status for r in replies} == {200}
    assert {r.json["message_count"] for r in replies} == {5}

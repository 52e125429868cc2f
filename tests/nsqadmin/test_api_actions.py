"""nsqadmin's admin actions against a real cluster: their effects on lookupd and both nsqd,
the admin ACL, partial failures, and the notifications they post."""

from __future__ import annotations

import asyncio
import base64
import socket
from typing import Any

import aiohttp
import pytest

from nsqpy.nsqadmin.notify import Notifier

from .conftest import AdminCluster, Receiver, eventually
from .test_api import two_node_topic


async def topic_state(c: AdminCluster, node: int, topic: str) -> dict[str, Any] | None:
    doc = await c.nsqd_stats(node, topic)
    found = [t for t in doc["topics"] or () if t["topic_name"] == topic]
    return found[0] if found else None


async def channel_state(c: AdminCluster, node: int, topic: str, channel: str) -> Any:
    state = await topic_state(c, node, topic)
    assert state is not None
    found = [ch for ch in state["channels"] if ch["channel_name"] == channel]
    return found[0] if found else None


async def lookupd_get(c: AdminCluster, path: str) -> Any:
    async with c.http.get(f"http://{c.lookupd_http}{path}") as resp:
        return resp.status, await resp.json()


async def test_create_topic_and_channel(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    reply = await c.api("POST", "/api/topics", {"topic": "fresh", "channel": "first"})
    assert reply.v1_json == {"message": ""}
    assert await lookupd_get(c, "/channels?topic=fresh") == (200, {"channels": ["first"]})
    # a channel on a topic that has producers is created on every one of them
    await two_node_topic(c)
    reply = await c.api("POST", "/api/topics", {"topic": "orders", "channel": "extra"})
    assert reply.v1_json == {"message": ""}
    for node in (0, 1):
        assert (await channel_state(c, node, "orders", "extra"))["depth"] == 0
    bad = {
        b'{"topic": "bad topic!"}': "INVALID_TOPIC",
        b'{"topic": "ok", "channel": "no way"}': "INVALID_CHANNEL",
        b"": "EOF",
        b"{oops": "invalid character 'o' looking for beginning of value",
    }
    for body, message in bad.items():
        reply = await c.api("POST", "/api/topics", body)
        assert (reply.status, reply.message) == (400, message), body


@pytest.mark.parametrize("action", ["pause", "unpause", "empty"])
async def test_topic_actions_reach_every_producer(admin_cluster: AdminCluster, action: str) -> None:
    c = admin_cluster
    for node in (0, 1):  # no channel: the topic holds its messages
        await c.publish("held", [b"1", b"2"], node=node)
    await c.wait_producers("held", 2)
    if action == "unpause":
        await c.api("POST", "/api/topics/held", {"action": "pause"})
    reply = await c.api("POST", "/api/topics/held", {"action": action})
    assert reply.v1_json == {"message": ""}
    for node in (0, 1):
        state = await topic_state(c, node, "held")
        assert state is not None
        assert state["paused"] is (action == "pause")
        assert state["depth"] == (0 if action == "empty" else 2)
    doc = await c.get_json("/api/topics/held")
    assert doc["paused"] is (action == "pause")


async def test_channel_pause_empty_unpause(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    path = "/api/topics/orders/archive"
    assert (await c.api("POST", path, {"action": "pause"})).v1_json == {"message": ""}
    for node in (0, 1):
        assert (await channel_state(c, node, "orders", "archive"))["paused"] is True
    assert (await c.get_json(path))["paused"] is True
    assert (await c.api("POST", path, {"action": "empty"})).v1_json == {"message": ""}
    assert [(await channel_state(c, n, "orders", "archive"))["depth"] for n in (0, 1)] == [0, 0]
    assert (await c.api("POST", path, {"action": "unpause"})).v1_json == {"message": ""}
    assert (await channel_state(c, 1, "orders", "archive"))["paused"] is False
    reply = await c.api("POST", path, {"action": "explode"})
    assert (reply.status, reply.message) == (400, "INVALID_ACTION")
    reply = await c.api("POST", path, {"action": 1})
    assert reply.status == 400
    assert reply.message == (
        "json: cannot unmarshal number into Go struct field .action of type string"
    )


async def test_delete_channel_then_topic(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    await c.nsqd_post(0, "/channel/create?topic=orders&channel=keep")
    reply = await c.api("DELETE", "/api/topics/orders/archive")
    assert reply.v1_json == {"message": ""}
    for node in (0, 1):
        assert await channel_state(c, node, "orders", "archive") is None
    assert await lookupd_get(c, "/channels?topic=orders") == (200, {"channels": ["keep"]})
    reply = await c.api("DELETE", "/api/topics/orders")
    assert reply.v1_json == {"message": ""}
    assert [await topic_state(c, node, "orders") for node in (0, 1)] == [None, None]
    await eventually(lambda: lookupd_get(c, "/topics"), (200, {"topics": []}))
    # the producers of an unknown topic cannot be found: nothing to delete
    reply = await c.api("DELETE", "/api/topics/orders")
    assert reply.status == 502
    assert reply.message.startswith(
        "UPSTREAM_ERROR: failed to query any nsqlookupd: got response 404"
    )


async def test_tombstone_a_topic_producer(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    reply = await c.api("DELETE", f"/api/nodes/{c.node(0)}", {"topic": "orders"})
    assert reply.v1_json == {"message": ""}
    assert await topic_state(c, 0, "orders") is None  # deleted on that node
    assert await topic_state(c, 1, "orders") is not None
    status, lookup = await lookupd_get(c, "/lookup?topic=orders")
    assert status == 200
    assert [p["http_port"] for p in lookup["producers"]] == [c.nsqds[1].http_port]
    for body, message in ((b"{", "INVALID_BODY"), (b'{"topic": "*"}', "INVALID_TOPIC")):
        reply = await c.api("DELETE", f"/api/nodes/{c.node(0)}", body)
        assert (reply.status, reply.message) == (400, message)


async def test_action_with_a_node_down_is_a_warning(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[], nsqd_http_addresses=[c.nsqd_http(0), c.nsqd_http(1)]
    )
    down = c.nsqd_http(1)
    await c.stop_nsqd(1)
    reply = await c.api("POST", "/api/topics/orders/archive", {"action": "pause"}, admin=admin)
    assert reply.status == 200
    assert reply.json["message"].startswith(
        f'WARNING: Get "http://{down}/stats?format=json&topic=orders&include_clients=false": '
        f"dial tcp {down}: connect: connection refused"
    )
    assert (await channel_state(c, 0, "orders", "archive"))["paused"] is True


async def test_admin_acl(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(admin_users=["alice"], acl_http_header="X-Remote-User")
    calls = [
        ("POST", "/api/topics", {"topic": "x"}),
        ("POST", "/api/topics/orders", {"action": "pause"}),
        ("POST", "/api/topics/orders/archive", {"action": "pause"}),
        ("DELETE", "/api/topics/orders/archive", None),
        ("DELETE", f"/api/nodes/{c.node(0)}", {"topic": "orders"}),
        ("DELETE", "/api/topics/orders", None),
    ]
    for method, path, body in calls:
        for headers in ({}, {"X-Remote-User": "mallory"}, {"X-Forwarded-User": "alice"}):
            reply = await c.api(method, path, body, headers=headers, admin=admin)
            assert (reply.status, reply.message) == (403, "FORBIDDEN"), (method, path, headers)
    assert (await channel_state(c, 0, "orders", "archive"))["paused"] is False  # nothing done
    reads = await c.api("GET", "/api/topics/orders", admin=admin)
    assert reads.status == 200  # reading needs no admin
    allowed = {"X-Remote-User": "alice"}
    for method, path, body in calls:
        reply = await c.api(method, path, body, headers=allowed, admin=admin)
        assert reply.status == 200, (method, path, reply.body)
    assert await topic_state(c, 1, "orders") is None


# -- notifications -----------------------------------------------------------------------------


async def test_notifications_carry_nsqs_json(
    admin_cluster: AdminCluster, receiver: Receiver
) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(notification_http_endpoint=receiver.url)
    auth = "Basic " + base64.b64encode(b"carol:secret").decode()
    headers = {"Authorization": auth, "User-Agent": "pytest-agent", "X-Scheme": "https"}
    reply = await c.api(
        "POST", "/api/topics/orders/archive?from=ui", {"action": "pause"}, headers, admin=admin
    )
    assert reply.status == 200
    content_type, doc = await receiver.next()
    assert content_type == "application/json"
    assert list(doc) == [
        "action", "topic", "channel", "timestamp", "user", "remote_ip", "user_agent", "url", "via",
    ]  # fmt: skip
    assert doc["action"] == "pause_channel"
    assert (doc["topic"], doc["channel"], doc["user"]) == ("orders", "archive", "carol")
    assert doc["remote_ip"].startswith("127.0.0.1:")
    assert doc["user_agent"] == "pytest-agent"
    assert doc["url"] == f"https://{admin.http_address}/api/topics/orders/archive?from=ui"
    assert doc["via"] == socket.gethostname()
    assert isinstance(doc["timestamp"], int) and doc["timestamp"] > 1_600_000_000

    await c.api("POST", "/api/topics", {"topic": "orders", "channel": "more"}, admin=admin)
    names = [(await receiver.next())[1] for _ in range(2)]
    assert [(n["action"], n.get("channel")) for n in names] == [
        ("create_topic", None),
        ("create_channel", "more"),
    ]
    assert "user" not in names[0]  # omitempty without basic auth
    await c.api("DELETE", f"/api/nodes/{c.node(1)}", {"topic": "orders"}, admin=admin)
    _, tomb = await receiver.next()
    assert (tomb["action"], tomb["topic"], tomb["node"]) == (
        "tombstone_topic_producer", "orders", c.node(1),
    )  # fmt: skip
    assert "channel" not in tomb
    for action, name in (("empty", "empty_topic"), ("unpause", "unpause_topic")):
        await c.api("POST", "/api/topics/orders", {"action": action}, admin=admin)
        assert (await receiver.next())[1]["action"] == name
    await c.api("DELETE", "/api/topics/orders/more", admin=admin)
    assert (await receiver.next())[1]["action"] == "delete_channel"
    await c.api("DELETE", "/api/topics/orders", admin=admin)
    assert (await receiver.next())[1]["action"] == "delete_topic"


async def test_dead_endpoint_does_not_block_actions(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await two_node_topic(c)
    admin = await c.start_admin(notification_http_endpoint="http://127.0.0.1:1/hook")
    async with asyncio.timeout(5):
        for _ in range(3):
            reply = await c.api("POST", "/api/topics/orders", {"action": "pause"}, admin=admin)
            assert reply.status == 200


async def test_notifier_queue_is_bounded() -> None:
    async with aiohttp.ClientSession() as session:
        notifier = Notifier("http://127.0.0.1:1/hook", session, limit=2)
        for i in range(5):
            notifier.notify({"action": "pause_topic", "topic": str(i)})
        assert notifier.dropped >= 2  # nothing waits unboundedly behind a dead endpoint
        await notifier.close(grace=2)

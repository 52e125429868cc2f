"""nsqadmin over nsqd's dead letters, TTL and redrive, against lookupd + 2 real nsqd.

Letters are made the real way: a channel with ``max_attempts`` 1, and a raw V2 consumer that
REQs every message once, so nsqd moves each to the dead-letter topic.
"""

from __future__ import annotations

import json
from typing import Any

from v2client import RawV2

from .conftest import AdminCluster, Receiver, eventually
from .test_api import CHANNEL_FIELDS

POLICY_FIELDS = [
    "max_attempts", "message_ttl", "dead_letter_topic", "dead_letter_count", "expired_count",
]  # fmt: skip


async def nsqd_call(c: AdminCluster, node: int, method: str, path: str, body: Any = None) -> Any:
    """Call nsqd ``node`` directly: (status, JSON answer)."""
    data = None if body is None else json.dumps(body).encode()
    url = f"http://{c.nsqd_http(node)}{path}"
    async with c.http.request(method, url, data=data) as resp:
        return resp.status, await resp.json(content_type=None)


async def nsqd_channel(c: AdminCluster, node: int, topic: str, channel: str) -> Any:
    doc = await c.nsqd_stats(node, topic)
    [found] = (ch for t in doc["topics"] for ch in t["channels"] if ch["channel_name"] == channel)
    return found


async def topic_depth(c: AdminCluster, node: int, topic: str) -> int:
    doc = await c.nsqd_stats(node, topic)
    return sum(t["depth"] for t in doc["topics"] if t["topic_name"] == topic)


async def policy_channel(c: AdminCluster, topic: str, channel: str, **settings: Any) -> None:
    """``topic``/``channel`` on both nsqd, with ``settings`` set through nsqd's own API."""
    for node in (0, 1):
        await c.nsqd_post(node, f"/topic/create?topic={topic}")
        await c.nsqd_post(node, f"/channel/create?topic={topic}&channel={channel}")
        if settings:
            path = f"/channel/config?topic={topic}&channel={channel}"
            status, answer = await nsqd_call(c, node, "POST", path, settings)
            assert status == 200, answer
    await c.wait_producers(topic, 2)


async def dead_letter(c: AdminCluster, node: int, topic: str, channel: str, count: int) -> None:
    """Publish ``count`` messages to nsqd ``node``, REQ each once, wait for nsqd to move them."""
    before = (await nsqd_channel(c, node, topic, channel)).get("dead_letter_count", 0)
    await c.publish(topic, [b"letter %d" % i for i in range(count)], node=node)
    conn = await RawV2.connect(c.nsqds[node].tcp_port)
    try:
        await conn.sub(topic, channel, rdy=count)
        for _ in range(count):
            msg = await conn.message()
            conn.cmd(f"REQ {msg.id.decode()} 0")
        await eventually(
            lambda: dead_count(c, node, topic, channel), before + count
        )  # moved at the end of nsqd's loop iteration
    finally:
        await conn.close()


async def dead_count(c: AdminCluster, node: int, topic: str, channel: str) -> int:
    return int((await nsqd_channel(c, node, topic, channel)).get("dead_letter_count", 0))


async def letters_on_both(c: AdminCluster) -> None:
    """orders/archive with max_attempts 1 on both nodes: 2 letters on nsqd 0, 3 on nsqd 1."""
    await policy_channel(c, "orders", "archive", max_attempts=1)
    await dead_letter(c, 0, "orders", "archive", 2)
    await dead_letter(c, 1, "orders", "archive", 3)


# -- reads ------------------------------------------------------------------------------------


async def test_counts_are_summed_and_only_policy_channels_carry_the_keys(
    admin_cluster: AdminCluster,
) -> None:
    c = admin_cluster
    await letters_on_both(c)
    for node in (0, 1):
        await c.nsqd_post(node, "/channel/create?topic=orders&channel=plain")
    doc = await c.get_json("/api/topics/orders/archive")
    assert list(doc) == [*CHANNEL_FIELDS, *POLICY_FIELDS, "message"]
    assert {k: doc[k] for k in POLICY_FIELDS} == {
        "max_attempts": 1,
        "message_ttl": "0s",
        "dead_letter_topic": "orders.dead",
        "dead_letter_count": 5,
        "expired_count": 0,
    }
    counts = {n["node"]: n["dead_letter_count"] for n in doc["nodes"]}
    assert counts == {c.node(0): 2, c.node(1): 3}
    assert all(list(n) == [*CHANNEL_FIELDS, *POLICY_FIELDS] for n in doc["nodes"])
    # the topic's channel list and each node's topic carry them too; a plain channel does not
    topic = await c.get_json("/api/topics/orders")
    channels = {ch["channel_name"]: ch for ch in topic["channels"]}
    assert channels["archive"]["dead_letter_count"] == 5
    assert list(channels["plain"]) == CHANNEL_FIELDS
    for node_topic in topic["nodes"]:
        by_name = {ch["channel_name"]: ch for ch in node_topic["channels"]}
        assert by_name["archive"]["dead_letter_topic"] == "orders.dead"
        assert list(by_name["plain"]) == CHANNEL_FIELDS
    plain = await c.get_json("/api/topics/orders/plain")
    assert list(plain) == [*CHANNEL_FIELDS, "message"]
    node = await c.get_json(f"/api/nodes/{c.node(1)}")
    [archive] = (
        ch for t in node["topics"] for ch in t["channels"] if ch["channel_name"] == "archive"
    )
    assert archive["dead_letter_count"] == 3


async def test_dead_letter_topics_come_from_the_sampler(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await policy_channel(c, "orders", "archive", max_attempts=3)
    await policy_channel(c, "orders", "audit", message_ttl="1h", dead_letter_topic="failed")
    await policy_channel(c, "orders", "plain")
    await c.admin.sampler.sample_once()
    doc = await c.get_json("/api/dead_letter_topics")
    assert doc == {
        "topics": {
            "failed": [{"topic": "orders", "channel": "audit"}],
            "orders.dead": [{"topic": "orders", "channel": "archive"}],
        },
        "message": "",
    }


# -- redrive ----------------------------------------------------------------------------------


async def test_channel_redrive_moves_letters_back_on_both_nodes(
    admin_cluster: AdminCluster,
) -> None:
    c = admin_cluster
    await letters_on_both(c)
    assert [await topic_depth(c, n, "orders.dead") for n in (0, 1)] == [2, 3]
    assert [(await nsqd_channel(c, n, "orders", "archive"))["depth"] for n in (0, 1)] == [0, 0]
    reply = await c.api("POST", "/api/topics/orders/archive", {"action": "redrive"})
    assert reply.v1_json == {"redriven": 5, "message": ""}
    assert [await topic_depth(c, n, "orders.dead") for n in (0, 1)] == [0, 0]
    assert [(await nsqd_channel(c, n, "orders", "archive"))["depth"] for n in (0, 1)] == [2, 3]
    # nothing left: a second redrive moves nothing
    reply = await c.api("POST", "/api/topics/orders/archive", {"action": "redrive"})
    assert reply.v1_json == {"redriven": 0, "message": ""}


async def test_topic_redrive_sends_every_letter_home(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await letters_on_both(c)
    await policy_channel(c, "orders", "billing", max_attempts=1)
    # one more letter on nsqd 0, from billing: the same dead-letter topic holds both channels'
    # (archive keeps its copy of that message: it was never delivered there)
    await dead_letter(c, 0, "orders", "billing", 1)
    await c.wait_producers("orders.dead", 2)
    assert [await topic_depth(c, n, "orders.dead") for n in (0, 1)] == [3, 3]
    reply = await c.api("POST", "/api/topics/orders.dead", {"action": "redrive"})
    assert reply.v1_json == {"redriven": 6, "message": ""}
    assert [await topic_depth(c, n, "orders.dead") for n in (0, 1)] == [0, 0]
    archive = [(await nsqd_channel(c, n, "orders", "archive"))["depth"] for n in (0, 1)]
    billing = [(await nsqd_channel(c, n, "orders", "billing"))["depth"] for n in (0, 1)]
    assert (archive, billing) == ([1 + 2, 3], [1, 0])


# -- settings ---------------------------------------------------------------------------------


async def channel_config(c: AdminCluster, node: int, topic: str, channel: str) -> Any:
    status, doc = await nsqd_call(
        c, node, "GET", f"/channel/config?topic={topic}&channel={channel}"
    )
    assert status == 200, doc
    return {k: doc[k] for k in ("max_attempts", "message_ttl", "dead_letter_topic")}


async def test_config_action_sets_and_clears_on_both_nodes(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await policy_channel(c, "orders", "archive")
    path = "/api/topics/orders/archive"
    body = {"action": "config", "max_attempts": 5, "message_ttl": "1m", "dead_letter_topic": "x"}
    assert (await c.api("POST", path, body)).v1_json == {"message": ""}
    for node in (0, 1):
        assert await channel_config(c, node, "orders", "archive") == {
            "max_attempts": 5, "message_ttl": "1m0s", "dead_letter_topic": "x",
        }  # fmt: skip
    # a null clears its key; keys not sent stay
    body = {"action": "config", "message_ttl": None}
    assert (await c.api("POST", path, body)).v1_json == {"message": ""}
    for node in (0, 1):
        assert await channel_config(c, node, "orders", "archive") == {
            "max_attempts": 5, "message_ttl": None, "dead_letter_topic": "x",
        }  # fmt: skip
    doc = await c.get_json(path)
    assert (doc["max_attempts"], doc["dead_letter_topic"]) == (5, "x")
    # a topic's defaults go to /topic/config on every node
    reply = await c.api("POST", "/api/topics/orders", {"action": "config", "max_attempts": 2})
    assert reply.v1_json == {"message": ""}
    for node in (0, 1):
        status, doc = await nsqd_call(c, node, "GET", "/topic/config?topic=orders")
        assert (status, doc["max_attempts"]) == (200, 2)


async def test_nsqds_refusal_comes_back_as_its_400(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await policy_channel(c, "orders", "archive", max_attempts=3)
    # what nsqd itself answers a bad TTL
    status, direct = await nsqd_call(
        c, 0, "POST", "/channel/config?topic=orders&channel=archive", {"message_ttl": "soon"}
    )
    assert status == 400 and direct["message"].startswith("INVALID_MESSAGE_TTL: ")
    path = "/api/topics/orders/archive"
    reply = await c.api("POST", path, {"action": "config", "message_ttl": "soon"})
    assert (reply.status, reply.message) == (400, direct["message"])
    bad = {
        "max_attempts": "many",
        "dead_letter_topic": "orders",  # its own source topic
    }
    codes = {"max_attempts": "INVALID_MAX_ATTEMPTS: ", "dead_letter_topic": "INVALID_DEAD_LETTER"}
    for key, value in bad.items():
        reply = await c.api("POST", path, {"action": "config", key: value})
        assert reply.status == 400 and reply.message.startswith(codes[key]), reply.body
    reply = await c.api("POST", path, {"action": "config", "max_attempt": 1})
    assert (reply.status, reply.message) == (
        400,
        'INVALID_BODY: unknown key "max_attempt" (known: max_attempts, message_ttl, '
        "dead_letter_topic)",
    )
    for node in (0, 1):  # all refused: nothing changed anywhere
        assert (await channel_config(c, node, "orders", "archive"))["max_attempts"] == 3


async def test_dead_letter_actions_are_admin_only_and_notified(
    admin_cluster: AdminCluster, receiver: Receiver
) -> None:
    c = admin_cluster
    await policy_channel(c, "orders", "archive")
    admin = await c.start_admin(
        admin_users=["alice"],
        acl_http_header="X-Remote-User",
        notification_http_endpoint=receiver.url,
    )
    calls = [
        ("/api/topics/orders/archive", {"action": "redrive"}, "redrive_channel"),
        ("/api/topics/orders", {"action": "redrive"}, "redrive_topic"),
        ("/api/topics/orders/archive", {"action": "config", "max_attempts": 4}, "config_channel"),
        ("/api/topics/orders", {"action": "config", "message_ttl": "1h"}, "config_topic"),
    ]
    for path, body, _ in calls:
        for headers in ({}, {"X-Remote-User": "mallory"}):
            reply = await c.api("POST", path, body, headers=headers, admin=admin)
            assert (reply.status, reply.message) == (403, "FORBIDDEN"), (path, body, headers)
    assert (await channel_config(c, 0, "orders", "archive"))["max_attempts"] is None
    for path, body, name in calls:
        reply = await c.api("POST", path, body, headers={"X-Remote-User": "alice"}, admin=admin)
        assert reply.status == 200, (path, reply.body)
        _, note = await receiver.next()
        assert (note["action"], note["topic"], note.get("channel")) == (
            name, "orders", "archive" if name.endswith("channel") else None,
        )  # fmt: skip
    assert (await channel_config(c, 1, "orders", "archive"))["max_attempts"] == 4


async def test_a_node_down_is_a_warning_beside_the_sum(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await letters_on_both(c)
    admin = await c.start_admin(
        nsqlookupd_http_addresses=[], nsqd_http_addresses=[c.nsqd_http(0), c.nsqd_http(1)]
    )
    await c.stop_nsqd(1)
    path = "/api/topics/orders/archive"
    reply = await c.api("POST", path, {"action": "redrive"}, admin=admin)
    assert reply.status == 200
    assert reply.json["redriven"] == 2
    assert reply.json["message"].startswith("WARNING: ")
    assert await topic_depth(c, 0, "orders.dead") == 0

"""nsqadmin over nsqd's leases (nsqpy): ``lease_count`` in the aggregated JSON, against
lookupd + 2 real nsqd. Only channels that have had a lease carry it, summed over the nodes
that report it, so against channels (or nodes) without leases the JSON is Go's."""

from __future__ import annotations

from .conftest import AdminCluster
from .test_api import CHANNEL_FIELDS


async def lease(c: AdminCluster, node: int, channel: str, name: str, count: int) -> None:
    path = f"/channel/lease?topic=jobs&channel={channel}&lease={name}&count={count}"
    url = f"http://{c.nsqd_http(node)}{path}"
    async with c.http.post(url) as resp:
        assert resp.status == 200, await resp.text()


async def test_lease_count_is_summed_and_only_leased_channels_carry_it(
    admin_cluster: AdminCluster,
) -> None:
    c = admin_cluster
    for node in (0, 1):
        await c.nsqd_post(node, "/topic/create?topic=jobs")
        for channel in ("batch", "plain"):
            await c.nsqd_post(node, f"/channel/create?topic=jobs&channel={channel}")
        await c.publish("jobs", [b"j%d" % i for i in range(4)], node=node)
    await c.wait_producers("jobs", 2)
    await lease(c, 0, "batch", "b1", 1)
    await lease(c, 0, "batch", "b2", 1)
    await lease(c, 1, "batch", "b1", 2)

    doc = await c.get_json("/api/topics/jobs/batch")
    assert list(doc) == [*CHANNEL_FIELDS, "lease_count", "message"]
    assert (doc["lease_count"], doc["in_flight_count"], doc["depth"]) == (3, 4, 4)
    assert {n["node"]: n["lease_count"] for n in doc["nodes"]} == {c.node(0): 2, c.node(1): 1}
    assert all(list(n) == [*CHANNEL_FIELDS, "lease_count"] for n in doc["nodes"])
    plain = await c.get_json("/api/topics/jobs/plain")
    assert list(plain) == [*CHANNEL_FIELDS, "message"], "no lease: Go's keys only"

    # the topic's channel list and each node's topic carry it the same way
    topic = await c.get_json("/api/topics/jobs")
    channels = {ch["channel_name"]: ch for ch in topic["channels"]}
    assert channels["batch"]["lease_count"] == 3
    assert list(channels["plain"]) == CHANNEL_FIELDS
    node = await c.get_json(f"/api/nodes/{c.node(1)}")
    [batch] = (ch for t in node["topics"] for ch in t["channels"] if ch["channel_name"] == "batch")
    assert batch["lease_count"] == 1


async def test_a_node_without_leases_adds_nothing_to_the_count(
    admin_cluster: AdminCluster,
) -> None:
    c = admin_cluster
    for node in (0, 1):
        await c.nsqd_post(node, "/topic/create?topic=jobs")
        await c.nsqd_post(node, "/channel/create?topic=jobs&channel=batch")
    await c.publish("jobs", [b"j"], node=0)
    await c.wait_producers("jobs", 2)
    await lease(c, 0, "batch", "only", 1)
    doc = await c.get_json("/api/topics/jobs/batch")
    assert doc["lease_count"] == 1
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert nodes[c.node(0)]["lease_count"] == 1
    assert "lease_count" not in nodes[c.node(1)], "as from Go's nsqd: no key, not a 0"

"""Discovery across a loopback cluster: nsqd registering with several nsqlookupd (§4).

nsqd PINGs lookupd only every 15 s, so no test waits on PINGs: a SIGKILLed nsqd leaves
lookupd because its socket closes, and the inactivity filter is crossed by moving the
lookupd clock (``cluster.clock``), not by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time

from nsqd_process import NsqdProcess
from v2client import RawV2

from nsqpy.nsqlookupd.app import NSQLookupd

from .helpers import BOUND, Cluster, lhttp


def ports(*nsqds: NsqdProcess) -> set[int]:
    return {n.tcp_port for n in nsqds}


async def pub(cluster: Cluster, nsqd: NsqdProcess, topic: str, body: bytes) -> None:
    assert await cluster.post(nsqd.http + "/pub", body, topic=topic) == b"OK"


async def debug_ports(cluster: Cluster, lookupd: NSQLookupd, key: str) -> set[int]:
    data = await cluster.get(lhttp(lookupd) + "/debug")
    return {entry["tcp_port"] for entry in data.get(key, [])}


async def channel_depths(cluster: Cluster, nsqd: NsqdProcess, topic: str) -> dict[str, int]:
    stats = await cluster.get(nsqd.http + "/stats", format="json", topic=topic)
    return {c["channel_name"]: c["depth"] for t in stats["topics"] for c in t["channels"]}


async def lookup_channels(cluster: Cluster, lookupd: NSQLookupd, topic: str) -> list[str] | None:
    data = await cluster.lookup(lookupd, topic)
    return None if data is None else sorted(data["channels"])


async def test_topics_appear_in_lookup_on_every_lookupd(cluster: Cluster) -> None:
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqds = await cluster.start_nsqds(3, *lookupds)
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.node_ports(ld), ports(*nsqds))
    for i, nsqd in enumerate(nsqds):
        await pub(cluster, nsqd, "shared", b"x")
        await pub(cluster, nsqd, f"own{i}", b"x")
    await cluster.post(nsqds[0].http + "/channel/create", topic="shared", channel="c0")
    for lookupd in lookupds:
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, "shared"), ports(*nsqds)
        )
        for i, nsqd in enumerate(nsqds):
            await cluster.eventually(
                lambda ld=lookupd, i=i: cluster.producer_ports(ld, f"own{i}"), ports(nsqd)
            )
        await cluster.eventually(lambda ld=lookupd: lookup_channels(cluster, ld, "shared"), ["c0"])
        data = await cluster.lookup(lookupd, "shared")
        assert data is not None
        producer = next(p for p in data["producers"] if p["tcp_port"] == nsqds[0].tcp_port)
        assert producer["http_port"] == nsqds[0].ports["HTTP"]
        assert producer["version"] == "1.3.0"
        topics = await cluster.get(lhttp(lookupd) + "/topics")
        assert set(topics["topics"]) == {"shared", "own0", "own1", "own2"}
        nodes = (await cluster.get(lhttp(lookupd) + "/nodes"))["producers"]
        node0 = next(n for n in nodes if n["tcp_port"] == nsqds[0].tcp_port)
        assert sorted(node0["topics"]) == ["own0", "shared"]
        assert node0["tombstones"] == [False, False]


async def test_kill9_producer_leaves_at_once_and_inactivity_filters_silent_ones(
    cluster: Cluster,
) -> None:
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqds = await cluster.start_nsqds(3, *lookupds)
    for nsqd in nsqds:
        await pub(cluster, nsqd, "t", b"x")
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(*nsqds))

    await nsqds[2].kill()  # SIGKILL: no UNREGISTER, but the kernel closes its sockets
    live = ports(nsqds[0], nsqds[1])
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), live)
        await cluster.eventually(lambda ld=lookupd: cluster.node_ports(ld), live)
        assert await debug_ports(cluster, lookupd, "topic:t:") == live

    # Past --inactive-producer-timeout (300 s) with no PING, live producers are filtered too,
    # though still registered; a fresh IDENTIFY (reconnect via PUT /config) brings one back.
    cluster.clock.advance(301)
    for lookupd in lookupds:
        assert await cluster.producer_ports(lookupd, "t") == set()
        assert await cluster.node_ports(lookupd) == set()
        assert await debug_ports(cluster, lookupd, "topic:t:") == live
    url = nsqds[0].http + "/config/nsqlookupd_tcp_addresses"
    await cluster.request("PUT", url, "[]")
    addresses = json.dumps([f"127.0.0.1:{ld.tcp_port}" for ld in lookupds])
    assert (await cluster.request("PUT", url, addresses))[0] == 200
    for lookupd in lookupds:
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(nsqds[0])
        )


async def restart_first_lookupd(cluster: Cluster) -> tuple[list[NsqdProcess], NSQLookupd]:
    """2 lookupd x 3 nsqd with channels registered, then lookupd 0 restarted (empty)."""
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqds = await cluster.start_nsqds(3, *lookupds)
    # Channels on per-nsqd topics: on a shared topic, pre-creation would copy them around.
    for i, nsqd in enumerate(nsqds):
        await cluster.post(nsqd.http + "/topic/create", topic="t")
        await cluster.post(nsqd.http + "/topic/create", topic=f"t{i}")
        await cluster.post(nsqd.http + "/channel/create", topic=f"t{i}", channel=f"c{i}")
    await cluster.post(nsqds[0].http + "/topic/create", topic="bare")
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(*nsqds))
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, "bare"), ports(nsqds[0])
        )
    fresh = await cluster.restart_lookupd(lookupds[0])
    assert fresh.tcp_port == lookupds[0].tcp_port
    assert await cluster.lookup(fresh, "t") is None  # empty registry
    return nsqds, fresh


async def assert_everything_registered(
    cluster: Cluster, nsqds: list[NsqdProcess], lookupd: NSQLookupd, timeout: float
) -> None:
    await cluster.eventually(lambda: cluster.producer_ports(lookupd, "t"), ports(*nsqds), timeout)
    await cluster.eventually(lambda: cluster.producer_ports(lookupd, "bare"), ports(nsqds[0]))
    for i, nsqd in enumerate(nsqds):
        key = f"channel:t{i}:c{i}"
        await cluster.eventually(lambda key=key: debug_ports(cluster, lookupd, key), ports(nsqd))
        assert await lookup_channels(cluster, lookupd, f"t{i}") == [f"c{i}"]


async def test_restarted_lookupd_gets_registrations_back(cluster: Cluster) -> None:
    """nsqd notices the dead connection on its next command, reconnects after 1 s and
    re-registers everything it has (not just what the command was about)."""
    nsqds, fresh = await restart_first_lookupd(cluster)
    started = time.monotonic()
    for nsqd in nsqds:  # any lookupd traffic will do; PINGs would come within 15 s
        await cluster.post(nsqd.http + "/topic/create", topic="poke")
    await assert_everything_registered(cluster, nsqds, fresh, BOUND)
    assert time.monotonic() - started < BOUND
    other = cluster.lookupds[0]  # the lookupd that was never restarted lost nothing
    assert await cluster.producer_ports(other, "t") == ports(*nsqds)


async def test_restarted_lookupd_noticed_without_traffic(cluster: Cluster) -> None:
    nsqds, fresh = await restart_first_lookupd(cluster)
    await assert_everything_registered(cluster, nsqds, fresh, timeout=3)


async def test_tombstone_hides_producer_for_its_lifetime(cluster: Cluster) -> None:
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqds = await cluster.start_nsqds(3, *lookupds)
    for nsqd in nsqds:
        await pub(cluster, nsqd, "t", b"x")
        await pub(cluster, nsqd, "other", b"x")
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(*nsqds))
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, "other"), ports(*nsqds)
        )
    victim, rest = nsqds[1], ports(nsqds[0], nsqds[2])
    await cluster.post(
        lhttp(lookupds[0]) + "/topic/tombstone", topic="t", node=f"127.0.0.1:{victim.ports['HTTP']}"
    )
    assert await cluster.producer_ports(lookupds[0], "t") == rest
    assert await cluster.producer_ports(lookupds[0], "other") == ports(*nsqds)
    assert await cluster.producer_ports(lookupds[1], "t") == ports(*nsqds)
    nodes = (await cluster.get(lhttp(lookupds[0]) + "/nodes"))["producers"]
    node = next(n for n in nodes if n["tcp_port"] == victim.tcp_port)  # /nodes still lists it
    assert dict(zip(node["topics"], node["tombstones"], strict=True)) == {"t": True, "other": False}

    cluster.clock.advance(44)  # still inside the 45 s lifetime
    assert await cluster.producer_ports(lookupds[0], "t") == rest
    cluster.clock.advance(2)  # past it: the producer is offered again
    assert await cluster.producer_ports(lookupds[0], "t") == ports(*nsqds)

    # The documented workflow: tombstone, then delete the topic on that nsqd (UNREGISTER).
    await cluster.post(
        lhttp(lookupds[0]) + "/topic/tombstone", topic="t", node=f"127.0.0.1:{victim.ports['HTTP']}"
    )
    await cluster.post(victim.http + "/topic/delete", topic="t")
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: debug_ports(cluster, ld, "topic:t:"), rest)
    cluster.clock.advance(46)
    assert await cluster.producer_ports(lookupds[0], "t") == rest
    assert await cluster.producer_ports(lookupds[1], "t") == rest


async def test_lookupd_channels_are_precreated_before_first_message(cluster: Cluster) -> None:
    """NSQ #1520: a topic new to nsqd gets the cluster's channels before it hands out messages."""
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    for topic in ("t", "t2"):
        await cluster.post(lhttp(lookupds[0]) + "/channel/create", topic=topic, channel="c")
        await cluster.post(lhttp(lookupds[1]) + "/channel/create", topic=topic, channel="c2")
        await cluster.post(
            lhttp(lookupds[0]) + "/channel/create", topic=topic, channel="e#ephemeral"
        )
    nsqd = await cluster.start_nsqd(*lookupds)
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.node_ports(ld), ports(nsqd))

    await pub(cluster, nsqd, "t", b"first")
    # Not the ephemeral one. (Go creates them before PUB returns; nsqpy a moment later.)
    await cluster.eventually(lambda: channel_depths(cluster, nsqd, "t"), {"c": 1, "c2": 1})
    for channel in ("c", "c2"):
        conn = await RawV2.connect(nsqd.tcp_port)
        try:
            await conn.sub("t", channel, rdy=1)
            assert (await conn.message()).body == b"first"
        finally:
            await conn.close()

    # A consumer creating the topic first (SUB t2 d) must not get the message before c exists.
    conn = await RawV2.connect(nsqd.tcp_port)
    try:
        await conn.sub("t2", "d", rdy=1)
        await pub(cluster, nsqd, "t2", b"second")
        assert (await conn.message()).body == b"second"
    finally:
        await conn.close()
    await cluster.eventually(lambda: channel_depths(cluster, nsqd, "t2"), {"c": 1, "c2": 1, "d": 1})
    for lookupd in lookupds:
        await cluster.eventually(
            lambda ld=lookupd: debug_ports(cluster, ld, "channel:t:c"), ports(nsqd)
        )


async def test_put_lookupd_addresses_takes_effect_at_once(cluster: Cluster) -> None:
    a, b = await cluster.start_lookupd(), await cluster.start_lookupd()
    nsqd = await cluster.start_nsqd()
    await cluster.post(nsqd.http + "/topic/create", topic="t")
    await cluster.post(nsqd.http + "/channel/create", topic="t", channel="c")
    url = nsqd.http + "/config/nsqlookupd_tcp_addresses"

    started = time.monotonic()
    status, _ = await cluster.request("PUT", url, json.dumps([f"127.0.0.1:{a.tcp_port}"]))
    assert status == 200
    await cluster.eventually(lambda: cluster.producer_ports(a, "t"), ports(nsqd), timeout=2)
    assert await debug_ports(cluster, a, "channel:t:c") == ports(nsqd)
    assert await cluster.lookup(b, "t") is None
    assert await cluster.get(url) == [f"127.0.0.1:{a.tcp_port}"]

    status, _ = await cluster.request("PUT", url, json.dumps([f"127.0.0.1:{b.tcp_port}"]))
    assert status == 200
    await cluster.eventually(lambda: cluster.producer_ports(b, "t"), ports(nsqd), timeout=2)
    await cluster.eventually(lambda: cluster.node_ports(a), set(), timeout=2)  # dropped peer
    assert time.monotonic() - started < 4  # no 15 s ticks involved


async def test_restarted_nsqd_reregisters_saved_topics(cluster: Cluster) -> None:
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqd = await cluster.start_nsqd(*lookupds)
    await cluster.post(nsqd.http + "/topic/create", topic="t")
    await cluster.post(nsqd.http + "/channel/create", topic="t", channel="c")
    await cluster.post(nsqd.http + "/topic/create", topic="bare")
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(nsqd))

    assert await nsqd.stop() == 0
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.node_ports(ld), set())

    again = await cluster.start_nsqd(*lookupds, data_path=cluster.data_paths[nsqd])
    for lookupd in lookupds:
        await cluster.eventually(lambda ld=lookupd: cluster.producer_ports(ld, "t"), ports(again))
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, "bare"), ports(again)
        )
        assert await debug_ports(cluster, lookupd, "channel:t:c") == ports(again)
    stats = await cluster.get(again.http + "/stats", format="json")
    assert all(t["message_count"] == 0 for t in stats["topics"])  # nothing was published


async def test_cluster_teardown_leaves_no_errors(cluster: Cluster) -> None:
    """Daemons exit cleanly on SIGTERM with lookupd connections open."""
    lookupd = await cluster.start_lookupd()
    nsqd = await cluster.start_nsqd(lookupd)
    await pub(cluster, nsqd, "t", b"x")
    await cluster.eventually(lambda: cluster.producer_ports(lookupd, "t"), ports(nsqd))
    assert await nsqd.stop() == 0
    assert "Traceback" not in nsqd.log
    await asyncio.sleep(0)

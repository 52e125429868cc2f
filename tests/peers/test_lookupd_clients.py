"""Real clients discovering nsqd through nsqlookupd: pynsq, gnsq and nsqjs consumers.

2 nsqlookupd x 3 nsqd on loopback. Distinct bodies are published to two nsqd before the
consumer starts; it must find both through ``/lookup`` alone. Once it has them, the peer
publishes to the third nsqd (which did not have the topic), and the consumer must find
that producer on a later lookupd poll (``lookupd_poll_interval`` = 1 s).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cluster.helpers import Cluster, lhttp

from .harness import b64list, bodies_of, nsqjs_missing, run_peer, valid_name


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        c = Cluster(tmp_path, http)
        try:
            yield c
        finally:
            await c.close()


@pytest.mark.parametrize("client", ["pynsq", "gnsq", "nsqjs"])
async def test_consumer_finds_every_producer_through_lookupd(cluster: Cluster, client: str) -> None:
    if client == "nsqjs" and (reason := nsqjs_missing()):
        pytest.skip(reason)
    topic, channel = valid_name(client), valid_name("ch")
    lookupds = [await cluster.start_lookupd(), await cluster.start_lookupd()]
    nsqds = await cluster.start_nsqds(3, *lookupds)
    early: list[bytes] = []
    for i, nsqd in enumerate(nsqds[:2]):
        for j in range(3):
            body = f"{client} nsqd{i} #{j}".encode()
            early.append(body)
            assert await cluster.post(nsqd.http + "/pub", body, topic=topic) == b"OK"
    for lookupd in lookupds:
        await cluster.eventually(
            lambda ld=lookupd: cluster.producer_ports(ld, topic),
            {nsqds[0].tcp_port, nsqds[1].tcp_port},
        )
    late = [f"{client} late #{j}".encode() for j in range(2)]

    result = await run_peer(
        client,
        "lookupd_consume",
        {
            "topic": topic,
            "channel": channel,
            "lookupd": [lhttp(ld) for ld in lookupds],
            "poll_interval": 1,
            "count": len(early),
            "late_http": nsqds[2].http.removeprefix("http://"),
            "late_bodies": b64list(late),
        },
        timeout=15,
    )
    got = bodies_of(result["deliveries"])
    assert sorted(got) == sorted(early + late), got
    assert sorted(got[: len(early)]) == sorted(early)  # the late ones only after PUB
    assert {int(c.rpartition(":")[2]) for c in result["connections"]} == {n.tcp_port for n in nsqds}
    assert all(c.startswith("127.0.0.1:") for c in result["connections"])
    assert not result["errors"], result["errors"]

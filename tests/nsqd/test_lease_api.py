"""Leases (nsqpy extension) over HTTP on a real nsqd: /channel/lease, /fin, /req, /stats."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory
from http_reply import HttpApi
from prometheus_client.parser import text_string_to_metric_families
from test_dead_letter_api import NSQD_CHANNEL_KEYS, channel_stats, consumer, eventually, http

from nsqpy.nsqd.app import NSQD

LEASE = "/channel/lease?topic=t&channel=c"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def setup(api: HttpApi, *bodies: bytes, channel: str = "c") -> None:
    assert (await api.post("/topic/create?topic=t")).status == 200
    assert (await api.post(f"/channel/create?topic=t&channel={channel}")).status == 200
    if bodies:
        assert (await api.post("/mpub?topic=t", b"\n".join(bodies))).status == 200


async def take(api: HttpApi, query: str) -> dict[str, Any]:
    reply = await api.post(f"{LEASE}&{query}")
    assert reply.status == 200, reply.body
    doc = reply.v1_json
    assert isinstance(doc, dict)
    return doc


async def error(api: HttpApi, path: str) -> tuple[int, str]:
    reply = await api.post(path)
    return reply.status, reply.message


def bodies(doc: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(m["body"]) for m in doc["messages"]]


async def test_a_lease_is_taken_and_given_back_identical_to_any_client(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"one", b"two", b"three", b"four")
    doc = await take(api, "lease=b1&count=3")
    assert list(doc) == ["lease", "messages", "count", "bytes"]
    assert (doc["lease"], doc["count"], doc["bytes"]) == ("b1", 3, 11)
    assert bodies(doc) == [b"one", b"two", b"three"]
    first = doc["messages"][0]
    assert list(first) == ["id", "attempts", "timestamp", "body"]
    assert len(first["id"]) == 16 and int(first["id"], 16) >= 0
    assert first["attempts"] == 1 and first["timestamp"] > 1_600_000_000 * 10**9
    async with aiohttp.ClientSession() as other:  # another connection
        again = await take(http(other, nsqd), "lease=b1&count=3")
    assert again == doc
    assert await take(api, "lease=b1") == doc, "count may be left out when asking again"
    stats = await channel_stats(api, "t", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["lease_count"]) == (1, 3, 1)


async def test_reserve_sizes_a_lease_that_executors_then_fetch(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"aaaa", b"bbbb", b"cccc")
    reserved = await take(api, "lease=r&count=10&bytes=8&reserve=true")
    assert reserved == {"lease": "r", "count": 2, "bytes": 8}
    fetched = await take(api, "lease=r&bytes=8")
    assert bodies(fetched) == [b"aaaa", b"bbbb"] and fetched["count"] == 2
    assert (await channel_stats(api, "t", "c"))["depth"] == 1


async def test_fin_and_req_of_a_lease_are_idempotent(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"x", b"y", b"z")
    await take(api, "lease=f&count=1")
    await take(api, "lease=q&count=2")
    for _ in range(2):
        assert (await api.post("/channel/lease/fin?topic=t&channel=c&lease=f")).is_empty_v1_ok()
        assert (await api.post("/channel/lease/req?topic=t&channel=c&lease=q")).is_empty_v1_ok()
    stats = await channel_stats(api, "t", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"]) == (2, 0, 2)
    assert stats["lease_count"] == 0
    assert await error(api, f"{LEASE}&lease=f&count=1") == (400, "LEASE_FINISHED")
    assert await error(api, f"{LEASE}&lease=q&count=2") == (400, "LEASE_REQUEUED")
    assert await error(api, "/channel/lease/req?topic=t&channel=c&lease=f") == (
        400,
        "LEASE_FINISHED",
    )
    conn = await consumer(nsqd, "t", "c", rdy=2)
    got = [await conn.message(), await conn.message()]
    assert sorted(m.body for m in got) == [b"y", b"z"] and {m.attempts for m in got} == {2}
    await conn.close()


async def test_a_waiting_lease_returns_once_enough_messages_came(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api)
    pending = asyncio.ensure_future(take(api, "lease=w&count=2&wait=30s"))
    await eventually(lambda: _has_lease(api))
    assert not pending.done()
    assert (await api.post("/mpub?topic=t", b"p\nq\nr")).status == 200
    doc = await asyncio.wait_for(pending, 10)
    assert bodies(doc) == [b"p", b"q"]


async def _has_lease(api: HttpApi) -> bool:
    return (await channel_stats(api, "t", "c")).get("lease_count") == 1


async def test_a_waiting_lease_is_sealed_with_what_came_within_its_wait(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"only")
    doc = await take(api, "lease=w&count=5&wait=200ms")
    assert bodies(doc) == [b"only"]
    assert (await api.post("/pub?topic=t", b"later")).status == 200
    assert bodies(await take(api, "lease=w&count=5")) == [b"only"], "sealed"


async def test_a_lease_past_its_ttl_is_requeued_as_a_timeout(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"slow")
    await take(api, "lease=t1&count=1&ttl=50ms")

    async def requeued() -> bool:
        stats = await channel_stats(api, "t", "c")
        return stats["timeout_count"] == 1 and stats["depth"] == 1

    await eventually(requeued)
    assert await error(api, "/channel/lease/fin?topic=t&channel=c&lease=t1") == (
        400,
        "LEASE_REQUEUED",
    )
    assert (await take(api, "lease=t2&count=1"))["messages"][0]["attempts"] == 2


async def test_bad_requests_are_refused_and_change_nothing(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await setup(api, b"a", b"b", b"c")
    await setup(api, channel="e%23ephemeral")
    await take(api, "lease=held&count=1&bytes=100")
    cases = [
        (f"{LEASE}&count=1", 400, "MISSING_ARG_LEASE"),
        (f"{LEASE}&lease=a%20b&count=1", 400, "INVALID_LEASE"),
        (f"{LEASE}&lease=new", 400, "MISSING_ARG_COUNT"),
        (f"{LEASE}&lease=new&count=0", 400, "INVALID_COUNT"),
        (f"{LEASE}&lease=new&count=2501", 400, "INVALID_COUNT"),  # --max-rdy-count
        (f"{LEASE}&lease=new&count=x", 400, "INVALID_COUNT"),
        (f"{LEASE}&lease=new&count=1&bytes=-1", 400, "INVALID_BYTES"),
        (f"{LEASE}&lease=new&count=1&wait=soon", 400, "INVALID_WAIT"),
        (f"{LEASE}&lease=new&count=1&wait=16m", 400, "INVALID_WAIT"),  # --max-msg-timeout
        (f"{LEASE}&lease=new&count=1&ttl=0s", 400, "INVALID_TTL"),
        (f"{LEASE}&lease=new&count=1&reserve=maybe", 400, "INVALID_RESERVE"),
        (f"{LEASE}&lease=held&count=2&bytes=100", 400, "LEASE_MISMATCH"),
        (f"{LEASE}&lease=held&count=1&bytes=99", 400, "LEASE_MISMATCH"),
        ("/channel/lease?topic=t&channel=e%23ephemeral&lease=x&count=1", 400, "EPHEMERAL_CHANNEL"),
        ("/channel/lease?topic=t&channel=nope&lease=x&count=1", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/lease?topic=nope&channel=c&lease=x&count=1", 404, "TOPIC_NOT_FOUND"),
        ("/channel/lease/fin?topic=t&channel=c&lease=unknown", 404, "LEASE_NOT_FOUND"),
        ("/channel/lease/req?topic=t&channel=c&lease=unknown", 404, "LEASE_NOT_FOUND"),
        ("/channel/lease/req?topic=t&channel=c&lease=held&delay=2h", 400, "INVALID_DELAY"),
    ]
    for path, status, message in cases:
        assert await error(api, path) == (status, message), path
    stats = await channel_stats(api, "t", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["lease_count"]) == (2, 1, 1)
    conn = await consumer(nsqd, "t", "c", rdy=5)  # other clients are unaffected
    assert {(await conn.message()).body, (await conn.message()).body} == {b"b", b"c"}
    await conn.close()


async def test_stats_and_metrics_show_leases_only_where_there_are_some(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory()
    api = http(session, nsqd)
    await setup(api, b"m")
    await setup(api, channel="plain")
    assert list(await channel_stats(api, "t", "c")) == NSQD_CHANNEL_KEYS
    await take(api, "lease=s&count=1")
    assert list(await channel_stats(api, "t", "c")) == [*NSQD_CHANNEL_KEYS, "lease_count"]
    assert list(await channel_stats(api, "t", "plain")) == NSQD_CHANNEL_KEYS
    text = (await api.get("/stats?topic=t")).body.decode()
    assert "          leases: 1\n" in text
    metrics = (await api.get("/metrics")).body.decode()
    samples = {
        (s.name, s.labels.get("channel")): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "nsq_channel_leases"
    }
    assert samples == {("nsq_channel_leases", "c"): 1}


async def test_lease_ttl_option_is_the_default_ttl(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(lease_ttl=50 * 10**6)
    api = http(session, nsqd)
    await setup(api, b"m")
    assert (await api.get("/config/lease_ttl")).v1_json == 50 * 10**6
    await take(api, "lease=d&count=1")
    await eventually(lambda: _timed_out(api))


async def _timed_out(api: HttpApi) -> bool:
    return (await channel_stats(api, "t", "c"))["timeout_count"] == 1

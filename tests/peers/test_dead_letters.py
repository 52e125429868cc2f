"""nsqpy's dead letters and message TTL seen by real third-party clients (pynsq, gnsq).

The clients know nothing of either: a Reader that REQs forever (no ``max_tries``) still
stops receiving a poison message after the channel's ``max_attempts``, and a consumer that is
not taking messages never sees the ones that outlived the channel's ``message_ttl``.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from .harness import NsqdProcess, attempts_by_id, b64, bodies_of, run_peer, valid_name

pytestmark = pytest.mark.peers

POLL = 0.05


@pytest.fixture
def topic() -> str:
    """Short enough for ``<topic>.dead`` to be a topic name too (the shared one is 64 bytes)."""
    return valid_name("dl")


def http_call(nsqd: NsqdProcess, method: str, path: str, body: bytes | None = None) -> Any:
    request = urllib.request.Request(f"http://{nsqd.http}{path}", data=body, method=method)
    with urllib.request.urlopen(request, timeout=5) as resp:
        data = resp.read()
    return json.loads(data) if data.startswith(b"{") else data


async def call(nsqd: NsqdProcess, method: str, path: str, body: bytes | None = None) -> Any:
    return await asyncio.to_thread(http_call, nsqd, method, path, body)


async def configure(nsqd: NsqdProcess, topic: str, channel: str, **settings: Any) -> None:
    await call(nsqd, "POST", f"/topic/create?topic={topic}")
    await call(nsqd, "POST", f"/channel/create?topic={topic}&channel={channel}")
    path = f"/channel/config?topic={topic}&channel={channel}"
    doc = await call(nsqd, "POST", path, json.dumps(settings).encode())
    assert {k: doc[k] for k in settings} == settings


async def channel_stats(nsqd: NsqdProcess, topic: str, channel: str) -> dict[str, Any]:
    doc = await call(nsqd, "GET", f"/stats?format=json&topic={topic}&channel={channel}")
    (found,) = doc["topics"][0]["channels"]
    assert isinstance(found, dict)
    return found


async def eventually(check: Callable[[], Any], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(POLL)


def base(nsqd: NsqdProcess, topic: str, channel: str, **extra: Any) -> dict[str, Any]:
    return {"tcp": nsqd.tcp, "http": nsqd.http, "topic": topic, "channel": channel, **extra}


POISON = [b"poison one", b"poison \x00 two", "poison ✓ three".encode()]


async def requeue_until_dead(client: str, nsqd: NsqdProcess, topic: str, channel: str) -> Any:
    dead = f"{topic}.dead"
    await configure(nsqd, topic, channel, max_attempts=3)
    for body in POISON:
        await call(nsqd, "POST", f"/pub?topic={topic}", body)
    params = base(nsqd, topic, channel, dead_topic=dead, count=len(POISON), max_tries=0)
    if client == "pynsq":
        return await run_peer("pynsq", "requeue_until_dead", params)
    return await run_peer("gnsq", "consume", {**params, "mode": "always_requeue"})


@pytest.mark.parametrize("client", ["pynsq", "gnsq"])
async def test_a_reader_that_always_requeues_stops_at_max_attempts(
    client: str, nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    res = await requeue_until_dead(client, nsqd_proc, topic, channel)
    assert res["errors"] == [] and res["gave_up"] == []  # the client never gave up itself
    seen = attempts_by_id(res["deliveries"])
    assert len(seen) == len(POISON)
    assert all(attempts == [1, 2, 3] for attempts in seen.values()), seen
    stats = await channel_stats(nsqd_proc, topic, channel)
    assert stats["dead_letter_count"] == len(POISON) and stats["requeue_count"] == 3 * len(POISON)
    assert (stats["depth"], stats["in_flight_count"], stats["deferred_count"]) == (0, 0, 0)

    # the letters are ordinary messages of an ordinary topic for the same client
    letters = await run_peer(
        client, "consume", base(nsqd_proc, f"{topic}.dead", "inspect", count=len(POISON))
    )
    assert sorted(bodies_of(letters["deliveries"])) == sorted(POISON)
    assert {d["attempts"] for d in letters["deliveries"]} == {1}


async def expired_count(nsqd: NsqdProcess, topic: str, channel: str) -> int:
    return int((await channel_stats(nsqd, topic, channel))["expired_count"])


@pytest.mark.parametrize("client", ["pynsq", "gnsq"])
async def test_ttl_expires_messages_while_the_channel_is_paused(
    client: str, nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    stale = [b"stale %d" % i for i in range(5)]
    await configure(nsqd_proc, topic, channel, message_ttl="300ms")  # no dead-letter topic
    await call(nsqd_proc, "POST", f"/channel/pause?topic={topic}&channel={channel}")
    params = base(nsqd_proc, topic, channel, count=1)
    peer = asyncio.create_task(run_peer(client, "consume", params))

    async def subscribed() -> bool:
        return len((await channel_stats(nsqd_proc, topic, channel))["clients"]) == 1

    await eventually(subscribed)
    for body in stale:
        await call(nsqd_proc, "POST", f"/pub?topic={topic}", body)

    async def all_expired() -> bool:
        return await expired_count(nsqd_proc, topic, channel) == len(stale)

    await eventually(all_expired)  # while paused: nobody could have taken them
    await call(nsqd_proc, "POST", f"/channel/unpause?topic={topic}&channel={channel}")
    await call(nsqd_proc, "POST", f"/pub?topic={topic}", b"fresh")
    res = await peer
    assert bodies_of(res["deliveries"]) == [b"fresh"]
    stats = await channel_stats(nsqd_proc, topic, channel)
    assert stats["dead_letter_topic"] == "" and stats["dead_letter_count"] == 0  # dropped
    assert stats["depth"] == 0 and stats["message_count"] == len(stale) + 1


async def test_ttl_expires_messages_queued_behind_a_busy_reader(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    """pynsq's one RDY is taken by a message it holds: those queued behind it expire and go
    to the dead-letter topic; the Reader gets the next fresh one once it FINs."""
    stale = [b"stale %d" % i for i in range(5)]
    dead = f"{topic}.dead"
    await configure(nsqd_proc, topic, channel, message_ttl="300ms", dead_letter_topic=dead)
    await call(nsqd_proc, "POST", f"/pub?topic={topic}", b"held")
    params = base(nsqd_proc, topic, channel, expired=len(stale), last=b64(b"fresh"))
    peer = asyncio.create_task(run_peer("pynsq", "hold_until_expired", params))

    async def holding() -> bool:
        return (await channel_stats(nsqd_proc, topic, channel))["in_flight_count"] == 1

    await eventually(holding)
    for body in stale:
        await call(nsqd_proc, "POST", f"/pub?topic={topic}", body)

    async def all_expired() -> bool:
        return await expired_count(nsqd_proc, topic, channel) == len(stale)

    await eventually(all_expired)
    await call(nsqd_proc, "POST", f"/pub?topic={topic}", b"fresh")
    res = await peer
    assert bodies_of(res["deliveries"]) == [b"held", b"fresh"]
    stats = await channel_stats(nsqd_proc, topic, channel)
    assert stats["dead_letter_count"] == len(stale)
    letters = await run_peer(
        "pynsq", "consume", base(nsqd_proc, dead, "inspect", count=len(stale))
    )
    assert bodies_of(letters["deliveries"]) == stale  # in their order, bodies intact

"""Dead letters, TTL, redrive and the defer limit on a real nsqd, over its sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import POLL_INTERVAL, NsqdFactory
from http_reply import HttpApi
from prometheus_client.parser import text_string_to_metric_families
from v2client import RawV2

from nsqpy._internal.duration import SECOND
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.core.policy import KEYS

#: nsqd v1.3.0's channel keys in /stats, in order; nsqpy's five follow only when in use.
NSQD_CHANNEL_KEYS = [
    "channel_name",
    "depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
    "client_count",
    "clients",
    "paused",
    "e2e_processing_latency",
]
POLICY_KEYS = [
    "max_attempts",
    "message_ttl",
    "dead_letter_topic",
    "dead_letter_count",
    "expired_count",
]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def http(session: aiohttp.ClientSession, nsqd: NSQD) -> HttpApi:
    return HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """Poll an HTTP-observable condition until it holds (dead letters move asynchronously)."""
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(POLL_INTERVAL)


async def channel_stats(api: HttpApi, topic: str, channel: str) -> dict[str, Any]:
    doc = (await api.get(f"/stats?format=json&topic={topic}&channel={channel}")).json
    (found,) = doc["topics"][0]["channels"]
    assert isinstance(found, dict)
    return found


async def topic_depth(api: HttpApi, topic: str) -> int:
    topics = (await api.get(f"/stats?format=json&topic={topic}")).json["topics"]
    return int(topics[0]["depth"]) if topics else -1


async def make_channel(api: HttpApi, topic: str, channel: str, **settings: Any) -> None:
    assert (await api.post(f"/topic/create?topic={topic}")).status == 200
    assert (await api.post(f"/channel/create?topic={topic}&channel={channel}")).status == 200
    if settings:
        reply = await api.post(
            f"/channel/config?topic={topic}&channel={channel}", json.dumps(settings)
        )
        assert reply.status == 200, reply.body


async def consumer(nsqd: NSQD, topic: str, channel: str, rdy: int = 1) -> RawV2:
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub(topic, channel, rdy=rdy)
    return conn


# -- settings over HTTP -------------------------------------------------------------------------


async def test_config_routes_read_set_and_clear(nsqd: NSQD, session: aiohttp.ClientSession) -> None:
    api = http(session, nsqd)
    await make_channel(api, "orders", "billing")
    reply = await api.get("/channel/config?topic=orders&channel=billing")
    assert reply.status == 200 and reply.v1_json == {
        "topic_name": "orders",
        "channel_name": "billing",
        "max_attempts": None,
        "message_ttl": None,
        "dead_letter_topic": None,
        "effective": {"max_attempts": 0, "message_ttl": "0s", "dead_letter_topic": ""},
    }
    reply = await api.post("/topic/config?topic=orders", b'{"message_ttl":"90s"}')
    assert reply.v1_json["message_ttl"] == "1m30s"
    assert reply.v1_json["effective"]["message_ttl"] == "1m30s"
    reply = await api.post(
        "/channel/config?topic=orders&channel=billing",
        b'{"max_attempts":4,"dead_letter_topic":"failed"}',
    )
    assert reply.v1_json["effective"] == {
        "max_attempts": 4,
        "message_ttl": "1m30s",  # inherited from the topic
        "dead_letter_topic": "failed",
    }
    reply = await api.post(
        "/channel/config?topic=orders&channel=billing", b'{"dead_letter_topic":null}'
    )
    assert reply.v1_json["dead_letter_topic"] is None
    assert reply.v1_json["effective"]["dead_letter_topic"] == "orders.dead"
    assert reply.v1_json["max_attempts"] == 4, "keys not sent are left alone"


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/topic/config", 400, "MISSING_ARG_TOPIC"),
        ("/topic/config?topic=no%20pe", 400, "INVALID_TOPIC"),
        ("/topic/config?topic=missing", 404, "TOPIC_NOT_FOUND"),
        ("/channel/config?topic=orders", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/config?topic=orders&channel=b%20d", 400, "INVALID_ARG_CHANNEL"),
        ("/channel/config?topic=orders&channel=missing", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/redrive?topic=orders&channel=missing", 404, "CHANNEL_NOT_FOUND"),
        ("/topic/redrive?topic=missing", 404, "TOPIC_NOT_FOUND"),
    ],
)
async def test_route_arguments_as_nsqd_checks_them(
    nsqd: NSQD, session: aiohttp.ClientSession, path: str, status: int, message: str
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "orders", "billing")
    reply = await api.post(path, b"{}")
    assert (reply.status, reply.message) == (status, message)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "INVALID_BODY"),
        (b"{", "INVALID_BODY"),
        (b'["max_attempts"]', "INVALID_BODY"),
        (b'{"max_attempts":3,"retries":2}', "INVALID_BODY"),
        (b'{"max_attempts":-1}', "INVALID_MAX_ATTEMPTS"),
        (b'{"max_attempts":"three"}', "INVALID_MAX_ATTEMPTS"),
        (b'{"message_ttl":"1 hour"}', "INVALID_MESSAGE_TTL"),
        (b'{"message_ttl":-5}', "INVALID_MESSAGE_TTL"),
        (b'{"dead_letter_topic":"orders"}', "INVALID_DEAD_LETTER_TOPIC"),
        (b'{"dead_letter_topic":"bad name!"}', "INVALID_DEAD_LETTER_TOPIC"),
        (b'{"max_attempts":2,"message_ttl":"nope"}', "INVALID_MESSAGE_TTL"),
    ],
)
async def test_bad_settings_are_a_400_and_change_nothing(
    nsqd: NSQD, session: aiohttp.ClientSession, body: bytes, code: str
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "orders", "billing", max_attempts=5)
    dat = (Path(nsqd.data_path) / "nsqd.dat").read_bytes()
    for path in ("/channel/config?topic=orders&channel=billing", "/topic/config?topic=orders"):
        reply = await api.post(path, body)
        assert reply.status == 400
        assert reply.message.startswith(f"{code}: ")
        assert len(reply.message) > len(code) + 10, "the reason is given"
    after = (await api.get("/channel/config?topic=orders&channel=billing")).v1_json
    assert after["max_attempts"] == 5 and after["message_ttl"] is None
    assert (await api.get("/topic/config?topic=orders")).v1_json["max_attempts"] is None
    assert (Path(nsqd.data_path) / "nsqd.dat").read_bytes() == dat


async def test_a_default_dead_letter_name_that_cannot_be_a_topic_is_refused(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    long_topic = "t" * 62
    await make_channel(api, long_topic, "c")
    reply = await api.post(f"/channel/config?topic={long_topic}&channel=c", b'{"max_attempts":3}')
    assert reply.status == 400
    assert reply.message.startswith("INVALID_DEAD_LETTER_TOPIC: ")
    assert "set dead_letter_topic" in reply.message
    reply = await api.post(
        f"/channel/config?topic={long_topic}&channel=c",
        b'{"max_attempts":3,"dead_letter_topic":"long.dead"}',
    )
    assert reply.status == 200


async def test_config_routes_take_get_and_post_only(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "orders", "billing")
    assert (await api.put("/channel/config?topic=orders&channel=billing", b"{}")).status == 405
    assert (await api.get("/channel/redrive?topic=orders&channel=billing")).status == 405


# -- dead letters over TCP ----------------------------------------------------------------------


async def test_req_until_dead_lettered_then_read_from_the_dead_letter_topic(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "orders", "billing", max_attempts=3)
    conn = await consumer(nsqd, "orders", "billing")
    await conn.pub("orders", b"pay #1")
    seen = []
    for _ in range(3):
        msg = await conn.message()
        seen.append(msg.attempts)
        conn.cmd(f"REQ {msg.id.decode()} 0")
    assert seen == [1, 2, 3]
    await wait_for_letters(api, "orders.dead", 1)
    stats = await channel_stats(api, "orders", "billing")
    assert list(stats) == NSQD_CHANNEL_KEYS + POLICY_KEYS
    assert {k: stats[k] for k in POLICY_KEYS} == {
        "max_attempts": 3,
        "message_ttl": "0s",
        "dead_letter_topic": "orders.dead",
        "dead_letter_count": 1,
        "expired_count": 0,
    }
    assert stats["depth"] == 0 and stats["in_flight_count"] == 0 and stats["requeue_count"] == 3
    letters = await consumer(nsqd, "orders.dead", "inspect")
    letter = await letters.message()
    assert letter.body == b"pay #1" and letter.attempts == 1
    await conn.close()
    await letters.close()


async def wait_for_letters(api: HttpApi, topic: str, count: int) -> None:
    async def arrived() -> bool:
        return await topic_depth(api, topic) == count

    await eventually(arrived)


async def test_in_flight_timeouts_count_as_attempts(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "c", max_attempts=2)
    conn = await RawV2.connect(nsqd.tcp_port)
    assert await conn.identify(msg_timeout=1000) == b"OK"  # nsqd's minimum: 1s
    await conn.sub("t", "c", rdy=1)
    await conn.pub("t", b"slow")
    assert (await conn.message()).attempts == 1
    assert (await conn.message()).attempts == 2  # after the first timeout (queue scan)
    await wait_for_letters(api, "t.dead", 1)  # the second timeout dead-letters it
    stats = await channel_stats(api, "t", "c")
    assert stats["timeout_count"] == 2 and stats["dead_letter_count"] == 1
    await conn.close()


async def test_node_defaults_apply_everywhere_but_dead_letter_topics(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(max_attempts=1)
    api = http(session, nsqd)
    conn = await consumer(nsqd, "jobs", "worker")
    await conn.pub("jobs", b"x")
    conn.cmd(f"REQ {(await conn.message()).id.decode()} 0")
    await wait_for_letters(api, "jobs.dead", 1)
    letters = await consumer(nsqd, "jobs.dead", "inspect")
    letter = await letters.message()
    letters.cmd(f"REQ {letter.id.decode()} 0")  # no limit here: it comes back
    assert (await letters.message()).attempts == 2
    assert "dead_letter_count" not in await channel_stats(api, "jobs.dead", "inspect")
    await conn.close()
    await letters.close()


async def test_ttl_expires_messages_while_the_channel_is_paused(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "c", message_ttl="200ms", dead_letter_topic="t.expired")
    conn = await consumer(nsqd, "t", "c", rdy=10)
    assert (await api.post("/channel/pause?topic=t&channel=c")).status == 200
    await conn.pub("t", b"stale")

    async def expired() -> bool:
        return bool((await channel_stats(api, "t", "c"))["expired_count"] == 1)

    await eventually(expired)
    stats = await channel_stats(api, "t", "c")
    assert stats["depth"] == 0 and stats["dead_letter_count"] == 1
    assert (await api.post("/channel/unpause?topic=t&channel=c")).status == 200
    await conn.pub("t", b"fresh")
    assert (await conn.message()).body == b"fresh"
    await wait_for_letters(api, "t.expired", 1)
    await conn.close()


# -- redrive ------------------------------------------------------------------------------------


async def dead_letter(
    nsqd: NSQD, api: HttpApi, topic: str, channel: str, bodies: list[bytes]
) -> None:
    """Publish ``bodies`` and REQ each once on a max_attempts=1 channel."""
    for body in bodies:
        assert (await api.post(f"/pub?topic={topic}", body)).status == 200
    conn = await consumer(nsqd, topic, channel, rdy=len(bodies))
    for _ in bodies:
        conn.cmd(f"REQ {(await conn.message()).id.decode()} 0")
    await conn.close()


async def test_channel_redrive_sends_its_letters_back_with_fresh_attempts(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "a", max_attempts=1)
    await make_channel(api, "t", "b", max_attempts=1)
    await dead_letter(nsqd, api, "t", "a", [b"one", b"two"])  # b gets copies too: it FINs none
    await wait_for_letters(api, "t.dead", 2)
    reply = await api.post("/channel/redrive?topic=t&channel=a")
    assert reply.v1_json == {"dead_letter_topic": "t.dead", "redriven": 2, "kept": 0}
    assert await topic_depth(api, "t.dead") == 0
    stats = await channel_stats(api, "t", "a")
    assert stats["depth"] == 2 and stats["dead_letter_count"] == 1 * 2
    conn = await consumer(nsqd, "t", "a", rdy=2)
    got = [await conn.message() for _ in range(2)]
    assert sorted(m.body for m in got) == [b"one", b"two"]
    assert [m.attempts for m in got] == [1, 1]
    assert (await channel_stats(api, "t", "b"))["depth"] == 2, "the other channel got no copies"
    await conn.close()


async def test_topic_redrive_and_nothing_to_redrive(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "a", max_attempts=1)
    reply = await api.post("/channel/redrive?topic=t&channel=a")
    assert reply.v1_json == {"dead_letter_topic": "t.dead", "redriven": 0, "kept": 0}
    await dead_letter(nsqd, api, "t", "a", [b"x"])
    await wait_for_letters(api, "t.dead", 1)
    await api.post("/pub?topic=t.dead", b"by hand")  # no origin: it stays
    reply = await api.post("/topic/redrive?topic=t.dead")
    assert reply.v1_json == {"dead_letter_topic": "t.dead", "redriven": 1, "kept": 1}
    assert (await channel_stats(api, "t", "a"))["depth"] == 1


async def test_a_redrive_goes_on_when_its_caller_gives_up(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "a", max_attempts=1)
    await dead_letter(nsqd, api, "t", "a", [b"m%d" % i for i in range(2500)])  # > one batch
    await wait_for_letters(api, "t.dead", 2500)
    caller = asyncio.create_task(nsqd.redrive("t.dead", "t:a"))
    await asyncio.sleep(0)  # the caller starts the redrive and waits for it...
    caller.cancel()  # ...then gives up, as an HTTP client timing out would

    async def all_back() -> bool:
        return await topic_depth(api, "t.dead") == 0

    await eventually(all_back)
    assert (await channel_stats(api, "t", "a"))["depth"] == 2500
    assert caller.cancelled()


async def test_durable_redrive_answers_after_the_commit(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(durable=True, mem_queue_size=0)
    api = http(session, nsqd)
    await make_channel(api, "t", "a", max_attempts=1)
    await dead_letter(nsqd, api, "t", "a", [b"d%d" % i for i in range(50)])
    await wait_for_letters(api, "t.dead", 50)
    dead = (await api.get("/stats?format=json&topic=t.dead")).json["topics"][0]
    assert dead["backend_depth"] == 50, "durable: letters are on disk"
    reply = await api.post("/channel/redrive?topic=t&channel=a")
    assert reply.v1_json["redriven"] == 50
    assert (await channel_stats(api, "t", "a"))["backend_depth"] == 50


# -- the defer limit ----------------------------------------------------------------------------


async def test_defer_limit_defaults_to_max_req_timeout(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(max_req_timeout=5 * SECOND)
    api = http(session, nsqd)
    assert (await api.get("/config/max_defer_timeout")).v1_json == 5 * SECOND
    conn = await RawV2.connect(nsqd.tcp_port)
    conn.cmd("DPUB t 5000", b"x")
    assert await conn.response() == b"OK"
    conn.cmd("DPUB t 5001", b"x")
    assert await conn.error() == b"E_INVALID DPUB timeout 5001 out of range 0-5000"
    assert await conn.closed()


async def test_a_separate_defer_limit_leaves_req_alone(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(max_defer_timeout=2 * SECOND)
    api = http(session, nsqd)
    assert (await api.get("/config/max_defer_timeout")).v1_json == 2 * SECOND
    assert (await api.post("/pub?topic=t&defer=2000", b"x")).status == 200
    reply = await api.post("/pub?topic=t&defer=2001", b"x")
    assert (reply.status, reply.message) == (400, "INVALID_DEFER")
    conn = await RawV2.connect(nsqd.tcp_port)
    conn.cmd("DPUB t 2001", b"x")
    assert await conn.error() == b"E_INVALID DPUB timeout 2001 out of range 0-2000"
    consumer_conn = await consumer(nsqd, "t", "c")
    await consumer_conn.pub("t", b"now")
    msg = await consumer_conn.message()
    consumer_conn.cmd(f"REQ {msg.id.decode()} 600000")  # 10 min: fine under the 1h REQ cap
    await wait_for_deferred(api, "t", "c", 1)
    await consumer_conn.close()


async def wait_for_deferred(api: HttpApi, topic: str, channel: str, count: int) -> None:
    async def deferred() -> bool:
        return bool((await channel_stats(api, topic, channel))["deferred_count"] == count)

    await eventually(deferred)


# -- stats, metrics, persistence ----------------------------------------------------------------


async def test_channels_without_a_policy_keep_nsqds_stats_shape(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "plain")
    await make_channel(api, "t", "policed", message_ttl="1h")
    doc = (await api.get("/stats?format=json&topic=t")).json
    channels = {c["channel_name"]: c for c in doc["topics"][0]["channels"]}
    assert list(channels["plain"]) == NSQD_CHANNEL_KEYS
    assert list(channels["policed"]) == NSQD_CHANNEL_KEYS + POLICY_KEYS
    text = (await api.get("/stats?topic=t")).body.decode()
    lines = text.splitlines()
    policed = next(i for i, line in enumerate(lines) if "[policed" in line)
    assert lines[policed + 1] == (
        "          dead-letter: - max-attempts: 0 ttl: 1h0m0s dead: 0 expired: 0"
    )
    plain = next(i for i, line in enumerate(lines) if "[plain" in line)
    assert "dead-letter" not in lines[plain + 1]


async def test_metrics_for_channels_with_a_policy(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = http(session, nsqd)
    await make_channel(api, "t", "plain")
    await make_channel(api, "t", "c", max_attempts=1, message_ttl="90s")
    await dead_letter(nsqd, api, "t", "c", [b"x"])
    await wait_for_letters(api, "t.dead", 1)
    text = (await api.get("/metrics")).body.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("channel", "c"), ("topic", "t"))
    assert samples[("nsq_channel_dead_letters_total", labels)] == 1
    assert samples[("nsq_channel_expired_total", labels)] == 0
    assert samples[("nsq_channel_max_attempts", labels)] == 1
    assert samples[("nsq_channel_message_ttl_seconds", labels)] == 90
    assert ("nsq_channel_max_attempts", (("channel", "plain"), ("topic", "t"))) not in samples


async def test_settings_and_letters_survive_a_restart(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    nsqd = await nsqd_factory(data_path=str(data))
    api = http(session, nsqd)
    await make_channel(api, "t", "a", max_attempts=1, message_ttl="1h")
    assert (
        await api.post("/topic/config?topic=t", b'{"dead_letter_topic":"t.failed"}')
    ).status == 200
    await dead_letter(nsqd, api, "t", "a", [b"kept across restarts"])
    await wait_for_letters(api, "t.failed", 1)
    await nsqd.stop()
    check_nsqd_dat_format(json.loads((data / "nsqd.dat").read_bytes()))

    again = await nsqd_factory(data_path=str(data))
    api = http(session, again)
    config = (await api.get("/channel/config?topic=t&channel=a")).v1_json
    assert (config["max_attempts"], config["message_ttl"]) == (1, "1h0m0s")
    assert config["effective"]["dead_letter_topic"] == "t.failed"
    assert (await api.get("/topic/config?topic=t")).v1_json["dead_letter_topic"] == "t.failed"
    assert await topic_depth(api, "t.failed") == 1
    reply = await api.post("/channel/redrive?topic=t&channel=a")  # the origin came back from disk
    assert reply.v1_json["redriven"] == 1


def check_nsqd_dat_format(doc: dict[str, Any]) -> None:
    """What Go nsqd v1.3.0's LoadMetadata needs from nsqd.dat, as its json.Unmarshal into
    ``struct{Topics []struct{Name string; Paused bool; Channels []struct{Name string; Paused
    bool}}; Version string}`` reads it: those keys with those JSON types (unknown keys are
    ignored by encoding/json, so ours may only add keys, never change these)."""
    assert set(doc) == {"topics", "version"} and isinstance(doc["version"], str)
    topics = {t["name"]: t for t in doc["topics"]}
    for topic in topics.values():
        assert isinstance(topic["name"], str) and isinstance(topic["paused"], bool)
        assert topic["channels"] is None or isinstance(topic["channels"], list)
        assert set(topic) <= {"name", "paused", "channels", *KEYS}
        for channel in topic["channels"] or ():
            assert isinstance(channel["name"], str) and isinstance(channel["paused"], bool)
            assert set(channel) <= {"name", "paused", *KEYS}
    assert topics["t"]["dead_letter_topic"] == "t.failed"
    assert topics["t"]["channels"] == [
        {"name": "a", "paused": False, "max_attempts": 1, "message_ttl": "1h0m0s"}
    ]
    assert set(topics["t.failed"]) == {"name", "paused", "channels"}, "no settings: nsqd's own"

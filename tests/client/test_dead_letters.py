"""NsqdHTTPClient's dead-letter, TTL and redrive calls against a real nsqd, and their blocking
versions."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from conftest import wait_for

from nsqpy.client import (
    Consumer,
    HTTPError,
    Message,
    NsqdHTTPClient,
    QueueConfig,
    RedriveResult,
)
from nsqpy.client import sync as nsq_sync
from nsqpy.client.dead_letters import EffectiveConfig, go_duration
from nsqpy.nsqd.app import NSQD

OFF = EffectiveConfig(max_attempts=0, message_ttl=0.0, dead_letter_topic="", message_ttl_text="0s")


def tcp(nsqd: NSQD) -> str:
    return f"127.0.0.1:{nsqd.tcp_port}"


def topic_depth(nsqd: NSQD, topic: str) -> int:
    found = nsqd.broker.topics.get(topic)
    return -1 if found is None else found.depth


async def dead_letter(nsqd: NSQD, topic: str, channels: list[str], body: bytes) -> list[bytes]:
    """Dead-letter ``body`` from each channel (max_attempts 1, requeued once); the ids it had."""
    async with NsqdHTTPClient(nsqd.http_address) as http:
        for channel in channels:
            await http.create_channel(topic, channel)
            await http.set_channel_config(topic, channel, max_attempts=1)
        await http.publish(topic, body)
    ids: list[bytes] = []

    def requeue(msg: Message) -> None:
        ids.append(msg.id)
        msg.requeue(0, backoff=False)

    consumers = [
        Consumer(topic, channel, nsqd_tcp_addresses=tcp(nsqd), handler=requeue)
        for channel in channels
    ]
    for consumer in consumers:
        await consumer.start()
    # letters move at the end of a loop iteration after the REQ: poll for them
    await wait_for(lambda: topic_depth(nsqd, f"{topic}.dead") == len(channels))
    for consumer in consumers:
        await consumer.close()
    assert len(ids) == len(channels)  # delivered once each, then dead-lettered, not redelivered
    return ids


async def next_message(nsqd: NSQD, topic: str, channel: str) -> tuple[bytes, bytes, int]:
    """(id, body, attempts) of the next message on the channel, FINished."""
    async with Consumer(topic, channel, nsqd_tcp_addresses=tcp(nsqd)) as consumer:
        async with asyncio.timeout(5):
            async for msg in consumer:
                msg.finish()
                return msg.id, msg.body, msg.attempts
    raise AssertionError("consumer stopped")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (90, "1m30s"),
        (0.25, "250ms"),
        (0, "0s"),
        (3600.5, "1h0m0.5s"),
        (1e-6, "1µs"),
        (timedelta(minutes=1, milliseconds=1), "1m0.001s"),
        ("1h30m", "1h30m"),
    ],
)
def test_message_ttl_as_go_duration(value: float | str | timedelta, text: str) -> None:
    assert go_duration(value) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True])
def test_message_ttl_must_be_finite_seconds(value: float) -> None:
    with pytest.raises(ValueError, match="message_ttl must be a finite number of seconds"):
        go_duration(value)


async def test_topic_config_get_set_clear(nsqd: NSQD) -> None:
    async with NsqdHTTPClient(nsqd.http_address) as http:
        await http.create_topic("orders")
        fresh = await http.topic_config("orders")
        first = await http.set_topic_config("orders", max_attempts=3, message_ttl=90)
        # keywords left out keep their setting; None clears one
        cleared = await http.set_topic_config("orders", message_ttl=None)
        moved = await http.set_topic_config("orders", dead_letter_topic="graveyard")
        again = await http.topic_config("orders")
    assert fresh == QueueConfig("orders", None, None, None, None, None, OFF)
    assert (first.max_attempts, first.message_ttl, first.message_ttl_text) == (3, 90.0, "1m30s")
    assert first.effective == EffectiveConfig(3, 90.0, "orders.dead", "1m30s")
    assert (cleared.max_attempts, cleared.message_ttl) == (3, None)
    assert cleared.effective == EffectiveConfig(3, 0.0, "orders.dead", "0s")
    assert moved.dead_letter_topic == "graveyard" and moved.max_attempts == 3
    assert moved.effective.dead_letter_topic == "graveyard"
    assert again == moved


async def test_channel_config_inherits_overrides_and_clears(nsqd: NSQD) -> None:
    async with NsqdHTTPClient(nsqd.http_address) as http:
        await http.create_channel("orders", "billing")
        await http.set_topic_config("orders", max_attempts=2)
        inherited = await http.channel_config("orders", "billing")
        own = await http.set_channel_config(
            "orders", "billing", max_attempts=5, message_ttl=0.25
        )
        ttl = await http.set_channel_config("orders", "billing", message_ttl="1h30m")
        cleared = await http.set_channel_config("orders", "billing", max_attempts=None)
        stats = await http.stats(topic="orders", channel="billing")
    assert (inherited.topic, inherited.channel, inherited.max_attempts) == (
        "orders", "billing", None
    )  # fmt: skip
    assert inherited.effective == EffectiveConfig(2, 0.0, "orders.dead", "0s")
    assert (own.max_attempts, own.message_ttl, own.message_ttl_text) == (5, 0.25, "250ms")
    assert own.effective.max_attempts == 5
    assert (ttl.max_attempts, ttl.message_ttl, ttl.message_ttl_text) == (5, 5400.0, "1h30m0s")
    assert (cleared.max_attempts, cleared.message_ttl) == (None, 5400.0)
    assert cleared.effective == EffectiveConfig(2, 5400.0, "orders.dead", "1h30m0s")
    (channel,) = stats["topics"][0]["channels"]
    assert (channel["max_attempts"], channel["message_ttl"]) == (2, "1h30m0s")


async def test_bad_values_raise_nsqds_error_and_change_nothing(nsqd: NSQD) -> None:
    async with NsqdHTTPClient(nsqd.http_address) as http:
        await http.create_channel("orders", "billing")
        before = await http.set_channel_config("orders", "billing", max_attempts=4)
        errors = []
        for change in (
            {"max_attempts": 7, "message_ttl": "soon"},
            {"message_ttl": -1},
            {"max_attempts": 70000},
            {"dead_letter_topic": "orders"},
        ):
            with pytest.raises(HTTPError) as info:
                await http.set_channel_config("orders", "billing", **change)  # type: ignore[arg-type]
            errors.append(info.value)
        after = await http.channel_config("orders", "billing")
        with pytest.raises(HTTPError) as missing:
            await http.channel_config("orders", "nobody")
    assert [(e.status, e.code) for e in errors] == [
        (400, "INVALID_MESSAGE_TTL"),
        (400, "INVALID_MESSAGE_TTL"),
        (400, "INVALID_MAX_ATTEMPTS"),
        (400, "INVALID_DEAD_LETTER_TOPIC"),
    ]
    assert errors[0].message.startswith('INVALID_MESSAGE_TTL: message_ttl must be a Go duration')
    assert str(errors[0]).startswith("INVALID_MESSAGE_TTL: ") and "(HTTP 400)" in str(errors[0])
    assert after == before  # all or nothing: max_attempts 7 was not taken either
    assert (missing.value.status, missing.value.code) == (404, "CHANNEL_NOT_FOUND")


async def test_channel_redrive_brings_the_letter_back_with_fresh_attempts(nsqd: NSQD) -> None:
    (first_id,) = await dead_letter(nsqd, "orders", ["billing"], b"poison")
    async with NsqdHTTPClient(nsqd.http_address) as http:
        stats = await http.stats(topic="orders", channel="billing")
        result = await http.redrive("orders", "billing")
    (channel,) = stats["topics"][0]["channels"]
    assert channel["dead_letter_count"] == 1
    assert result == RedriveResult("orders.dead", redriven=1, kept=0)
    assert topic_depth(nsqd, "orders.dead") == 0
    msg_id, body, attempts = await next_message(nsqd, "orders", "billing")
    assert (body, attempts) == (b"poison", 1) and msg_id != first_id


async def test_topic_redrive_returns_letters_to_their_own_channels(nsqd: NSQD) -> None:
    await dead_letter(nsqd, "orders", ["billing", "audit"], b"poison")
    async with NsqdHTTPClient(nsqd.http_address) as http:
        only_billing = await http.redrive("orders", "billing")
        everything = await http.redrive("orders.dead")
        with pytest.raises(HTTPError) as info:
            await http.redrive("no.such.dead")
    assert only_billing == RedriveResult("orders.dead", redriven=1, kept=1)
    assert everything == RedriveResult("orders.dead", redriven=1, kept=0)
    assert (info.value.status, info.value.code) == (404, "TOPIC_NOT_FOUND")
    assert topic_depth(nsqd, "orders.dead") == 0
    assert (await next_message(nsqd, "orders", "billing"))[1:] == (b"poison", 1)
    assert (await next_message(nsqd, "orders", "audit"))[1:] == (b"poison", 1)


def blocking_calls(address: str) -> dict[str, object]:
    """Every call of the blocking client, from a plain thread."""
    out: dict[str, object] = {}
    with nsq_sync.NsqdHTTPClient(address) as http:
        http.create_topic("jobs")
        out["topic"] = http.set_topic_config("jobs", message_ttl=timedelta(hours=1))
        out["topic_again"] = http.topic_config("jobs")
        http.create_channel("jobs", "worker")
        out["channel"] = http.set_channel_config(
            "jobs", "worker", max_attempts=2, dead_letter_topic="jobs.failed"
        )
        out["channel_again"] = http.channel_config("jobs", "worker")
        try:
            http.set_channel_config("jobs", "worker", dead_letter_topic="bad name!")
        except HTTPError as err:
            out["error"] = (err.status, err.code)
        http.publish("jobs", b"a")
        http.multi_publish("jobs", [b"b\nc"])
        out["depth"] = http.stats(topic="jobs")["topics"][0]["channels"][0]["depth"]
        out["redrive"] = http.redrive("orders", "billing")
    return out


async def test_blocking_client(nsqd: NSQD) -> None:
    await dead_letter(nsqd, "orders", ["billing"], b"poison")
    out = await asyncio.to_thread(blocking_calls, nsqd.http_address)
    assert out["topic"] == out["topic_again"] == QueueConfig(
        "jobs", None, None, 3600.0, None, "1h0m0s", EffectiveConfig(0, 3600.0, "", "1h0m0s")
    )
    assert out["channel"] == out["channel_again"] == QueueConfig(
        "jobs", "worker", 2, None, "jobs.failed", None,
        EffectiveConfig(2, 3600.0, "jobs.failed", "1h0m0s"),
    )  # fmt: skip
    assert out["error"] == (400, "INVALID_DEAD_LETTER_TOPIC")
    assert out["depth"] == 2
    assert out["redrive"] == RedriveResult("orders.dead", redriven=1, kept=0)
    assert (await next_message(nsqd, "orders", "billing"))[1:] == (b"poison", 1)

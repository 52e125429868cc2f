"""gnsq 1.0.2 (gevent) against ``python -m nsqpy.nsqd``: Producer, Consumer, raw TCP, HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .harness import (
    BINARY_BODIES,
    NsqdProcess,
    attempts_by_id,
    b64list,
    bodies_of,
    run_peer,
    valid_name,
)

pytestmark = pytest.mark.peers


async def publish(nsqd: NsqdProcess, topic: str, bodies: list[bytes], **extra: Any) -> Any:
    return await run_peer(
        "gnsq", "publish", {"tcp": nsqd.tcp, "topic": topic, "bodies": b64list(bodies), **extra}
    )


def base(nsqd: NsqdProcess, topic: str, channel: str, **extra: Any) -> dict[str, Any]:
    return {"tcp": nsqd.tcp, "http": nsqd.http, "topic": topic, "channel": channel, **extra}


@pytest.mark.parametrize("mode", ["pub", "mpub"])
async def test_producer_then_consumer(
    nsqd_proc: NsqdProcess, topic: str, channel: str, mode: str
) -> None:
    pub = await publish(nsqd_proc, topic, BINARY_BODIES, mode=mode)
    assert pub["responses"] == ["OK"] * (len(BINARY_BODIES) if mode == "pub" else 1)
    res = await run_peer(
        "gnsq", "consume", base(nsqd_proc, topic, channel, count=len(BINARY_BODIES))
    )
    assert res["errors"] == []
    assert bodies_of(res["deliveries"]) == BINARY_BODIES
    assert all(d["attempts"] == 1 for d in res["deliveries"])


async def test_producer_deferred_publish(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    pub = await publish(nsqd_proc, topic, [b"deferred\x00body"], mode="dpub", defer_ms=700)
    assert pub["responses"] == ["OK"]
    res = await run_peer("gnsq", "consume", base(nsqd_proc, topic, channel, count=1))
    (msg,) = res["deliveries"]
    assert bodies_of([msg]) == [b"deferred\x00body"]
    assert 650 <= msg["recv_ms"] - msg["timestamp"] / 1e6 <= 5000


async def test_consumer_requeue(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    await publish(nsqd_proc, topic, [b"x", b"y"], mode="mpub")
    res = await run_peer(
        "gnsq", "consume", base(nsqd_proc, topic, channel, count=2, mode="requeue")
    )
    assert res["errors"] == []
    assert sorted(attempts_by_id(res["deliveries"]).values()) == [[1, 2], [1, 2]]


async def test_consumer_explicit_requeue_delay(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"later"])
    res = await run_peer(
        "gnsq",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="requeue_explicit", requeue_ms=400),
    )
    first, second = res["deliveries"]
    assert (first["attempts"], second["attempts"]) == (1, 2)
    assert 0.35 <= second["t"] - first["t"] <= 3.0


async def test_consumer_max_tries_gives_up(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"poison"])
    res = await run_peer(
        "gnsq",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="always_requeue", max_tries=2),
    )
    assert [d["attempts"] for d in res["deliveries"]] == [1, 2]
    assert [g["attempts"] for g in res["gave_up"]] == [3]
    assert res["errors"] == []


async def test_consumer_max_in_flight_window(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    bodies = [f"w{i}".encode() for i in range(12)]
    await publish(nsqd_proc, topic, bodies, mode="mpub")
    res = await run_peer(
        "gnsq",
        "consume",
        base(nsqd_proc, topic, channel, count=12, mode="window", max_in_flight=5),
    )
    assert res["max_held"] == 5
    assert sorted(bodies_of(res["deliveries"])) == sorted(bodies)


async def test_consumer_heartbeats(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    res = await run_peer(
        "gnsq",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="heartbeat", heartbeat_interval=1),
    )
    assert res["heartbeats"] >= 2
    assert res["connections_before_publish"] == 1  # still connected past the read deadline
    assert res["errors"] == []
    assert bodies_of(res["deliveries"]) == [b"after-heartbeats"]


async def test_msg_timeout_flag_redelivery_and_touch(
    nsqd_proc_factory: Any,
) -> None:
    """--msg-timeout=1s: an unanswered message comes back; a TOUCHed one does not."""
    nsqd = nsqd_proc_factory("--msg-timeout=1s")
    t1, t2 = valid_name("timeout"), valid_name("touch")
    await asyncio.gather(publish(nsqd, t1, [b"t"]), publish(nsqd, t2, [b"u"]))
    identify, timed_out, touched = await asyncio.gather(
        run_peer("gnsq", "identify", {"tcp": nsqd.tcp}),
        run_peer("gnsq", "consume", base(nsqd, t1, "c", count=1, mode="timeout")),
        run_peer("gnsq", "consume", base(nsqd, t2, "c", count=1, mode="touch", hold=1.6)),
    )
    assert identify["identify_response"]["msg_timeout"] == 1000
    first, second = timed_out["deliveries"]
    assert (first["id"], first["attempts"], second["attempts"]) == (second["id"], 1, 2)
    assert 0.9 <= second["t"] - first["t"] <= 3.0
    assert len(touched["deliveries"]) == 1 and touched["errors"] == []


async def test_identify_options(nsqd_proc: NsqdProcess) -> None:
    res = await run_peer(
        "gnsq",
        "identify",
        {
            "tcp": nsqd_proc.tcp,
            "heartbeat_interval": 5,
            "output_buffer_size": 8192,
            "output_buffer_timeout": 100,
            "sample_rate": 10,
        },
    )
    reply = res["identify_response"]
    assert reply["max_rdy_count"] == res["max_ready_count"] == 2500
    assert (reply["output_buffer_size"], reply["output_buffer_timeout"]) == (8192, 100)
    assert reply["sample_rate"] == 10
    assert reply["msg_timeout"] == 60000


async def test_max_rdy_count_flag(nsqd_proc_factory: Any, topic: str) -> None:
    nsqd = nsqd_proc_factory("--max-rdy-count=50")
    identify, errors = await asyncio.gather(
        run_peer("gnsq", "identify", {"tcp": nsqd.tcp}),
        run_peer("gnsq", "errors", {"tcp": nsqd.tcp, "topic": topic, "rdy": 51}),
    )
    assert identify["max_ready_count"] == 50
    case = errors["cases"]["rdy_too_big"]
    assert (case["class"], case["text"]) == ("NSQInvalid", "RDY count 51 out of range 0-50")
    assert case["closed"]


async def test_tcp_client_low_level(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    res = await run_peer("gnsq", "tcp", base(nsqd_proc, topic, channel))
    steps = res["steps"]
    assert steps["identify"]["version"] == "1.3.0"
    assert [steps[f"pub{i}"]["data"] for i in range(3)] == ["OK"] * 3
    assert steps["sub"] == {"frame": "response", "data": "OK"}
    # RDY 3 delivers all three at once (a window, not one at a time).
    assert sorted(bodies_of(steps["delivered"])) == [b"m0", b"m1", b"m2"]
    # REQ 0 puts m1 straight back: redelivered with attempts=2, same ID.
    redelivered = steps["redelivered"]
    assert bodies_of([redelivered]) == [b"m1"] and redelivered["attempts"] == 2
    # FIN of an already-finished ID: non-fatal E_FIN_FAILED, the connection stays.
    assert steps["fin_twice"]["class"] == "NSQFinishFailed"
    m0 = next(d for d in steps["delivered"] if d["body"] == "bTA=")
    assert steps["fin_twice"]["text"] == f"FIN {m0['id']} failed ID not in flight"
    assert steps["cls"] == {"frame": "response", "data": "CLOSE_WAIT"}
    # FIN of the message still in flight after CLS is accepted (no error frame before
    # the OK of the PUB that follows on the same connection).
    assert steps["pub_after_cls"] == {"frame": "response", "data": "OK"}
    # After CLS, RDY is ignored and nothing more is delivered.
    assert steps["after_cls"] is None


async def test_tcp_errors_map_to_gnsq_classes(nsqd_proc: NsqdProcess, topic: str) -> None:
    res = await run_peer("gnsq", "errors", {"tcp": nsqd_proc.tcp, "topic": topic})
    cases = res["cases"]
    expected = {
        "pub_bad_topic": ("NSQBadTopic", 'PUB topic name "bad!topic" is not valid'),
        # MPUB's wire text repeats the code: "E_BAD_TOPIC E_BAD_TOPIC MPUB ..."
        "mpub_bad_topic": ("NSQBadTopic", 'E_BAD_TOPIC MPUB topic name "b!" is not valid'),
        "sub_bad_channel": ("NSQBadChannel", 'SUB channel name "bad!channel" is not valid'),
        "pub_empty_body": ("NSQBadMessage", "PUB invalid message body size 0"),
        "dpub_bad_defer": ("NSQInvalid", "DPUB could not parse timeout -1"),
        "rdy_before_sub": ("NSQInvalid", "cannot RDY in current state"),
        "fin_before_sub": ("NSQInvalid", "cannot FIN in current state"),
        "bad_command": ("NSQInvalid", "invalid command WHAT"),
        "producer_empty_body": ("NSQBadMessage", "PUB invalid message body size 0"),
        "identify_bad_heartbeat": ("NSQBadBody", "IDENTIFY heartbeat interval (61000) is invalid"),
        # gnsq sends 1000*0.5 = 500.0; Go's encoding/json refuses a float for an int field.
        "identify_float_heartbeat": ("NSQBadBody", "IDENTIFY failed to decode JSON body"),
        "auth_disabled": ("NSQAuthDisabled", "AUTH disabled"),
        "rdy_too_big": ("NSQInvalid", "RDY count 2501 out of range 0-2500"),
    }
    for name, (cls, text) in expected.items():
        assert (cases[name]["class"], cases[name]["text"]) == (cls, text), name
        if "closed" in cases[name]:
            assert cases[name]["closed"], f"{name}: a fatal error must close the connection"
    non_fatal = [(c.get("class"), c.get("text"), c.get("data")) for c in cases["non_fatal"]]
    assert non_fatal == [
        ("NSQFinishFailed", "FIN 0000000000000000 failed ID not in flight", None),
        ("NSQRequeueFailed", "REQ 0000000000000000 failed ID not in flight", None),
        ("NSQTouchFailed", "TOUCH 0000000000000000 failed ID not in flight", None),
        (None, None, "OK"),  # the same connection still publishes
    ]


def _channel(stats: dict[str, Any]) -> dict[str, Any]:
    (ch,) = stats["json"]["channels"]
    return ch


async def test_http_client_every_call(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    bodies = [b"one\x00", b"two\nlines", b"\xff three"]
    res = await run_peer(
        "gnsq", "http", base(nsqd_proc, topic, channel, bodies=b64list(bodies)), timeout=20
    )
    calls = res["calls"]
    raised = {k: v["raised"] for k, v in calls.items() if "raised" in v}
    expected_errors = {
        "delete_channel_again": "http error <404>",
        "delete_topic_again": "http error <404>",
        "publish_bad_defer": "http error <400>",
        "create_channel_no_topic": "http error <404>",
        "empty_topic_missing": "http error <404>",
        "pause_topic_missing": "http error <404>",
        "publish_too_big": "http error <413>",
    }
    assert {k: v["text"] for k, v in raised.items()} == expected_errors
    assert all(v["class"] == "NSQHttpError" for v in raised.values())

    assert calls["ping"] == {"bytes": "OK"}
    info = calls["info"]["json"]  # gnsq only parses it because of the JSON content-type
    assert list(info) == [
        "version",
        "broadcast_address",
        "hostname",
        "http_port",
        "tcp_port",
        "start_time",
        "max_heartbeat_interval",
        "max_output_buffer_size",
        "max_output_buffer_timeout",
        "max_deflate_level",
    ]
    assert info["version"] == "1.3.0"
    assert (info["tcp_port"], info["http_port"]) == (nsqd_proc.tcp_port, nsqd_proc.http_port)
    assert info["max_heartbeat_interval"] == 60_000_000_000  # Go durations in ns
    assert info["max_output_buffer_timeout"] == 30_000_000_000
    for name in ("publish", "publish_defer", "multipublish_text", "multipublish_binary"):
        assert calls[name] == {"bytes": "OK"}, name
    for name in (
        "create_topic",
        "create_channel",
        "pause_topic",
        "pause_channel",
        "unpause_topic",
        "unpause_channel",
        "empty_channel",
        "empty_topic",
        "delete_channel",
        "delete_topic",
    ):
        assert calls[name] == {"bytes": ""}, name  # Go answers these with an empty 200

    n = len(bodies)
    after = calls["stats_after_publish"]["json"]
    assert after["topic_name"] == topic
    assert after["message_count"] == 2 * n + 2
    text_bytes = sum(len(b) for b in bodies)  # "\n" became " ": same length
    assert after["message_bytes"] == len(bodies[0]) + len(b"deferred") + 2 * text_bytes
    ch = _channel(calls["stats_after_publish"])
    assert ch["channel_name"] == channel
    assert (ch["depth"], ch["deferred_count"], ch["message_count"]) == (2 * n + 1, 1, 2 * n + 2)
    assert calls["stats_paused"]["json"]["paused"] is True
    assert _channel(calls["stats_paused"])["paused"] is True
    assert calls["stats_unpaused"]["json"]["paused"] is False
    assert _channel(calls["stats_unpaused"])["paused"] is False
    emptied = _channel(calls["stats_emptied"])
    assert (emptied["depth"], emptied["deferred_count"], emptied["in_flight_count"]) == (0, 0, 0)
    assert calls["stats_emptied"]["json"]["depth"] == 0

    text = calls["stats_text"]["bytes"]
    assert text.startswith("nsqd v1.3.0 (built w/")
    assert "\nHealth: OK\n" in text and "\nTopics:\n" in text
    assert f"[{topic}" in text and f"[{channel}" in text

    whole = calls["stats_all"]["json"]
    assert list(whole) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert topic in [t["topic_name"] for t in whole["topics"]]
    filtered = calls["stats_channel_filter"]["json"]["topics"]
    assert [t["topic_name"] for t in filtered] == [topic]
    assert [c["channel_name"] for c in filtered[0]["channels"]] == [channel]
    assert calls["stats_deleted"]["json"]["topics"] is None  # Go's nil slice for no match

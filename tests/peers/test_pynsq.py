"""pynsq 0.9.1 (tornado) against ``python -m nsqpy.nsqd``: Writer and Reader behaviour."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import pytest

from .harness import (
    BINARY_BODIES,
    NsqdProcess,
    attempts_by_id,
    b64list,
    bodies_of,
    run_peer,
)

pytestmark = pytest.mark.peers

IDENTIFY_KEYS = [
    "max_rdy_count",
    "version",
    "max_msg_timeout",
    "msg_timeout",
    "tls_v1",
    "deflate",
    "deflate_level",
    "max_deflate_level",
    "snappy",
    "sample_rate",
    "auth_required",
    "output_buffer_size",
    "output_buffer_timeout",
]


def _get(url: str) -> tuple[Any, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.headers, resp.read()


async def publish(nsqd: NsqdProcess, topic: str, bodies: list[bytes], **extra: Any) -> Any:
    return await run_peer(
        "pynsq", "publish", {"tcp": nsqd.tcp, "topic": topic, "bodies": b64list(bodies), **extra}
    )


def base(nsqd: NsqdProcess, topic: str, channel: str, **extra: Any) -> dict[str, Any]:
    return {"tcp": nsqd.tcp, "http": nsqd.http, "topic": topic, "channel": channel, **extra}


def assert_fresh_deliveries(deliveries: list[dict[str, Any]], started_ms: float) -> None:
    ids = [d["id"] for d in deliveries]
    assert len(set(ids)) == len(ids)
    for d in deliveries:
        assert d["attempts"] == 1
        assert len(d["id"]) == 16 and all(c in "0123456789abcdef" for c in d["id"])
        # The timestamp is the publish time in ns (allow clock granularity slack).
        assert started_ms - 1000 <= d["timestamp"] / 1e6 <= d["recv_ms"] + 1000


async def test_writer_pub_then_reader_fin(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    started_ms = time.time() * 1000
    pub = await publish(nsqd_proc, topic, BINARY_BODIES, mode="pub")
    assert pub["responses"] == ["OK"] * len(BINARY_BODIES)
    assert pub["errors"] == []
    # nsqd answers feature negotiation with its JSON, keys in Go's order.
    assert list(pub["identify_response"]) == IDENTIFY_KEYS
    assert pub["identify_response"]["version"] == "1.3.0"

    res = await run_peer(
        "pynsq", "consume", base(nsqd_proc, topic, channel, count=len(BINARY_BODIES))
    )
    assert res["errors"] == [] and res["closes"] == 0
    assert bodies_of(res["deliveries"]) == BINARY_BODIES  # one in-memory queue keeps order
    assert_fresh_deliveries(res["deliveries"], started_ms)


async def test_writer_mpub(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    started_ms = time.time() * 1000
    pub = await publish(nsqd_proc, topic, BINARY_BODIES, mode="mpub")
    assert pub["responses"] == ["OK"]
    res = await run_peer(
        "pynsq", "consume", base(nsqd_proc, topic, channel, count=len(BINARY_BODIES))
    )
    assert bodies_of(res["deliveries"]) == BINARY_BODIES
    assert_fresh_deliveries(res["deliveries"], started_ms)
    # Go stamps each MPUB message with time.Now() as it is read: non-decreasing.
    stamps = [d["timestamp"] for d in res["deliveries"]]
    assert stamps == sorted(stamps)


async def test_writer_dpub_defers_delivery(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    pub = await publish(nsqd_proc, topic, [b"later"], mode="dpub", defer_ms=700)
    assert pub["responses"] == ["OK"]
    res = await run_peer("pynsq", "consume", base(nsqd_proc, topic, channel, count=1))
    (msg,) = res["deliveries"]
    assert msg["attempts"] == 1
    waited_ms = msg["recv_ms"] - msg["timestamp"] / 1e6
    assert 650 <= waited_ms <= 5000, waited_ms


async def test_writer_errors_are_fatal_with_go_texts(nsqd_proc: NsqdProcess, topic: str) -> None:
    res = await run_peer("pynsq", "publish_errors", {"tcp": nsqd_proc.tcp, "topic": topic})
    cases = res["cases"]
    assert cases["pub_bad_topic"]["response"] == (
        'ERROR E_BAD_TOPIC PUB topic name "bad!topic" is not valid'
    )
    assert cases["mpub_bad_topic"]["response"] == (
        'ERROR E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!topic" is not valid'
    )
    assert cases["dpub_bad_defer"]["response"] == (
        "ERROR E_INVALID DPUB timeout 3600001 out of range 0-3600000"
    )
    assert cases["mpub_zero_messages"]["response"] == (
        "ERROR E_BAD_BODY MPUB invalid message count 0"
    )
    assert cases["pub_too_big"]["response"] == (
        "ERROR E_BAD_MESSAGE PUB message too big 1048577 > 1048576"
    )
    # Every one of these is fatal: nsqd closes the connection after the error frame.
    assert all(case["closed"] for case in cases.values()), cases


async def test_reader_requeue_by_returning_false(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    bodies = [b"first", b"second\x00"]
    await publish(nsqd_proc, topic, bodies, mode="mpub")
    res = await run_peer(
        "pynsq", "consume", base(nsqd_proc, topic, channel, count=2, mode="requeue_false")
    )
    assert res["errors"] == []
    seen = attempts_by_id(res["deliveries"])
    assert sorted(seen.values()) == [[1, 2], [1, 2]]
    assert sorted(set(bodies_of(res["deliveries"]))) == sorted(bodies)


async def test_reader_explicit_requeue_with_delay(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"retry me"])
    res = await run_peer(
        "pynsq",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="requeue_explicit", requeue_ms=500),
    )
    first, second = res["deliveries"]
    assert (first["id"], first["attempts"]) == (second["id"], 1)
    assert second["attempts"] == 2
    assert second["timestamp"] == first["timestamp"]  # a requeue keeps the original message
    assert 0.45 <= second["t"] - first["t"] <= 3.0


async def test_reader_max_tries_gives_up(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    await publish(nsqd_proc, topic, [b"poison"])
    res = await run_peer(
        "pynsq", "max_tries", base(nsqd_proc, topic, channel, count=1, max_tries=2)
    )
    assert [d["attempts"] for d in res["deliveries"]] == [1, 2]
    assert [g["attempts"] for g in res["gave_up"]] == [3]
    assert res["errors"] == []  # the give-up FIN was accepted


async def test_reader_touch_outlives_msg_timeout(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"slow work"])
    res = await run_peer(
        "pynsq",
        "touch",
        base(nsqd_proc, topic, channel, msg_timeout=1, hold=1.6, touch_every=0.3),
    )
    assert len(res["deliveries"]) == 1, res["deliveries"]  # never timed out and redelivered
    assert res["touches"] >= 3
    assert res["errors"] == []  # the late FIN succeeded (no E_FIN_FAILED)


async def test_reader_msg_timeout_redelivers(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"forgotten"])
    res = await run_peer("pynsq", "timeout", base(nsqd_proc, topic, channel, msg_timeout=1))
    first, second = res["deliveries"]
    assert first["id"] == second["id"]
    assert [first["attempts"], second["attempts"]] == [1, 2]
    assert 0.9 <= second["t"] - first["t"] <= 3.0


async def test_reader_max_in_flight_window(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(12)]
    await publish(nsqd_proc, topic, bodies, mode="mpub")
    res = await run_peer(
        "pynsq", "rdy_window", base(nsqd_proc, topic, channel, count=12, max_in_flight=5)
    )
    # RDY 5 is a window: 5 unacknowledged messages at once, never more.
    assert res["max_held"] == 5
    assert max(res["batches"]) == 5
    assert sorted(bodies_of(res["deliveries"])) == sorted(bodies)
    assert all(d["attempts"] == 1 for d in res["deliveries"])


async def test_reader_heartbeats_keep_connection(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    res = await run_peer(
        "pynsq",
        "heartbeat",
        base(nsqd_proc, topic, channel, heartbeat_interval=1, heartbeats=2),
    )
    assert res["heartbeats"] >= 2
    gaps = [b - a for a, b in zip(res["heartbeat_times"], res["heartbeat_times"][1:], strict=False)]
    assert all(0.5 <= g <= 2.0 for g in gaps), res["heartbeat_times"]
    # Past nsqd's 2x-interval read deadline, NOP replies kept the connection alive.
    assert res["closes_before_publish"] == 0
    assert res["errors"] == []
    assert bodies_of(res["deliveries"]) == [b"after-heartbeats"]


async def test_reader_identify_options(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    res = await run_peer(
        "pynsq",
        "identify",
        base(
            nsqd_proc,
            topic,
            channel,
            user_agent="nsqpy-peers/1.0",
            msg_timeout=3,
            output_buffer_size=4096,
            output_buffer_timeout=50,
            sample_rate=42,
            hostname="peer-host.example",
        ),
    )
    assert res["identify_keys"] == IDENTIFY_KEYS
    assert res["identify_response"] == {
        "max_rdy_count": 2500,
        "version": "1.3.0",
        "max_msg_timeout": 900000,
        "msg_timeout": 3000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 42,
        "auth_required": False,
        "output_buffer_size": 4096,
        "output_buffer_timeout": 50,
    }


async def test_reader_identify_shows_in_stats(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    res = await run_peer(
        "pynsq",
        "identify",
        base(
            nsqd_proc,
            topic,
            channel,
            user_agent="nsqpy-peers/1.0",
            sample_rate=42,
            hostname="peer-host.example",
        ),
    )
    assert "stats_error" not in res, res.get("stats_error")
    (client,) = res["stats_clients"]
    assert client["user_agent"] == "nsqpy-peers/1.0"
    assert client["hostname"] == "peer-host.example"
    assert client["client_id"] == "peer-host"  # pynsq sends the short hostname as client_id
    assert client["sample_rate"] == 42
    assert client["state"] == 3  # subscribed
    assert client["version"] == "V2"
    assert client["ready_count"] == 1


async def test_reader_close_redelivers_in_flight_to_next_reader(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    """Reader.close() drops the connection holding a message; the next reader gets it."""
    await publish(nsqd_proc, topic, [b"held at close"])
    res = await run_peer("pynsq", "close_inflight", base(nsqd_proc, topic, channel, msg_timeout=1))
    (first,) = res["first"]
    (second,) = res["second"]
    assert (first["id"], first["body"]) == (second["id"], second["body"])
    assert (first["attempts"], second["attempts"]) == (1, 2)
    assert res["errors"] == []


async def test_reader_close_gives_in_flight_back_at_once(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    """nsqpy's deliberate improvement (docs/nsqd.md): no wait for the closed client's timeout.

    Go nsqd leaves the message in flight until its msg_timeout (1 s here) expires.
    """
    await publish(nsqd_proc, topic, [b"held at close"])
    res = await run_peer("pynsq", "close_inflight", base(nsqd_proc, topic, channel, msg_timeout=1))
    (first,) = res["first"]
    (second,) = res["second"]
    assert second["attempts"] == 2
    assert second["t"] - first["t"] < 0.9, (first, second)


async def test_max_rdy_count_flag_caps_reader_window(nsqd_proc_factory: Any) -> None:
    """pynsq clamps RDY to the max_rdy_count nsqd announced in its IDENTIFY reply."""
    nsqd = nsqd_proc_factory("--max-rdy-count=3")
    bodies = [f"r{i}".encode() for i in range(6)]
    await publish(nsqd, "capped", bodies, mode="mpub")
    res = await run_peer(
        "pynsq",
        "rdy_window",
        base(nsqd, "capped", "c", count=6, max_in_flight=10, quiet=0.3),
    )
    assert res["errors"] == []  # no E_INVALID RDY count out of range
    assert res["max_held"] == 3
    assert sorted(bodies_of(res["deliveries"])) == sorted(bodies)


async def test_reader_deflate(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    res = await run_peer(
        "pynsq", "deflate", base(nsqd_proc, topic, channel, deflate=True, deflate_level=3)
    )
    assert res["identify_response"]["deflate"] is True
    assert res["identify_response"]["deflate_level"] == 3
    assert bodies_of(res["deliveries"]) == [b"deflated" * 100]


async def test_stats_json_via_http_after_pynsq_traffic(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    """The counters a Reader's work leaves behind, as /stats reports them."""
    await publish(nsqd_proc, topic, [b"a", b"b"], mode="mpub")
    await run_peer(
        "pynsq", "consume", base(nsqd_proc, topic, channel, count=2, mode="requeue_false")
    )
    url = f"http://{nsqd_proc.http}/stats?format=json&topic={topic}"
    headers, body = await asyncio.to_thread(_get, url)
    assert headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    stats = json.loads(body)
    (t,) = stats["topics"]
    assert (t["topic_name"], t["message_count"], t["message_bytes"]) == (topic, 2, 2)
    (c,) = t["channels"]
    assert c["channel_name"] == channel
    assert (c["message_count"], c["requeue_count"], c["depth"], c["in_flight_count"]) == (
        2,
        2,
        0,
        0,
    )
    assert c["client_count"] == 0 and c["clients"] == []

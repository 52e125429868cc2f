"""nsqjs (Node, version pinned in nsqjs/package.json) against ``python -m nsqpy.nsqd``."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import (
    BINARY_BODIES,
    NsqdProcess,
    attempts_by_id,
    b64list,
    bodies_of,
    nsqjs_missing,
    run_peer,
)

_missing = nsqjs_missing()
pytestmark = [
    pytest.mark.peers,
    pytest.mark.skipif(_missing is not None, reason=_missing or ""),
]


async def publish(nsqd: NsqdProcess, topic: str, bodies: list[bytes], **extra: Any) -> Any:
    return await run_peer(
        "nsqjs", "publish", {"tcp": nsqd.tcp, "topic": topic, "bodies": b64list(bodies), **extra}
    )


def base(nsqd: NsqdProcess, topic: str, channel: str, **extra: Any) -> dict[str, Any]:
    return {"tcp": nsqd.tcp, "topic": topic, "channel": channel, **extra}


@pytest.mark.parametrize("mode", ["pub", "mpub"])
async def test_writer_then_reader_finish(
    nsqd_proc: NsqdProcess, topic: str, channel: str, mode: str
) -> None:
    pub = await publish(nsqd_proc, topic, BINARY_BODIES, mode=mode)
    # publish(topic, [..]) with several messages is one MPUB, so one OK.
    assert pub["responses"] == ["OK"] * (len(BINARY_BODIES) if mode == "pub" else 1)
    assert pub["errors"] == []
    res = await run_peer(
        "nsqjs", "consume", base(nsqd_proc, topic, channel, count=len(BINARY_BODIES))
    )
    assert res["errors"] == []
    assert bodies_of(res["deliveries"]) == BINARY_BODIES
    assert all(d["attempts"] == 1 for d in res["deliveries"])


async def test_writer_defer_publish(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    pub = await publish(nsqd_proc, topic, [b"\x00later\n"], mode="dpub", defer_ms=700)
    assert pub["responses"] == ["OK"]
    res = await run_peer("nsqjs", "consume", base(nsqd_proc, topic, channel, count=1))
    (msg,) = res["deliveries"]
    assert bodies_of([msg]) == [b"\x00later\n"]
    assert 650 <= msg["recv_ms"] - int(msg["timestamp"]) / 1e6 <= 5000


async def test_writer_bad_topic_error(nsqd_proc: NsqdProcess) -> None:
    res = await run_peer("nsqjs", "publish_error", {"tcp": nsqd_proc.tcp})
    assert res["response"] == 'ERROR Error: E_BAD_TOPIC PUB topic name "bad!topic" is not valid'
    assert res["closed"] is True


async def test_reader_requeue(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    await publish(nsqd_proc, topic, [b"a", b"b"], mode="mpub")
    res = await run_peer(
        "nsqjs", "consume", base(nsqd_proc, topic, channel, count=2, mode="requeue")
    )
    assert res["errors"] == []
    assert sorted(attempts_by_id(res["deliveries"]).values()) == [[1, 2], [1, 2]]


async def test_reader_requeue_with_delay(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    await publish(nsqd_proc, topic, [b"delayed retry"])
    res = await run_peer(
        "nsqjs",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="requeue", requeue_ms=400),
    )
    first, second = res["deliveries"]
    assert (first["attempts"], second["attempts"]) == (1, 2)
    assert 0.35 <= second["t"] - first["t"] <= 3.0


async def test_reader_max_attempts_discards(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"poison"])
    res = await run_peer(
        "nsqjs",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="always_requeue", max_attempts=2),
    )
    assert [d["attempts"] for d in res["deliveries"]] == [1, 2]
    assert [d["attempts"] for d in res["discarded"]] == [3]
    assert res["errors"] == []  # nsqjs's automatic FIN of the discarded message succeeded


async def test_reader_max_in_flight_window(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    bodies = [f"j{i}".encode() for i in range(12)]
    await publish(nsqd_proc, topic, bodies, mode="mpub")
    res = await run_peer(
        "nsqjs",
        "consume",
        base(nsqd_proc, topic, channel, count=12, mode="window", max_in_flight=5),
    )
    assert res["max_held"] == 5
    assert max(res["batches"]) == 5
    assert sorted(bodies_of(res["deliveries"])) == sorted(bodies)


async def test_reader_msg_timeout_redelivers(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    await publish(nsqd_proc, topic, [b"ignored once"])
    res = await run_peer(
        "nsqjs",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="timeout", msg_timeout_ms=1000),
    )
    first, second = res["deliveries"]
    assert (first["id"], first["attempts"], second["attempts"]) == (second["id"], 1, 2)
    assert 0.9 <= second["t"] - first["t"] <= 3.0


async def test_reader_touch(nsqd_proc: NsqdProcess, topic: str, channel: str) -> None:
    await publish(nsqd_proc, topic, [b"long job"])
    res = await run_peer(
        "nsqjs",
        "consume",
        base(nsqd_proc, topic, channel, count=1, mode="touch", msg_timeout_ms=1000, hold=1.6),
    )
    assert len(res["deliveries"]) == 1
    assert res["touches"] >= 3
    assert res["errors"] == []


async def test_reader_heartbeats_keep_idle_connection(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    res = await run_peer(
        "nsqjs",
        "consume",
        base(
            nsqd_proc,
            topic,
            channel,
            count=1,
            mode="idle_then_publish",
            heartbeat_interval=1,
            idle=2.5,
        ),
    )
    assert res["closes_before_publish"] == 0  # NOP replies beat the 2s read deadline
    assert res["errors"] == []
    assert bodies_of(res["deliveries"]) == [b"after-idle"]


@pytest.mark.parametrize("compression", ["snappy", "deflate"])
async def test_writer_compression(
    nsqd_proc: NsqdProcess, topic: str, channel: str, compression: str
) -> None:
    body = b"compress me " * 200
    pub = await publish(nsqd_proc, topic, [body], **{compression: True})
    assert pub["responses"] == ["OK"]
    assert pub["identify_response"][compression] is True
    res = await run_peer("nsqjs", "consume", base(nsqd_proc, topic, channel, count=1))
    assert bodies_of(res["deliveries"]) == [body]

"""Messages published by one client library and consumed by another, bodies intact."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from .harness import BINARY_BODIES, NsqdProcess, b64list, bodies_of, nsqjs_missing, run_peer

pytestmark = pytest.mark.peers


@pytest.mark.parametrize(
    ("producer", "consumer"),
    [("pynsq", "gnsq"), ("gnsq", "nsqjs"), ("nsqjs", "pynsq"), ("gnsq", "pynsq")],
)
async def test_publish_with_one_consume_with_another(
    nsqd_proc: NsqdProcess, topic: str, channel: str, producer: str, consumer: str
) -> None:
    pub = await run_peer(
        producer,
        "publish",
        {"tcp": nsqd_proc.tcp, "topic": topic, "bodies": b64list(BINARY_BODIES), "mode": "mpub"},
    )
    assert pub["responses"] == ["OK"]
    res = await run_peer(
        consumer,
        "consume",
        {"tcp": nsqd_proc.tcp, "topic": topic, "channel": channel, "count": len(BINARY_BODIES)},
    )
    assert bodies_of(res["deliveries"]) == BINARY_BODIES
    assert all(d["attempts"] == 1 for d in res["deliveries"])
    assert len({d["id"] for d in res["deliveries"]}) == len(BINARY_BODIES)


async def test_http_publish_then_pynsq_reader(
    nsqd_proc: NsqdProcess, topic: str, channel: str
) -> None:
    """gnsq's HTTP /pub and /mpub?binary=true bodies arrive intact over TCP."""
    pub = await run_peer(
        "gnsq",
        "http_publish",
        {"http": nsqd_proc.http, "topic": topic, "bodies": b64list(BINARY_BODIES)},
    )
    assert pub["responses"] == ["OK"] * (len(BINARY_BODIES) + 1)
    res = await run_peer(
        "pynsq",
        "consume",
        {
            "tcp": nsqd_proc.tcp,
            "topic": topic,
            "channel": channel,
            "count": 2 * len(BINARY_BODIES),
            "max_in_flight": 10,
        },
    )
    assert bodies_of(res["deliveries"]) == BINARY_BODIES * 2


def _post(url: str) -> bytes:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read()


async def test_fan_out_to_channels_of_three_libraries(nsqd_proc: NsqdProcess, topic: str) -> None:
    """Every channel gets its own copy, whichever library reads it."""
    clients = ["pynsq", "gnsq"] + ([] if nsqjs_missing() else ["nsqjs"])
    # Channels must exist before the publish to get a copy; /channel/create needs the topic.
    await asyncio.to_thread(_post, f"http://{nsqd_proc.http}/topic/create?topic={topic}")
    for name in clients:
        await asyncio.to_thread(
            _post, f"http://{nsqd_proc.http}/channel/create?topic={topic}&channel={name}"
        )
    bodies = BINARY_BODIES[:5]
    pub = await run_peer(
        "pynsq",
        "publish",
        {"tcp": nsqd_proc.tcp, "topic": topic, "bodies": b64list(bodies), "mode": "mpub"},
    )
    assert pub["responses"] == ["OK"]
    results = await asyncio.gather(
        *(
            run_peer(
                name,
                "consume",
                {"tcp": nsqd_proc.tcp, "topic": topic, "channel": name, "count": len(bodies)},
            )
            for name in clients
        )
    )
    for name, res in zip(clients, results, strict=True):
        assert bodies_of(res["deliveries"]) == bodies, name
    # The same message has the same ID and timestamp in every channel.
    ids = {tuple(d["id"] for d in res["deliveries"]) for res in results}
    stamps = {tuple(d["timestamp"] for d in res["deliveries"]) for res in results}
    assert len(ids) == 1
    assert len({tuple(int(t) for t in s) for s in stamps}) == 1

"""Restarts of the nsqd process on one data path: what a clean stop keeps, damage, the lock.

Each test runs real ``python -m nsqpy.nsqd`` processes, stops them with a signal and starts
a new one on the same ``--data-path``; ``test_persistence.py`` has in-process versions.
"""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import POLL_INTERVAL, wait_for
from nsqd_process import NSQD, NsqdProcess
from v2client import RawV2

from nsqpy.protocol.frames import Message


class Processes:
    """Starts daemons on one data path; whatever still runs is killed at the end."""

    def __init__(self, data_path: Path) -> None:
        self.data_path = data_path
        self.started: list[NsqdProcess] = []

    async def start(self, *flags: str) -> NsqdProcess:
        daemon = await NsqdProcess.start(self.data_path, *flags)
        self.started.append(daemon)
        return daemon

    async def restart(
        self, daemon: NsqdProcess, *flags: str, sig: int = signal.SIGTERM
    ) -> NsqdProcess:
        code = await daemon.stop(sig)
        assert code == 0, daemon.log
        return await self.start(*flags)


@pytest.fixture
async def procs(tmp_path: Path) -> AsyncIterator[Processes]:
    p = Processes(tmp_path / "data")
    try:
        yield p
    finally:
        for daemon in p.started:
            await daemon.kill()


# -- HTTP and TCP helpers ------------------------------------------------------------------
async def http(method: str, daemon: NsqdProcess, path: str, data: bytes = b"") -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, daemon.http + path, data=data) as resp,
    ):
        return resp.status, await resp.text()


async def post_ok(daemon: NsqdProcess, path: str) -> None:
    status, text = await http("POST", daemon, path)
    assert status == 200, text


async def create_channel(daemon: NsqdProcess, topic: str, channel: str) -> None:
    await post_ok(daemon, f"/topic/create?topic={topic}")  # as in nsqd, the topic must exist
    await post_ok(daemon, f"/channel/create?topic={topic}&channel={channel}")


async def stats(daemon: NsqdProcess) -> dict[str, Any]:
    status, text = await http("GET", daemon, "/stats?format=json")
    assert status == 200, text
    result: dict[str, Any] = json.loads(text)
    return result


def find(items: list[dict[str, Any]], key: str, name: str) -> dict[str, Any]:
    (item,) = [i for i in items if i[key] == name]
    return item


async def channel_stats(daemon: NsqdProcess, topic: str, channel: str) -> dict[str, Any]:
    return chan(await stats(daemon), topic, channel)


async def poll_stats(daemon: NsqdProcess, check: Any, timeout: float = 5.0) -> None:
    """Poll /stats until ``check(stats)`` is true."""
    async with asyncio.timeout(timeout):
        while not check(await stats(daemon)):
            await asyncio.sleep(POLL_INTERVAL)


def mpub_body(bodies: list[bytes]) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


async def publish(daemon: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    conn = await RawV2.connect(daemon.tcp_port)
    for i in range(0, len(bodies), 100):
        conn.cmd(f"MPUB {topic}", mpub_body(bodies[i : i + 100]))
        assert await conn.response() == b"OK"
    await conn.close()


async def consume(daemon: NsqdProcess, topic: str, channel: str, count: int) -> list[Message]:
    """Take ``count`` messages (FINishing each), then check no more is waiting."""
    conn = await RawV2.connect(daemon.tcp_port)
    await conn.sub(topic, channel, rdy=min(count + 1, 2500))
    msgs = []
    for _ in range(count):
        msg = await conn.message()
        msgs.append(msg)
        conn.cmd(f"FIN {msg.id.decode()}")
    await conn.close()
    await poll_stats(
        daemon,
        lambda s: (
            (
                (c := chan(s, topic, channel))["depth"],
                c["in_flight_count"],
                c["deferred_count"],
            )
            == (0, 0, 0)
        ),
    )
    return msgs


def chan(s: dict[str, Any], topic: str, channel: str) -> dict[str, Any]:
    """A channel's entry in /stats JSON."""
    return find(find(s["topics"], "topic_name", topic)["channels"], "channel_name", channel)


def bodies_of(msgs: list[Message]) -> list[bytes]:
    return [m.body for m in msgs]


BODIES = [b"msg-%05d" % i for i in range(300)]


# -- clean stops keep everything -------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "sig", "fifo"),
    [
        pytest.param((), signal.SIGTERM, False, id="memory-sigterm"),
        pytest.param(("--mem-queue-size=0",), signal.SIGTERM, True, id="disk-sigterm"),
        pytest.param(("--mem-queue-size=40",), signal.SIGINT, False, id="overflow-sigint"),
    ],
)
async def test_queued_messages_survive_a_clean_stop(
    procs: Processes, flags: tuple[str, ...], sig: int, fifo: bool
) -> None:
    nsqd = await procs.start(*flags)
    await create_channel(nsqd, "t", "c")
    await publish(nsqd, "t", BODIES)
    c = await channel_stats(nsqd, "t", "c")
    assert c["depth"] == len(BODIES)
    if flags:  # on disk: all of it, or what did not fit in 40
        assert c["backend_depth"] == len(BODIES) - (40 if "40" in flags[0] else 0)
    else:
        assert c["backend_depth"] == 0

    nsqd = await procs.restart(nsqd, *flags, sig=sig)
    assert (await channel_stats(nsqd, "t", "c"))["depth"] == len(BODIES)
    got = bodies_of(await consume(nsqd, "t", "c", len(BODIES)))
    if fifo:
        assert got == BODIES
    else:  # what was in memory is appended after the disk backlog, as in nsqd
        assert sorted(got) == BODIES


async def test_topics_without_channels_and_paused_flags_survive(procs: Processes) -> None:
    flags = ("--mem-queue-size=20",)
    nsqd = await procs.start(*flags)
    await publish(nsqd, "held", BODIES[:50])  # no channel: the topic holds them (20 + 30 disk)
    await publish(nsqd, "held-mem", BODIES[:5])  # no channel, all in memory
    await create_channel(nsqd, "pt", "c")
    await post_ok(nsqd, "/topic/pause?topic=pt")
    await create_channel(nsqd, "t", "paused")
    await create_channel(nsqd, "t", "live")
    await post_ok(nsqd, "/channel/pause?topic=t&channel=paused")
    await publish(nsqd, "pt", BODIES[:10])
    await publish(nsqd, "t", BODIES[:10])

    nsqd = await procs.restart(nsqd, *flags)
    topics = (await stats(nsqd))["topics"]
    held = find(topics, "topic_name", "held")
    assert (held["channels"], held["depth"]) == ([], 50)
    assert find(topics, "topic_name", "held-mem")["depth"] == 5
    pt = find(topics, "topic_name", "pt")
    assert pt["paused"] is True
    assert pt["depth"] == 10  # a paused topic keeps its messages itself
    assert find(pt["channels"], "channel_name", "c")["paused"] is False
    t = find(topics, "topic_name", "t")
    assert t["paused"] is False
    assert find(t["channels"], "channel_name", "paused")["paused"] is True
    assert find(t["channels"], "channel_name", "live")["paused"] is False
    assert find(t["channels"], "channel_name", "paused")["depth"] == 10

    # the first channel of a held topic gets everything published before it
    assert sorted(bodies_of(await consume(nsqd, "held", "late", 50))) == BODIES[:50]
    assert bodies_of(await consume(nsqd, "held-mem", "late", 5)) == BODIES[:5]
    assert sorted(bodies_of(await consume(nsqd, "t", "live", 10))) == BODIES[:10]
    await post_ok(nsqd, "/topic/unpause?topic=pt")
    await post_ok(nsqd, "/channel/unpause?topic=t&channel=paused")
    assert sorted(bodies_of(await consume(nsqd, "pt", "c", 10))) == BODIES[:10]
    assert sorted(bodies_of(await consume(nsqd, "t", "paused", 10))) == BODIES[:10]


async def test_in_flight_messages_come_back_with_their_attempts(procs: Processes) -> None:
    nsqd = await procs.start()
    await create_channel(nsqd, "t", "c")
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=100)
    await publish(nsqd, "t", BODIES[:100])
    received = [await consumer.message() for _ in range(100)]
    assert {m.attempts for m in received} == {1}
    for msg in received[:40]:
        consumer.cmd(f"FIN {msg.id.decode()}")
    await poll_stats(nsqd, lambda s: chan(s, "t", "c")["in_flight_count"] == 60)

    # SIGTERM while the consumer still holds 60 messages unFINished
    nsqd = await procs.restart(nsqd)
    assert await consumer.closed()
    assert (await channel_stats(nsqd, "t", "c"))["depth"] == 60
    again = await consume(nsqd, "t", "c", 60)
    assert sorted(bodies_of(again)) == sorted(bodies_of(received[40:]))
    assert {m.attempts for m in again} == {2}
    assert {m.id for m in again} == {m.id for m in received[40:]}


async def test_deferred_messages_keep_their_due_time(procs: Processes) -> None:
    nsqd = await procs.start()
    await create_channel(nsqd, "t", "c")
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=10)
    await publish(nsqd, "t", [b"requeued"])
    first = await consumer.message()
    requeued_at = time.monotonic()
    consumer.cmd(f"REQ {first.id.decode()} 2000")
    producer = await RawV2.connect(nsqd.tcp_port)
    published_at = time.monotonic()
    producer.cmd("DPUB t 2000", b"dpub")
    assert await producer.response() == b"OK"
    producer.cmd("DPUB held 2000", b"dpub-held")  # a topic with no channel defers too
    assert await producer.response() == b"OK"
    await poll_stats(nsqd, lambda s: chan(s, "t", "c")["deferred_count"] == 2)

    nsqd = await procs.restart(nsqd)
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    held = await RawV2.connect(nsqd.tcp_port)
    await held.sub("held", "c", rdy=10)
    arrived: dict[bytes, tuple[float, int]] = {}
    for _ in range(2):
        msg = await conn.message()
        arrived[msg.body] = (time.monotonic(), msg.attempts)
        conn.cmd(f"FIN {msg.id.decode()}")
    msg = await held.message()
    arrived[msg.body] = (time.monotonic(), msg.attempts)
    held.cmd(f"FIN {msg.id.decode()}")

    slack = 0.02  # the test's clock vs the daemon's
    assert arrived[b"requeued"][0] - requeued_at >= 2.0 - slack
    assert arrived[b"dpub"][0] - published_at >= 2.0 - slack
    assert arrived[b"dpub-held"][0] - published_at >= 2.0 - slack
    assert max(t for t, _ in arrived.values()) - published_at < 8.0  # and not forgotten
    assert arrived[b"requeued"][1] == 2  # it was delivered once before the REQ
    assert arrived[b"dpub"][1] == 1
    assert arrived[b"dpub-held"][1] == 1
    await conn.close()
    await held.close()


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param((), id="memory"),
        pytest.param(("--mem-queue-size=0",), id="disk"),
        pytest.param(("--durable",), id="durable"),
    ],
)
async def test_restored_deferred_messages_count_as_deferred_from_the_first_stats(
    procs: Processes, flags: tuple[str, ...]
) -> None:
    nsqd = await procs.start(*flags)
    await create_channel(nsqd, "t", "c")
    producer = await RawV2.connect(nsqd.tcp_port)
    for i in range(3):
        producer.cmd("DPUB t 60000", b"later-%d" % i)  # due long after the test
        assert await producer.response() == b"OK"
    await producer.close()
    await publish(nsqd, "t", [b"now-0", b"now-1"])
    before = await channel_stats(nsqd, "t", "c")
    assert (before["depth"], before["deferred_count"]) == (2, 3)

    nsqd = await procs.restart(nsqd, *flags)
    first = await channel_stats(nsqd, "t", "c")  # the first /stats after the start
    assert (first["depth"], first["deferred_count"]) == (2, 3)
    assert first["backend_depth"] <= first["depth"]
    # the queued two are delivered; the deferred three stay deferred, counted once
    got = await consume_some(nsqd, "t", "c", 2)
    assert sorted(m.body for m in got) == [b"now-0", b"now-1"]
    after = await channel_stats(nsqd, "t", "c")
    assert (after["depth"], after["in_flight_count"], after["deferred_count"]) == (0, 0, 3)

    nsqd = await procs.restart(nsqd, *flags)  # and again, once they were read back
    again = await channel_stats(nsqd, "t", "c")
    assert (again["depth"], again["deferred_count"]) == (0, 3)


async def consume_some(daemon: NsqdProcess, topic: str, channel: str, count: int) -> list[Message]:
    """Take ``count`` messages, FINish them and wait until none is in flight."""
    conn = await RawV2.connect(daemon.tcp_port)
    await conn.sub(topic, channel, rdy=count + 1)
    msgs = []
    for _ in range(count):
        msg = await conn.message()
        msgs.append(msg)
        conn.cmd(f"FIN {msg.id.decode()}")
    await poll_stats(daemon, lambda s: chan(s, topic, channel)["in_flight_count"] == 0)
    await conn.close()
    return msgs


async def test_a_second_process_on_the_same_data_path_is_refused(procs: Processes) -> None:
    first = await procs.start()
    proc = await asyncio.create_subprocess_exec(
        *NSQD,
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={procs.data_path}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(20):
            _, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 1
    assert b"failed to lock data-path" in err
    status, text = await http("GET", first, "/ping")  # the first one is unaffected
    assert (status, text) == (200, "OK")


# -- damaged queue files -------------------------------------------------------------------
def record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4 + size
    assert pos == len(data)
    return offsets


@pytest.mark.parametrize("damage", ["garbage-size", "truncated"])
async def test_a_damaged_segment_is_set_aside_and_health_recovers(
    procs: Processes, damage: str
) -> None:
    flags = ("--mem-queue-size=0",)
    nsqd = await procs.start(*flags)
    for topic, channel in [("t", "bad"), ("t", "good"), ("other", "c")]:
        await create_channel(nsqd, topic, channel)
    await publish(nsqd, "t", BODIES[:100])
    await publish(nsqd, "other", BODIES[:50])
    assert await nsqd.stop() == 0, nsqd.log

    segment = procs.data_path / "t:bad.diskqueue.000000.dat"
    data = segment.read_bytes()
    cut = record_offsets(data)[50]
    if damage == "garbage-size":
        segment.write_bytes(data[:cut] + b"\x7f\xff\xff\xff" + data[cut + 4 :])
    else:
        segment.write_bytes(data[: cut + 10])

    nsqd = await procs.start(*flags)
    assert (await stats(nsqd))["health"] == "OK"  # damage is found when it is read
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "bad", rdy=200)
    got = []
    for _ in range(50):
        msg = await conn.message()
        got.append(msg.body)
        conn.cmd(f"FIN {msg.id.decode()}")
    assert got == BODIES[:50]  # everything before the damage, in order
    await wait_for(lambda: (procs.data_path / "t:bad.diskqueue.000000.dat.bad").exists())
    s = await stats(nsqd)
    assert s["health"].startswith("NOK - "), s["health"]
    assert "t:bad" in s["health"]
    status, text = await http("GET", nsqd, "/ping")
    assert status == 500 and text.startswith("NOK - "), (status, text)
    assert b"saving bad file as" in b"".join(nsqd.lines)

    # other queues of the same topic and other topics deliver everything
    assert bodies_of(await consume(nsqd, "t", "good", 100)) == BODIES[:100]
    assert bodies_of(await consume(nsqd, "other", "c", 50)) == BODIES[:50]
    assert (await stats(nsqd))["health"].startswith("NOK - ")  # reads leave health alone

    # health follows the last write: the next publish that reaches the disk makes it OK
    # (t:good has no consumer, so its copy goes to disk), and the damaged channel goes on
    await publish(nsqd, "t", [b"after"])
    msg = await conn.message()
    assert msg.body == b"after"
    conn.cmd(f"FIN {msg.id.decode()}")
    await conn.close()
    assert (await stats(nsqd))["health"] == "OK"
    assert await http("GET", nsqd, "/ping") == (200, "OK")
    assert await nsqd.stop() == 0

"""nsqd killed with SIGKILL under load, restarted on the same data path, several times.

``--durable`` promises that no acknowledged message is lost (duplicates allowed); default
mode only that what was on disk and not yet read survives a crash. The default-mode crash
loop measures its loss and reports it without failing.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import POLL_INTERVAL
from nsqd_process import NsqdProcess
from v2client import RawV2

# what a lost connection looks like to a client of a killed daemon
GONE = (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError)


@pytest.fixture
async def started() -> AsyncIterator[list[NsqdProcess]]:
    """Every daemon a test starts goes in here and is killed at the end."""
    daemons: list[NsqdProcess] = []
    try:
        yield daemons
    finally:
        for daemon in daemons:
            await daemon.kill()


async def post_ok(daemon: NsqdProcess, path: str) -> None:
    async with aiohttp.ClientSession() as http, http.post(daemon.http + path) as resp:
        assert resp.status == 200, await resp.text()


async def create_channel(daemon: NsqdProcess, topic: str, channel: str) -> None:
    await post_ok(daemon, f"/topic/create?topic={topic}")
    await post_ok(daemon, f"/channel/create?topic={topic}&channel={channel}")


async def stats(daemon: NsqdProcess) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(daemon.http + "/stats?format=json") as resp,
    ):
        assert resp.status == 200
        result: dict[str, Any] = json.loads(await resp.text())
        return result


def find(items: list[dict[str, Any]], key: str, name: str) -> dict[str, Any]:
    (item,) = [i for i in items if i[key] == name]
    return item


def mpub_body(bodies: list[bytes]) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


async def reply(conn: RawV2) -> tuple[int, bytes]:
    """The next frame that is not a heartbeat (answered with NOP)."""
    while True:
        frame = await conn.frame()
        if frame.frame_type == 0 and frame.data == b"_heartbeat_":
            conn.cmd("NOP")
            continue
        return frame.frame_type, frame.data


# -- the crash loop ------------------------------------------------------------------------
class CrashLoop:
    """Producers and a consumer working against a daemon that keeps being SIGKILLed.

    Producers MPUB batches of unique bodies and record the ones answered ``OK``; the consumer
    FINs everything it gets. After each kill the daemon restarts on the same data path and
    the clients reconnect.
    """

    TOPIC = "crash"
    CHANNEL = "c"

    def __init__(self, data_path: Path, flags: tuple[str, ...], daemons: list[NsqdProcess]):
        self.data_path = data_path
        self.flags = flags
        self.daemons = daemons
        self.daemon: NsqdProcess | None = None
        self.generation = 0
        self.changed = asyncio.Condition()
        self.stopping = False
        self.acked: set[bytes] = set()
        self.consumed: Counter[bytes] = Counter()
        self.batches = 0
        self.rdy = 1  # slower than the producers: a backlog builds up between kills
        self.drain_rdy = 200  # once publishing stops
        self.backlogs: list[int] = []  # the channel's depth just before each kill

    async def start_daemon(self) -> NsqdProcess:
        daemon = await NsqdProcess.start(self.data_path, *self.flags)
        self.daemons.append(daemon)
        async with self.changed:
            self.daemon = daemon
            self.generation += 1
            self.changed.notify_all()
        return daemon

    async def _current(self, after: int, producer: bool) -> tuple[int, NsqdProcess] | None:
        """The running daemon of a generation newer than ``after``; None when producers stop.

        The consumer runs until it is cancelled.
        """
        async with self.changed:
            await self.changed.wait_for(
                lambda: (producer and self.stopping) or self.generation > after
            )
            if (producer and self.stopping) or self.daemon is None:
                return None
            return self.generation, self.daemon

    async def producer(self, pid: int) -> None:
        seq = 0
        generation = 0
        while (current := await self._current(generation, True)) is not None:
            generation, daemon = current
            try:
                conn = await RawV2.connect(daemon.tcp_port)
            except GONE:
                continue
            try:
                while not self.stopping:
                    bodies = [b"p%d-%07d" % (pid, seq + i) for i in range(10)]
                    seq += 10
                    conn.cmd(f"MPUB {self.TOPIC}", mpub_body(bodies))
                    if await reply(conn) == (0, b"OK"):
                        self.acked.update(bodies)
                        self.batches += 1
            except GONE:
                pass  # killed: the batch under way may or may not have been taken
            finally:
                await conn.close()

    async def consumer(self, topic: str, channel: str) -> None:
        generation = 0
        while (current := await self._current(generation, False)) is not None:
            generation, daemon = current
            try:
                conn = await RawV2.connect(daemon.tcp_port)
                rdy = self.drain_rdy if self.stopping else self.rdy
                await conn.sub(topic, channel, rdy=rdy)
            except (*GONE, AssertionError):
                continue
            try:
                while True:
                    if self.stopping and rdy != self.drain_rdy:
                        rdy = self.drain_rdy
                        conn.cmd(f"RDY {rdy}")
                    try:
                        kind, data = await reply(conn)
                    except TimeoutError:
                        continue  # idle, not gone: a killed daemon closes the connection
                    if kind != 2:
                        continue
                    conn.cmd(self.answer(topic, data[10:26].decode(), data[26:]))
            except GONE:
                pass
            finally:
                await conn.close()

    def answer(self, topic: str, msg_id: str, body: bytes) -> str:
        """The consumer's command for a delivery; counts what it finishes."""
        self.consumed[body] += 1
        return f"FIN {msg_id}"

    async def setup(self, daemon: NsqdProcess) -> None:
        await create_channel(daemon, self.TOPIC, self.CHANNEL)

    async def run(self, kills: int, seed: int) -> None:
        rng = random.Random(seed)
        daemon = await self.start_daemon()
        await self.setup(daemon)
        workers = [asyncio.create_task(self.producer(pid)) for pid in range(4)]
        workers += [asyncio.create_task(self.consumer(*queue)) for queue in self.queues()]
        try:
            for _ in range(kills):
                before = self.batches
                await asyncio.sleep(rng.uniform(0.2, 1.0))  # the kill moment is the subject
                assert self.batches > before, "no publish was acknowledged before the kill"
                self.backlogs.append(await self.backlog(daemon))
                await daemon.kill()
                assert daemon.proc.returncode == -signal.SIGKILL
                daemon = await self.start_daemon()
            # the last daemon runs on: stop publishing, then drain the channel
            before = self.batches
            async with asyncio.timeout(10):
                while self.batches == before:  # producers are back after the last restart
                    await asyncio.sleep(POLL_INTERVAL)
            async with self.changed:
                self.stopping = True
                self.changed.notify_all()
            await asyncio.wait_for(asyncio.gather(*workers[:4]), 10)
            await self.drained(daemon)
        finally:
            async with self.changed:
                self.stopping = True
                self.changed.notify_all()
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        assert await daemon.stop() == 0, daemon.log

    async def backlog(self, daemon: NsqdProcess) -> int:
        topic = find((await stats(daemon))["topics"], "topic_name", self.TOPIC)
        depth: int = find(topic["channels"], "channel_name", self.CHANNEL)["depth"]
        return depth

    def queues(self) -> list[tuple[str, str]]:
        """The (topic, channel) pairs read by a consumer each, to be empty at the end."""
        return [(self.TOPIC, self.CHANNEL)]

    async def drained(self, daemon: NsqdProcess) -> None:
        """Wait until the daemon holds nothing more for the channels: all of it was consumed."""

        def held(s: dict[str, Any], topic_name: str, channel: str) -> bool:
            topic = find(s["topics"], "topic_name", topic_name)
            c = find(topic["channels"], "channel_name", channel)
            return any((topic["depth"], c["depth"], c["in_flight_count"], c["deferred_count"]))

        def empty(s: dict[str, Any]) -> bool:
            held_any = any(held(s, topic, channel) for topic, channel in self.queues())
            return not held_any and self.settled(s)

        async with asyncio.timeout(15):
            while not empty(await stats(daemon)):
                await asyncio.sleep(POLL_INTERVAL)

    def settled(self, stats: dict[str, Any]) -> bool:
        """Whether nothing is on its way between the queues (a subclass's own condition)."""
        return True

    def report(self, record: Callable[[str, object], None], label: str) -> tuple[int, int]:
        lost = len(self.acked - set(self.consumed))
        duplicates = sum(n - 1 for n in self.consumed.values())
        unacked = len(set(self.consumed) - self.acked)
        print(
            f"\n{label}: acknowledged={len(self.acked)} consumed={sum(self.consumed.values())} "
            f"lost={lost} duplicates={duplicates} delivered-but-unacknowledged={unacked} "
            f"backlog-before-kills={self.backlogs}"
        )
        record(f"{label}_acknowledged", len(self.acked))
        record(f"{label}_lost", lost)
        record(f"{label}_duplicates", duplicates)
        return lost, duplicates


async def test_durable_mode_loses_no_acknowledged_message_across_kills(
    tmp_path: Path, started: list[NsqdProcess], record_property: Callable[[str, object], None]
) -> None:
    loop = CrashLoop(tmp_path / "data", ("--durable",), started)
    await loop.run(kills=4, seed=20240611)
    lost, _ = loop.report(record_property, "durable")
    assert len(loop.acked) > 0
    assert lost == 0, sorted(loop.acked - set(loop.consumed))[:20]


async def test_durable_mode_with_small_segments_loses_nothing_across_kills(
    tmp_path: Path, started: list[NsqdProcess], record_property: Callable[[str, object], None]
) -> None:
    """Segments of 64 KiB: kills land during rolls, in prepared segments (zeros past the last
    record) and between a roll's commit and the positions that name the new segment."""
    loop = CrashLoop(tmp_path / "data", ("--durable", "--max-bytes-per-file=65536"), started)
    await loop.run(kills=4, seed=20261125)
    lost, _ = loop.report(record_property, "durable-small-segments")
    cut = sum(d.log.count("ends in zeros") for d in started)
    later = sum(d.log.count("past the metadata") for d in started)
    print(f"restarts that found segments past the metadata: {later}")
    print(f"prepared segments' zero tails cut after a kill: {cut}")
    record_property("durable-small-segments_zero_tails", cut)
    assert len(loop.acked) > 0
    assert lost == 0, sorted(loop.acked - set(loop.consumed))[:20]
    assert not [p.name for p in loop.data_path.iterdir() if p.name.endswith(".bad")]


async def test_default_mode_crash_loop_reports_its_loss(
    tmp_path: Path, started: list[NsqdProcess], record_property: Callable[[str, object], None]
) -> None:
    """Default mode makes no promise for messages in memory: measured, not asserted."""
    loop = CrashLoop(tmp_path / "data", (), started)
    await loop.run(kills=4, seed=20240611)
    loop.report(record_property, "default")
    assert len(loop.acked) > 0


async def test_default_mode_keeps_unread_disk_messages_across_a_kill(
    tmp_path: Path, started: list[NsqdProcess]
) -> None:
    """Written to disk (page cache) and never read: a process crash cannot lose it."""
    data_path = tmp_path / "data"
    daemon = await NsqdProcess.start(data_path, "--mem-queue-size=0")
    started.append(daemon)
    await create_channel(daemon, "t", "c")  # the channel's own disk queue
    bodies = [b"k-%05d" % i for i in range(1000)]
    conn = await RawV2.connect(daemon.tcp_port)
    for i in range(0, len(bodies), 50):
        conn.cmd("MPUB t", mpub_body(bodies[i : i + 50]))
        assert await conn.response() == b"OK"
        conn.cmd("MPUB held", mpub_body(bodies[i : i + 50]))  # no channel: the topic's queue
        assert await conn.response() == b"OK"
    await conn.close()
    await daemon.kill()  # long before --sync-every (2500) or --sync-timeout (2s) ran a sync
    assert daemon.proc.returncode == -signal.SIGKILL

    daemon = await NsqdProcess.start(data_path, "--mem-queue-size=0")
    started.append(daemon)
    for topic, channel in [("t", "c"), ("held", "first")]:
        conn = await RawV2.connect(daemon.tcp_port)
        await conn.sub(topic, channel, rdy=2000)
        got = []
        for _ in bodies:
            msg = await conn.message()
            got.append(msg.body)
            conn.cmd(f"FIN {msg.id.decode()}")
        assert got == bodies, topic  # all of them, once, in order
        await conn.close()
    s = await stats(daemon)
    for topic, channel in [("t", "c"), ("held", "first")]:
        c = find(find(s["topics"], "topic_name", topic)["channels"], "channel_name", channel)
        assert c["depth"] == 0
    assert await daemon.stop() == 0

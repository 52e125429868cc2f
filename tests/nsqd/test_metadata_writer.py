"""nsqd.dat is written off the event loop: creating a topic or channel stalls nobody.

The write (temporary file, fsync, rename) runs on a thread; a test hook (``MetadataWriter.write``)
holds it for as long as a test likes, which shows deterministically who waits for it: in
default mode nobody (as nsqd, which persists from a goroutine); in ``--durable`` mode only the
client whose SUB or PUB created something, so that an acknowledged channel or message is never
left out of nsqd.dat.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.storage import metadata
from nsqpy.nsqd.storage.persistence import MetadataWriter

#: Longest a held write waits for the test to let it go (a failing test must not hang).
GATE_TIMEOUT = 20.0


class Gate:
    """Stands in for ``metadata.write_file``: each write waits until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, data_path: str, data: bytes) -> None:
        self.calls += 1
        self.entered.set()
        self.open.wait(GATE_TIMEOUT)
        metadata.write_file(data_path, data)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open.set()  # never leave a worker thread waiting


def saved(nsqd: NSQD) -> dict[str, list[str]]:
    """nsqd.dat as it is on disk: topic -> channel names."""
    doc = json.loads((Path(nsqd.data_path) / metadata.FILE_NAME).read_bytes())
    return {t["name"]: [c["name"] for c in t["channels"]] for t in doc["topics"]}


async def settled(nsqd: NSQD) -> None:
    """Every change so far is in nsqd.dat."""
    await wait_for(lambda: not nsqd.meta_writer.pending)


async def no_frame(conn: RawV2) -> bool:
    """Nothing arrives for a moment (a reply that must not have been sent yet)."""
    try:
        await conn.frame(timeout=0.1)
    except TimeoutError:
        return True
    return False


async def test_nsqd_dat_is_fsynced_off_the_event_loop(
    nsqd: NSQD, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    fsyncs: list[int] = []  # threads that fsynced a file of nsqd.dat
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        if metadata.FILE_NAME in os.readlink(f"/proc/self/fd/{fd}"):
            fsyncs.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("created", "by_sub")
    producer = await RawV2.connect(nsqd.tcp_port)
    await producer.pub("created_by_pub", b"x")
    await wait_for(lambda: saved(nsqd).get("created") == ["by_sub"])
    await wait_for(lambda: "created_by_pub" in saved(nsqd))
    assert fsyncs, "nsqd.dat was written"
    assert loop_thread not in fsyncs, "nsqd.dat was fsynced on the event loop's thread"
    await conn.close()
    await producer.close()


async def test_creations_are_answered_while_nsqd_dat_is_being_written(
    nsqd: NSQD, gate: Gate
) -> None:
    producer = await RawV2.connect(nsqd.tcp_port)
    await producer.pub("old", b"x")
    await settled(nsqd)
    nsqd.meta_writer.write = gate
    nsqd.broker.get_topic("holder")
    await wait_for(gate.entered.is_set)  # a write of nsqd.dat is under way, and held
    subscriber = await RawV2.connect(nsqd.tcp_port)
    await subscriber.sub("old", "first")  # a SUB that creates a channel: answered
    await producer.pub("new_topic", b"y")  # a PUB that creates a topic: answered too
    await producer.pub("old", b"z")  # and everyone else goes on
    # a burst while the first write is held: one more write covers all of it
    for i in range(30):
        conn = await RawV2.connect(nsqd.tcp_port)
        await conn.sub("old", f"burst{i}")
        await conn.close()
    assert gate.calls == 1
    gate.open.set()
    await settled(nsqd)
    assert gate.calls == 2
    on_disk = saved(nsqd)
    assert "new_topic" in on_disk
    assert "holder" in on_disk
    assert sorted(on_disk["old"]) == sorted(["first", *(f"burst{i}" for i in range(30))])
    await subscriber.close()
    await producer.close()


async def test_durable_creations_wait_for_nsqd_dat_and_only_they_do(
    nsqd_factory: NsqdFactory, gate: Gate
) -> None:
    nsqd = await nsqd_factory(durable=True)
    other = await RawV2.connect(nsqd.tcp_port)
    await other.pub("old", b"x")
    await other.pub("elsewhere", b"x")
    await settled(nsqd)
    nsqd.meta_writer.write = gate

    subscriber = await RawV2.connect(nsqd.tcp_port)
    subscriber.cmd("SUB old fresh")
    publisher = await RawV2.connect(nsqd.tcp_port)
    publisher.cmd("PUB fresh_topic", b"y")
    topics = nsqd.broker.topics
    await wait_for(lambda: "fresh" in topics["old"].channels and "fresh_topic" in topics)
    # the loop runs on, and a durable PUB to a topic with nothing new is answered
    await other.pub("elsewhere", b"z")
    assert await no_frame(subscriber), "durable SUB answered before nsqd.dat had the channel"
    assert await no_frame(publisher), "durable PUB answered before nsqd.dat had the topic"
    assert gate.entered.is_set()
    gate.open.set()
    assert await subscriber.response() == b"OK"
    assert await publisher.response() == b"OK"
    on_disk = saved(nsqd)
    assert "fresh" in on_disk["old"] and "fresh_topic" in on_disk
    for conn in (subscriber, publisher, other):
        await conn.close()


async def test_stop_waits_for_the_write_under_way_and_saves_the_last_state(
    nsqd: NSQD, gate: Gate
) -> None:
    nsqd.meta_writer.write = gate
    nsqd.broker.get_topic("first")
    await wait_for(gate.entered.is_set)
    nsqd.broker.get_topic("second")  # requested while the first write is held
    stopping = asyncio.create_task(nsqd.stop())
    await asyncio.sleep(0)
    assert not stopping.done()
    gate.open.set()
    await stopping
    assert set(saved(nsqd)) == {"first", "second"}


class FakeSnapshot:
    def __init__(self) -> None:
        self.state: list[str] = []

    def __call__(self) -> bytes:
        return json.dumps(self.state).encode()


async def test_writer_coalesces_and_always_ends_with_the_last_state(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    snapshot = FakeSnapshot()
    written: list[Any] = []
    held = threading.Event()

    def write(data_path: str, data: bytes) -> None:
        held.wait(GATE_TIMEOUT)
        written.append(json.loads(data))

    writer = MetadataWriter(loop, str(tmp_path), snapshot, write)
    assert not writer.pending
    snapshot.state.append("a")
    writer.request()
    snapshot.state.append("b")
    writer.request()  # same loop iteration: the same write
    assert writer.pending
    first = asyncio.ensure_future(writer.written())
    await wait_for(lambda: writer.writes == 1)
    for name in "cdef":
        snapshot.state.append(name)
        writer.request()
    last = asyncio.ensure_future(writer.written())
    held.set()
    assert await first and await last
    assert written == [["a", "b"], ["a", "b", "c", "d", "e", "f"]]
    assert not writer.pending
    await writer.close()  # a clean stop writes the state once more, pending or not
    assert written[-1] == ["a", "b", "c", "d", "e", "f"] and len(written) == 3


async def test_a_failed_write_is_reported_and_the_next_change_writes_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    snapshot = FakeSnapshot()
    attempts: list[bytes] = []

    def write(data_path: str, data: bytes) -> None:
        attempts.append(data)
        if len(attempts) == 1:
            raise metadata.MetadataError("failed to persist metadata - disk full")

    writer = MetadataWriter(loop, str(tmp_path), snapshot, write)
    snapshot.state.append("a")
    writer.request()
    assert not await writer.written()
    assert "disk full" in caplog.text
    snapshot.state.append("b")
    writer.request()
    assert await writer.written()
    assert json.loads(attempts[-1]) == ["a", "b"]
    await writer.close()


async def test_pause_and_unpause_are_answered_once_nsqd_dat_holds_them(
    nsqd: NSQD, gate: Gate
) -> None:
    """As nsqd (PersistMetadata before the reply): after a 200, a crash keeps the pause."""
    http = f"http://127.0.0.1:{nsqd.http_port}"
    async with aiohttp.ClientSession() as session:
        assert (await session.post(f"{http}/topic/create?topic=p")).status == 200
        await settled(nsqd)
        nsqd.meta_writer.write = gate
        reply = asyncio.ensure_future(session.post(f"{http}/topic/pause?topic=p"))
        await wait_for(gate.entered.is_set)  # the pause is being written, and held
        done, _ = await asyncio.wait({reply}, timeout=0.2)  # a reply that did not wait
        assert not done
        gate.open.set()
        assert (await reply).status == 200
        doc = json.loads((Path(nsqd.data_path) / metadata.FILE_NAME).read_bytes())
        assert [t["paused"] for t in doc["topics"] if t["name"] == "p"] == [True]

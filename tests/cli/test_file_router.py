"""nsq_to_file's router: when it syncs, and that a message is FINished only after its fsync.

A fake consumer and fake messages record, in one list shared with the logger's fsync, the
order in which things happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import wait_for

from nsqpy.tools.file_logger import FileLogger, FileLoggerFatal
from nsqpy.tools.file_names import FileOptions
from nsqpy.tools.file_router import FileRouter, Handler, RouterOptions

LOG = logging.getLogger("test.file_router")


class Events(list[str]):
    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.append("fsync")


class FakeMessage:
    def __init__(self, body: bytes, events: Events) -> None:
        self.body = body
        self.auto = True
        self.finished = False
        self._events = events

    def disable_auto_response(self) -> None:
        self.auto = False

    def finish(self) -> None:
        assert not self.finished
        self.finished = True
        self._events.append(f"fin {self.body.decode()}")


class FakeConsumer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.starved = False
        self.closed = asyncio.Event()
        self.release = asyncio.Event()  # close() returns once the test sets it

    def is_starved(self) -> bool:
        return self.starved

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self.closed.set()
        await self.release.wait()


class Harness:
    def __init__(self, tmp_path: Path, **opts: object) -> None:
        self.events = Events()
        file_opts = FileOptions(
            output_dir=str(tmp_path),
            filename_format="<TOPIC><REV>.log",
            gzip=True,
        )
        self.logger = FileLogger(
            file_opts, "t", "c", log=LOG, fsync=self.events.fsync, hostname="h"
        )
        fields: dict[str, object] = {"max_in_flight": 10, "sync_interval": 3600.0, **opts}
        router_opts = RouterOptions(**fields)  # type: ignore[arg-type]
        self.router = FileRouter(self.logger, FakeConsumer, router_opts, log=LOG)
        assert isinstance(self.router.consumer, FakeConsumer)
        self.consumer: FakeConsumer = self.router.consumer
        self.task = asyncio.create_task(self.router.run())
        self.sent: list[FakeMessage] = []
        self.tmp_path = tmp_path

    def send(self, *bodies: str) -> list[FakeMessage]:
        msgs = [FakeMessage(b.encode(), self.events) for b in bodies]
        for msg in msgs:
            self.consumer.handler(msg)  # type: ignore[arg-type]
            assert not msg.auto  # the router answers, not the consumer
        self.sent.extend(msgs)
        return msgs

    async def written(self, size: int) -> None:
        """Wait until the router has written ``size`` uncompressed bytes to the current file."""
        await wait_for(lambda: self.logger.is_open and self.logger.filesize == size)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, FileLoggerFatal):
            await self.task

    def contents(self) -> bytes:
        return b"".join(gzip.decompress(p.read_bytes()) for p in sorted(self.tmp_path.iterdir()))


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path)
    yield h
    await h.stop()


async def opened(h: Harness) -> None:
    """Send a first message: opening a file always syncs at once (as NSQ), so it is FINished."""
    h.send("first")
    await wait_for(lambda: h.sent[0].finished)
    assert h.events == ["fsync", "fin first"]
    h.events.clear()


async def test_messages_are_held_until_a_sync(harness: Harness) -> None:
    await opened(harness)
    msgs = harness.send("a", "b", "c")
    await wait_for(lambda: harness.router.handled == 4)
    assert harness.logger.filesize == len(b"first\na\nb\nc\n")
    assert not any(m.finished for m in msgs)
    assert harness.events == []
    harness.router.tick()  # --sync-interval
    await wait_for(lambda: all(m.finished for m in msgs))
    assert harness.events == ["fsync", "fin a", "fin b", "fin c"]
    # What was FINished is on disk as complete gzip.
    assert harness.contents() == b"first\na\nb\nc\n"


async def test_sync_when_max_in_flight_messages_are_held(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_in_flight=3)
    try:
        await opened(h)
        h.send("1", "2")
        await wait_for(lambda: h.router.handled == 3)
        assert h.events == []
        h.send("3")
        await wait_for(lambda: all(m.finished for m in h.sent))
        assert h.events == ["fsync", "fin 1", "fin 2", "fin 3"]
    finally:
        await h.stop()


async def test_sync_at_once_when_consumer_is_starved(harness: Harness) -> None:
    await opened(harness)
    harness.consumer.starved = True
    harness.send("x")
    await wait_for(lambda: harness.sent[1].finished)
    # Messages already delivered are written first, then synced together: one fsync.
    harness.send("y", "z", "w")
    await wait_for(lambda: all(m.finished for m in harness.sent))
    assert harness.events == ["fsync", "fin x", "fsync", "fin y", "fin z", "fin w"]
    assert harness.contents() == b"first\nx\ny\nz\nw\n"


async def test_hup_syncs_closes_and_next_message_opens_a_new_file(harness: Harness) -> None:
    first = harness.send("before")
    await harness.written(7)
    harness.router.hup()
    await wait_for(lambda: not harness.logger.is_open)
    assert first[0].finished
    assert harness.events.index("fsync") < harness.events.index("fin before")
    harness.send("after")
    await harness.written(6)
    assert harness.logger.rev == 1  # gzip never reopens a file: the next revision
    harness.router.hup()
    await wait_for(lambda: not harness.logger.is_open)
    names = sorted(p.name for p in harness.tmp_path.iterdir())
    assert names == ["t-000000.log.gz", "t-000001.log.gz"]
    assert harness.contents() == b"before\nafter\n"


async def test_term_drains_consumer_then_closes_file(harness: Harness) -> None:
    await opened(harness)
    harness.send("held")
    await wait_for(lambda: harness.router.handled == 2)
    assert not harness.sent[1].finished
    harness.router.terminate()
    await harness.consumer.closed.wait()
    await wait_for(lambda: harness.sent[1].finished)  # held messages are synced at once
    # Messages still arriving while the consumer drains are synced one by one.
    harness.send("late")
    await wait_for(lambda: harness.sent[2].finished)
    assert harness.logger.is_open
    harness.consumer.release.set()
    await asyncio.wait_for(harness.task, 5)
    assert not harness.logger.is_open
    assert harness.events == ["fsync", "fin held", "fsync", "fin late", "fsync"]
    assert harness.contents() == b"first\nheld\nlate\n"


async def test_tick_opens_the_next_file_unless_skipping_empty_files(tmp_path: Path) -> None:
    plain = Harness(tmp_path / "plain")
    skip = Harness(tmp_path / "skip", skip_empty_files=True)
    try:
        for h in (plain, skip):
            h.router.tick()  # nothing open yet: rotation is due
        await wait_for(lambda: plain.router.handled == 1 and skip.router.handled == 1)
        assert plain.logger.is_open
        assert [p.name for p in (tmp_path / "plain").iterdir()] == ["t-000000.log.gz"]
        assert not skip.logger.is_open
        assert not (tmp_path / "skip").exists()
    finally:
        await plain.stop()
        await skip.stop()


async def test_failed_fsync_is_fatal_and_finishes_nothing(harness: Harness) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    harness.logger._fsync = broken
    harness.send("lost")
    with pytest.raises(FileLoggerFatal, match=r"^\[t/c\] failed syncing messages: .*Input/output"):
        await asyncio.wait_for(harness.task, 5)
    assert not harness.sent[0].finished

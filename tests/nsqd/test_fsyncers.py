"""Durable mode's fsync workers, both twins (``fsyncers.py_serve`` and ``_cfsync.serve``):
requests through the work pipe, one per ring of the doorbell, answers on the done pipe.

The workers run on real threads and sync real files; the loop is the test's own.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import struct
import termios
from pathlib import Path

import pytest
from conftest import wait_for
from twins import compiled

from nsqpy.nsqd.storage import fsyncers
from nsqpy.nsqd.storage.fsyncers import Fsyncers, Serve

FSYNC = "nsqpy.nsqd.storage._cfsync"


def _worker(impl: str) -> Serve:
    if impl == "python":
        return fsyncers.py_serve
    serve: Serve = compiled(FSYNC).serve
    return serve


@pytest.fixture(params=["python", "compiled"])
def worker(request: pytest.FixtureRequest) -> Serve:
    return _worker(request.param)


@pytest.fixture(params=["eventfd", "pipe"])
def doorbell(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both doorbells: the eventfd where there is one, and the pipe used elsewhere."""
    if request.param == "eventfd" and not hasattr(os, "eventfd"):
        pytest.skip("no eventfd here")
    if request.param == "pipe":
        monkeypatch.setattr(fsyncers, "doorbell", os.pipe)
    return str(request.param)


def pending(fd: int) -> int:
    """Bytes waiting in a pipe."""
    count: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    return count


def open_file(tmp_path: Path, name: str) -> int:
    fd = os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"data")
    return fd


async def start(worker: Serve, count: int = 2) -> tuple[Fsyncers, dict[int, int]]:
    answers: dict[int, int] = {}
    workers = Fsyncers(asyncio.get_running_loop(), count, answers.__setitem__, worker=worker)
    return workers, answers


async def test_each_request_is_answered_once_by_its_id(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    workers, answers = await start(worker)
    fds = [open_file(tmp_path, f"f{i}") for i in range(3)]
    dir_fd = os.open(tmp_path, os.O_RDONLY)
    try:
        sent = [workers.submit(i + 1, [fd]) for i, fd in enumerate(fds)]
        sent.append(workers.submit(9, [fds[0], fsyncers.dir_entry(dir_fd)]))
        assert sent == [1, 1, 1, 1]
        await wait_for(lambda: len(answers) == 4)
        assert answers == {1: 0, 2: 0, 3: 0, 9: 0}
    finally:
        workers.stop()
        for fd in [*fds, dir_fd]:
            os.close(fd)
    assert not any(thread.is_alive() for thread in workers._threads)


async def test_a_descriptor_that_fails_answers_its_errno_and_the_rest_are_still_synced(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    workers, answers = await start(worker, count=1)
    good = open_file(tmp_path, "good")
    bad = os.open(tmp_path / "bad", os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(bad)  # no longer open: EBADF
    try:
        workers.submit(5, [bad, good])
        workers.submit(6, [good])
        await wait_for(lambda: len(answers) == 2)
        assert answers == {5: errno.EBADF, 6: 0}
    finally:
        workers.stop()
        os.close(good)


async def test_a_round_larger_than_one_request_is_split_and_answered_per_request(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    got: list[tuple[int, int]] = []

    def answered(request_id: int, failed: int) -> None:
        got.append((request_id, failed))

    workers = Fsyncers(asyncio.get_running_loop(), 2, answered, worker=worker)
    fds = [open_file(tmp_path, f"f{i}") for i in range(fsyncers.MAX_FDS + 1)]
    try:
        assert workers.submit(3, fds) == 2
        await wait_for(lambda: len(got) == 2)
        assert got == [(3, 0), (3, 0)]
    finally:
        workers.stop()
        for fd in fds:
            os.close(fd)


async def test_stop_ends_every_worker_after_the_requests_before_it(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    workers, answers = await start(worker, count=3)
    fd = open_file(tmp_path, "f")
    try:
        for rid in range(1, 7):
            workers.submit(rid, [fd])
        workers.stop()  # joins the threads; answers written meanwhile are read
        assert answers == {rid: 0 for rid in range(1, 7)}
        assert not any(thread.is_alive() for thread in workers._threads)
    finally:
        os.close(fd)


async def test_a_worker_takes_one_request_per_ring(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    """The protocol's order: a worker waits for a ring, then reads one request. A request
    written without its ring waits in the pipe; the next ring serves it, in pipe order."""
    workers, answers = await start(worker, count=1)
    fd = open_file(tmp_path, "f")
    try:
        fields = [7, 1, fd] + [0] * (fsyncers.REQUEST_INTS - 3)
        os.write(workers._work_w, fsyncers._REQUEST.pack(*fields))  # no ring
        workers.submit(8, [fd])  # its ring serves the request ahead of it
        await wait_for(lambda: 7 in answers)
        assert pending(workers._work_r) == fsyncers._REQUEST.size  # 8 waits for a ring
        assert answers == {7: 0}
        os.write(workers._bell_w, fsyncers.RING)
        await wait_for(lambda: 8 in answers)
        assert answers == {7: 0, 8: 0}
    finally:
        workers.stop()
        os.close(fd)


async def test_a_worker_raises_the_ready_flag_after_its_answer_and_reading_lowers_it(
    tmp_path: Path, worker: Serve, doorbell: str
) -> None:
    """The flag the loop looks at without a syscall: up only once the answer is in the pipe,
    down again when the loop reads."""
    workers, answers = await start(worker, count=1)
    workers.loop.remove_reader(workers._done_r)  # only the test reads the answers
    fd = open_file(tmp_path, "f")
    try:
        assert not workers.answers_ready()
        workers.submit(4, [fd])
        await wait_for(workers.answers_ready)
        assert pending(workers._done_r) == fsyncers._ANSWER.size
        assert answers == {}
        workers.read_answers()
        assert answers == {4: 0}
        assert not workers.answers_ready()
        workers.read_answers()  # nothing in the pipe: a no-op
        assert answers == {4: 0}
    finally:
        workers.stop()
        os.close(fd)

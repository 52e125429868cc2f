"""Durable mode's fsync workers: threads that sync without the GIL, talking through pipes.

A commit round's wait used to be half GIL: the worker woke on a queue and had to win the GIL
from the busy event loop thread before it could call fsync, then win it again to hand the
result back (~100-200 us each on a loaded 2-core machine, about as long as the fdatasync
itself). Here the loop writes a request to a pipe and rings a doorbell; a worker blocked on
the doorbell (compiled: ``_cfsync.serve``, which never takes the GIL) takes the request, syncs
the descriptors it names and writes the answer to a second pipe, which the loop watches with
``add_reader``. Nothing between a request and its answer needs the GIL.

The doorbell is an eventfd (a pipe where there is none), not the request pipe itself: a pipe
write wakes its reader as a "sync" wakeup, a hint that the writer is about to sleep, so the
scheduler queues the worker on the loop's own CPU, behind the busy loop, when the loop goes
on working. An eventfd's wakeup carries no such hint. Durable PUB+SUB with NSQ's
``bench_writer`` and ``bench_reader`` on 2 cores: ahead in 4 of 5 pairs with the doorbell
(docs/performance.md, "Issue 21, sixth pass"). A ring wakes every idle worker, and all but
one find nothing and wait again; a doorbell per worker avoided that and measured the same.

Protocol (native byte order, int32): a request is ``REQUEST_INTS`` ints: the round's id (>0;
0 stops the worker that reads it), a count n <= ``MAX_FDS``, then n descriptors, each ``fd``
for fdatasync or ``-(fd + 1)`` for fsync (a directory, after a segment was created). The loop
writes the request, then rings: 8 bytes holding 1 (``RING``) to the doorbell; a worker reads 8
bytes from the doorbell (one ring: the eventfd counts in semaphore mode, a pipe's writes of 8
bytes are atomic), then one request. An answer is ``(id, errno)``: 0 when every descriptor
synced, else the first failure's errno (each descriptor is tried either way). Requests and
answers are smaller than ``PIPE_BUF``, so each write is atomic and each read of one record gets
a whole one, with any number of workers on the same pipes. The descriptors stay open until
the answer has been read: the loop closes them (``DiskQueue.sync_done``).

After writing an answer a worker sets ``ready[0]`` (a one-byte ``bytearray`` shared with the
loop) to 1, and the loop clears it before it reads the done pipe. Reading one byte costs the
loop no syscall, so it looks at the end of every connection's read (``answers_ready``), not
only once per loop iteration: under durable PUB+SUB an answer waited ~280 us on average for
the rest of the iteration's reads and deliveries before its OK could go out. The pipe stays
watched (``add_reader``) for when the loop is idle, and for the moment between an answer's
write and its flag.

``py_serve`` is the pure-Python twin (``NSQPY_PURE_PYTHON=1``, or no compiler): the same
protocol, holding the GIL between its calls as any Python thread does.
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import sys
import threading
from collections.abc import Callable
from typing import Final

from nsqpy._internal.compiled import load

REQUEST_INTS: Final = 16
MAX_FDS: Final = REQUEST_INTS - 2
_REQUEST: Final = struct.Struct(f"={REQUEST_INTS}i")
_ANSWER: Final = struct.Struct("=2i")
#: One ring of the doorbell.
RING: Final = (1).to_bytes(8, sys.byteorder)

Serve = Callable[[int, int, int, bytearray], None]
Answered = Callable[[int, int], None]


def dir_entry(fd: int) -> int:
    """How a request names a descriptor to fsync rather than fdatasync (a directory)."""
    return -(fd + 1)


def py_serve(work: int, done: int, bell: int, ready: bytearray) -> None:
    """Serve requests from ``work``, one per ring of ``bell``, until a stop request or EOF,
    setting ``ready[0]`` after each answer (see the module docstring)."""
    while len(os.read(bell, len(RING))) == len(RING):
        data = os.read(work, _REQUEST.size)
        if len(data) < _REQUEST.size:
            return
        fields = _REQUEST.unpack(data)
        if fields[0] == 0:
            return
        os.write(done, _ANSWER.pack(fields[0], sync_all(fields[2 : 2 + fields[1]])))
        ready[0] = 1


def doorbell() -> tuple[int, int]:
    """The doorbell's (read end, write end): one eventfd twice, or a pipe where there is none."""
    if hasattr(os, "eventfd"):
        fd = os.eventfd(0, os.EFD_SEMAPHORE | os.EFD_CLOEXEC)
        return fd, fd
    return os.pipe()


def sync_all(fds: tuple[int, ...] | list[int]) -> int:
    """Sync each descriptor as the protocol names it; 0, or the first failure's errno."""
    failed = 0
    for fd in fds:
        try:
            if fd >= 0:
                os.fdatasync(fd)
            else:
                os.fsync(-fd - 1)
        except OSError as exc:
            failed = failed or exc.errno or errno.EIO
    return failed


_c = load("nsqpy.nsqd.storage._cfsync")
#: The worker body the daemon runs (tests put a gated one in its place).
serve: Serve = py_serve if _c is None else _c.serve


class Fsyncers:
    """``count`` worker threads, the two pipes and the doorbell; ``answered(id, errno)`` runs
    on the loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        count: int,
        answered: Answered,
        *,
        worker: Serve | None = None,
    ) -> None:
        self.loop = loop
        self._answered = answered
        self._work_r, self._work_w = os.pipe()
        self._done_r, self._done_w = os.pipe()
        self._bell_r, self._bell_w = doorbell()
        #: Set by a worker after each answer, cleared by ``read_answers``.
        self.ready = bytearray(1)
        os.set_blocking(self._done_r, False)
        loop.add_reader(self._done_r, self.read_answers)
        body = worker if worker is not None else serve
        self._threads = [
            threading.Thread(
                target=body,
                args=(self._work_r, self._done_w, self._bell_r, self.ready),
                name=f"nsqd-fsync_{i}",
                daemon=True,
            )
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, request_id: int, fds: list[int]) -> int:
        """Ask for ``fds`` to be synced under ``request_id`` (> 0), in requests of at most
        ``MAX_FDS``; returns how many answers will come. A round is one request while it
        fits: one split over both workers would leave none for the next round."""
        sent = 0
        for start in range(0, len(fds), MAX_FDS):
            chunk = fds[start : start + MAX_FDS]
            fields = [request_id, len(chunk), *chunk]
            fields += [0] * (REQUEST_INTS - len(fields))
            os.write(self._work_w, _REQUEST.pack(*fields))
            os.write(self._bell_w, RING)
            sent += 1
        return sent

    def answers_ready(self) -> bool:
        """Whether a worker answered since the last ``read_answers`` (no syscall)."""
        return self.ready[0] != 0

    def read_answers(self) -> None:
        """Take the answers written so far (the pipe is non-blocking: none is fine)."""
        self.ready[0] = 0  # before the read: an answer written after it sets it again
        try:
            data = os.read(self._done_r, _ANSWER.size * 256)
        except BlockingIOError:
            return
        for request_id, failed in _ANSWER.iter_unpack(data):
            self._answered(request_id, failed)

    def stop(self) -> None:
        """End the threads once the requests given them are answered (waits for them)."""
        for _ in self._threads:
            os.write(self._work_w, _REQUEST.pack(*([0] * REQUEST_INTS)))
            os.write(self._bell_w, RING)
        for thread in self._threads:
            thread.join()
        self.read_answers()  # answers written after the loop's last look
        self.loop.remove_reader(self._done_r)
        pipes = (self._work_r, self._work_w, self._done_r, self._done_w)
        for fd in {*pipes, self._bell_r, self._bell_w}:  # an eventfd doorbell is one fd
            os.close(fd)

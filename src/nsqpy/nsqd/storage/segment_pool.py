"""Durable mode's prepared segments for the whole store, for queues that have none of their own.

A durable queue writes into prepared segments (zeros, synced), so that its commits fdatasync
overwrites of written blocks and never commit the filesystem's journal. But a queue prepares
its next segment only once its write segment holds an eighth of one, and over a spare of its
own only once it has consumed a segment: so every new queue used to start by appending, then
zero a new file. Under NSQ's ``bench_writer`` and ``bench_reader`` on a fresh durable topic
that first second ran ~20 % slower than the rest (docs/performance.md, "Issue 21,
twenty-first pass").

So the store keeps up to ``POOL_SEGMENTS`` segments in ``<data_path>/nsqd.segment.<n>.tmp``,
each made from a consumed segment that its queue could not keep as its own spare (``offer``:
renamed, never copied), zeroed in steps on the files thread between other jobs
(``fill_step``), then synced. A queue about to write a segment it has no prepared file for,
or about to prepare its next one with no spare of its own, takes one (``take``: renamed into
place as its own prepared file would be). Nothing else makes them, so a daemon whose queues
never consume a segment writes no zeros for them, and the pool adds at most
``POOL_SEGMENTS`` segments' worth of disk to the whole store. They go on close, and stale
ones on open.

``offer`` and ``fill_step`` run on the files thread, ``take`` and ``close`` on the loop: a
lock guards the states, never a write.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Final

#: Segments a store keeps at most: a new queue's first segment and its first prepared one
#: (the one after needs a spare of the queue's own: its first segment, consumed by then).
POOL_SEGMENTS: Final = 2
#: The pooled files' names: no queue's file can have them (theirs all hold ".diskqueue.").
_NAME: Final = "nsqd.segment.{}.tmp"
_NAME_RE: Final = re.compile(r"nsqd\.segment\.\d+\.tmp")
#: Zeros per ``fill_step``: one fdatasync each, as a prepare job's steps.
STEP: Final = 1 << 20
_ZEROS: Final = bytes(STEP)
_EMPTY, _FILLING, _READY = range(3)


def remove_stale(data_path: str) -> None:
    """Remove pooled files that a crash (or a durable run before this one) left behind."""
    try:
        names = [e.name for e in os.scandir(data_path) if _NAME_RE.fullmatch(e.name)]
    except OSError:
        return
    for name in names:
        _unlink_quietly(os.path.join(data_path, name))


class SegmentPool:
    """Up to ``count`` prepared segments of ``size`` bytes, shared by the queues of a store."""

    def __init__(self, data_path: str, size: int, count: int = POOL_SEGMENTS) -> None:
        self.paths = [os.path.join(data_path, _NAME.format(i)) for i in range(count)]
        self.size = size
        self._lock = threading.Lock()
        self._states = [_EMPTY] * count
        self._zeroed = 0  # bytes of zeros written and synced in the slot being filled
        self._closed = False
        remove_stale(data_path)

    @property
    def filling(self) -> bool:
        """A segment was offered and its zeros are not all written yet."""
        return _FILLING in self._states

    @property
    def ready(self) -> int:
        """How many segments are ready to take."""
        return self._states.count(_READY)

    def offer(self, path: str) -> bool:
        """Take the consumed segment ``path`` (renamed) if a slot is empty."""
        with self._lock:
            if _EMPTY not in self._states or self._closed:
                return False
            slot = self._states.index(_EMPTY)
            try:
                os.rename(path, self.paths[slot])
            except OSError:
                return False
            self._states[slot] = _FILLING
            return True

    def fill_step(self) -> None:
        """Write and sync the next ``STEP`` of zeros into the first slot that is filling (it is
        ready after its last); nothing unless ``filling``. Raises OSError, and empties that
        slot, when the disk fails."""
        with self._lock:
            if not self.filling:
                return
            slot = self._states.index(_FILLING)
            start = self._zeroed
        end = min(start + STEP, self.size)
        try:
            self._write_zeros(self.paths[slot], start, end)
        except OSError:
            self._drop(slot)
            raise
        with self._lock:
            if self._states[slot] == _FILLING:  # else closed meanwhile: its file is gone
                self._zeroed = end
                if end == self.size:
                    self._states[slot] = _READY
                    self._zeroed = 0

    def _write_zeros(self, path: str, start: int, end: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            if start == 0 and os.fstat(fd).st_size > self.size:
                os.ftruncate(fd, self.size)  # a longer segment (one big record) is cut
            view = memoryview(_ZEROS)
            pos = start
            while pos < end:
                pos += os.pwrite(fd, view[: end - pos], pos)
            if end == self.size:
                os.fsync(fd)  # the size too: every write into it is an overwrite
            else:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    def take(self, path: str) -> bool:
        """Rename a ready segment to ``path``, which must not exist; False when none is
        ready or the rename fails. The new name's directory entry is the taker's to sync (a
        queue's next commit does it for a new segment, a roll onto its prepared file too)."""
        with self._lock:
            if _READY not in self._states or self._closed:
                return False
            slot = self._states.index(_READY)
            try:
                if os.path.lexists(path):  # never replace a file
                    raise FileExistsError(path)
                os.rename(self.paths[slot], path)
            except OSError:
                if not os.path.exists(self.paths[slot]):
                    self._states[slot] = _EMPTY  # lost: the slot takes the next one
                return False
            self._states[slot] = _EMPTY
            return True

    def close(self) -> None:
        """Remove the pooled files; the pool takes nothing any more."""
        with self._lock:
            self._closed = True
        for slot in range(len(self.paths)):
            self._drop(slot)

    def _drop(self, slot: int) -> None:
        with self._lock:
            if self._states[slot] == _FILLING:
                self._zeroed = 0
            self._states[slot] = _EMPTY
            _unlink_quietly(self.paths[slot])


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

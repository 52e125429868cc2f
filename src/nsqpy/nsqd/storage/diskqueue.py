"""A disk-backed FIFO of records, file-compatible with go-diskqueue v1.1.0 (nsqd v1.3.0).

Layout
------
Everything lives flat in ``data_path``, mode 0600::

    <name>.diskqueue.000000.dat   segment files, numbered upwards (``%06d``)
    <name>.diskqueue.meta.dat     b"%d\\n%d,%d\\n%d,%d\\n": depth, readFileNum,readPos,
                                  writeFileNum,writePos
    <meta>.<random>.tmp           metadata being written; fsynced, then renamed over the meta file
    <segment>.bad                 a segment set aside as corrupt
    <name>.diskqueue.next.tmp     durable mode: the next segment, prepared (zeros, synced)
    <name>.diskqueue.spare.tmp    durable mode: a consumed segment kept for the next one

A segment is a run of records ``[4-byte big-endian int32 length][payload]``, with no header,
checksum or padding. A Go nsqd can read what this module writes, and the other way round.

Theory of operation
-------------------
The queue is two cursors, ``(writeFileNum, writePos)`` where the next record goes and
``(readFileNum, readPos)`` where the next unread one starts, plus ``depth``, the number of
records between them. ``put`` appends a batch with one ``os.write`` per segment it touches; a
record that would take a non-empty segment past ``max_bytes_per_file`` starts the next one
(the old one is synced first), so a record bigger than that sits alone in a fresh file.
``read`` hands out the next record through a buffered reader: a completed segment (one below
the write segment) is read to its real size, the write segment up to ``writePos``. Once a
segment is consumed it is deleted: by a ``RemoveJob`` when the daemon gives a
``remove_later`` (its worker thread: unlinking a full 100 MB segment took ~20 ms here, a
stall of every client if done on the loop), else at once.

Nothing here runs on its own: the daemon owns the clock and a worker thread. It asks for a
``SyncJob`` when ``needs_sync`` (every ``sync_every`` puts and reads) or on a timer when
``dirty``; the job is a snapshot (metadata bytes plus a duplicate of the write fd, and the fds
of segments rolled away from before their records were synced) that runs on the worker:
fdatasync the data, write the metadata atomically, fsync the directory after a new segment
was created. Durable mode splits it in two: ``commit_job`` (the data and a new segment's
directory entry: what a publisher's OK waits for) and ``position_job`` (the metadata, off that
path). Jobs carry a sequence number and a shared fence, so a stale job can
never overwrite newer metadata, nor bring back metadata that ``empty`` or ``delete`` removed.

With ``prepare_segments`` (durable mode) the write segment is a file written full of zeros
and synced beforehand, so a commit's fdatasync covers overwrites of written blocks: no change
of size or allocation, hence no filesystem journal commit (an append needs one). Once the
write segment holds an eighth of ``max_bytes_per_file``, ``needs_prepare`` asks for a
``PrepareJob`` that the daemon runs on a worker thread: zeros to ``max_bytes_per_file``
(at most ``PREPARE_MAX``) in ``<name>.diskqueue.next.tmp``, fsynced; written in synced steps
that, while the writer fills a prepared segment, keep at most ``PREPARE_LEAD`` of a segment
ahead of it. The next roll renames it
into place (the new segment's directory entry is synced by the next commit, as for any new
segment); if it is not ready by then the new segment grows by appends as before, nothing
waits, and the first write after it is ready rolls on to it early (so a queue's first
segment, which is never prepared, ends soon after an eighth of ``max_bytes_per_file``). A
segment rolled away from, and the write segment on a clean close, are truncated to their real
length before their last sync, so completed segments stay exact go-diskqueue files.

A durable queue recycles: a consumed segment is not deleted but renamed
``<name>.diskqueue.spare.tmp`` when the queue has neither a spare nor a prepared next segment,
and the next ``PrepareJob`` writes its zeros over the spare's blocks instead of a new file's.
Those blocks are allocated and written already, so the zeros' fdatasyncs commit no journal,
and no 100 MB segment is freed (and discarded, on a ``discard`` mount) while commits wait for
the disk. A spare exists only while no prepared file does, so a queue still holds at most one
segment of disk beyond its segments; both ``.tmp`` files go on close and on open. A consumed
segment the queue cannot keep goes to its store's ``SegmentPool`` if that has room (else it
is deleted), and the pool's ready segments serve the queues that have no prepared file: a new
queue's first segment, and a next segment when the queue has no spare (``prepare_from_pool``).

With ``track_acks`` a record read is only gone once ``finish(token)`` is called. The metadata
then records the start of the oldest unfinished record as the read position (and counts
everything from there in the depth), so a crash or restart replays every unfinished record;
records finished after it replay too (duplicates, never loss). A segment is deleted only when
a completed sync (``sync_done``) has recorded a read position past it. ``put_taking`` lets a
caller that already holds the messages (durable mode, a consumer ready) count the records it
writes as read at once, with their tokens, instead of reading them back; only while nothing
else is unread, so the order stays first-in first-out.

Damage is never raised to the caller. A record length outside ``[26, max_record_size]``, a
record cut short in a completed segment, or a segment that cannot be opened: the segment is
renamed ``.bad``, ``on_corruption`` is told, and reading goes on with the next segment (if the
bad one was the write segment, writing moves on too). When the reader catches up with the
writer a non-zero depth is reset to 0 (Go's tail check). On open, a write segment longer than
the metadata says (a crash after writes, before their sync) is left to the reader and new
writes start a fresh segment, after any segments the writer rolled on to that the metadata
does not name yet; unreadable metadata is set aside as ``.bad`` and the queue is rebuilt by
scanning the segments present. After an unclean stop a prepared segment (the write segment,
or one rolled away from whose truncation had not reached the disk) ends in zeros: where a
record would start, nothing but zeros to the end of the file is the end of its data, not
damage (no record is shorter than ``MIN_MSG_SIZE``); the zeros are cut off on open or when
the reader meets them. Zeros followed by anything else are damage as before.

Deliberate differences from go-diskqueue: a reader that consumed a segment before the writer
rolled away from it moves on cleanly instead of calling it corrupt (go-diskqueue #42);
metadata that is missing while segments exist is recovered like unreadable metadata instead of
overwriting segment 0; a write segment shorter than ``writePos`` also moves writes on (Go would
leave a hole); a run of missing segments is skipped in one jump; a torn write after an I/O
error is truncated; segments left below the read position and stale ``.tmp`` files are
removed on open; segments past the metadata's writeFileNum are read, not overwritten (Go
syncs the metadata at every roll, nsqpy leaves that to its next sync job).
"""

from __future__ import annotations

import logging
import os
import random
import re
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final, NamedTuple

from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.storage.frames import bad_size, frame
from nsqpy.nsqd.storage.segment_pool import SegmentPool
from nsqpy.nsqd.storage.unfinished import unfinished_tokens

#: Smallest record nsqd writes: an NSQ message header (timestamp, attempts, id).
MIN_MSG_SIZE: Final = 26
_LEN: Final = struct.Struct(">i")
_READ_CHUNK: Final = 1 << 20
#: Rolled segments whose fds may wait for a sync before one is done inline.
_MAX_ROLLED: Final = 16
_META_RE: Final = re.compile(rb"(-?\d+)\n(\d+),(\d+)\n(\d+),(\d+)\n")
#: A prepared segment holds zeros up to this size at most (past it, writes append).
PREPARE_MAX: Final = 256 << 20
#: A prepare job writes its zeros this much at a time and fdatasyncs each step: a burst of
#: writeback as big as a whole segment queued ahead of the commits' fdatasyncs stalled them
#: (up to ~80 ms seen here), and steps of 8 MB still cost durable PUB+SUB a few per cent.
_ZEROS: Final = bytes(1 << 20)
#: While its queue writes into a prepared segment, a prepare job keeps its zeros at most this
#: fraction of a segment ahead of the writer: zeros then reach the disk at the data's own
#: pace, between the commits, not as a burst in front of them (docs/performance.md, "Issue
#: 21, sixth pass").
PREPARE_LEAD: Final = 0.25
#: How long a paced job waits before it looks at the writer again (s)...
PREPARE_PAUSE: Final = 0.002
#: ...and how long after it started it stops waiting at all (s): the job holds the one
#: thread that every queue's file jobs share, and a writer that stops must not hold it.
PREPARE_PATIENCE: Final = 1.0
# where the next segment's preparation stands (``prepare_segments``)
_UNPREPARED, _PREPARING, _PREPARED, _PREPARE_FAILED = range(4)


class DiskQueueError(BrokerError):
    """A write or sync failed, or a record has an invalid size.

    ``written`` is how many records of the failed ``put`` batch were committed before the
    failure (they are in the queue and counted in its depth).
    """

    def __init__(self, message: str, written: int = 0) -> None:
        super().__init__(message)
        self.written = written


class _Corrupt(Exception):
    """The current read segment cannot be read any further."""


class _Meta(NamedTuple):
    depth: int
    read_file: int
    read_pos: int
    write_file: int
    write_pos: int


def _parse_meta(text: bytes) -> _Meta | None:
    match = _META_RE.match(text)
    if match is None:
        return None
    return _Meta(*(int(g) for g in match.groups()))


def _format_meta(meta: _Meta) -> bytes:
    return b"%d\n%d,%d\n%d,%d\n" % meta


class _Fence:
    """Shared by a queue and its jobs: which metadata snapshot may still be written."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.floor = 0  # jobs numbered below this are void (empty/delete happened after them)
        self.persisted = 0  # number of the newest job whose metadata is on disk
        self.closed = False  # the queue was closed or deleted: a PrepareJob leaves no file

    @property
    def deleted(self) -> bool:
        """``delete`` happened: a queue of the same name may number its segments anew."""
        return self.floor == sys.maxsize


class SyncJob:
    """Built on the loop thread by ``DiskQueue.sync_job()`` (or ``commit_job``,
    ``position_job``); ``run()`` goes on a worker thread, then ``DiskQueue.sync_done`` on the
    loop, always: it closes the job's descriptors. The worker does nothing but the disk calls
    (one ``fdatasync`` per segment in a commit), since each call it makes hands the GIL back and
    has to win it again from the busy loop thread before the next."""

    def __init__(
        self,
        meta_path: str,
        meta: _Meta | None,
        fds: list[int],
        dir_path: str | None,
        fence: _Fence,
        seq: int,
        *,
        data_only: bool = False,
        commits: bool = True,
    ) -> None:
        self._meta_path = meta_path
        self.data_only = data_only
        #: the job makes the queue's writes durable (publishers may be answered on it); a
        #: position job only fsyncs so that its metadata is never ahead of the data
        self.commits = commits
        self._text = b"" if meta is None else _format_meta(meta)
        self._fds = fds
        self.dir_path = dir_path
        self._fence = fence
        self.seq = seq
        self.read_file = -1 if meta is None else meta.read_file
        self.completed = False

    def run(self) -> None:
        """fsync the data, then write the metadata atomically; raises DiskQueueError."""
        try:
            for fd in self._fds:
                # fdatasync: an append changes the size, which it does flush; it skips the
                # mtime-only journal commit that fsync forces
                os.fdatasync(fd)
            if not self.data_only:
                self._write_meta()
            if self.dir_path is not None:
                _fsync_dir(self.dir_path)
        except OSError as exc:
            raise DiskQueueError(f"failed to sync - {exc}") from exc
        self.completed = True

    @property
    def data_fds(self) -> list[int]:
        """The descriptors ``run`` fdatasyncs (durable commits hand them to the fsync
        workers instead, and set ``completed`` from their answer)."""
        return list(self._fds)

    def release(self) -> None:
        """Close the job's descriptors (``sync_done`` does this, whether it ran or not)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def _write_meta(self) -> None:
        fence = self._fence
        with fence.lock:
            if self.seq < fence.floor or self.seq <= fence.persisted:
                return  # voided by empty/delete, or a newer snapshot is already on disk
            tmp = f"{self._meta_path}.{random.getrandbits(63)}.tmp"
            try:
                _write_file_synced(tmp, self._text)
                os.rename(tmp, self._meta_path)
            except OSError:
                _unlink_quietly(tmp)
                raise
            fence.persisted = self.seq


class Pace(NamedTuple):
    """What a paced ``PrepareJob`` looks at, from its own thread."""

    #: where the queue's writes stand: (writeFileNum, writePos, whether that segment is a
    #: prepared one); read without a lock: a stale answer only moves a pause
    writer: Callable[[], tuple[int, int, bool]]
    segment_bytes: int  # the queue's max_bytes_per_file
    #: whether other jobs wait for the thread the job runs on (the daemon's)
    others_waiting: Callable[[], bool]


class PrepareJob:
    """The next segment, written ahead (``DiskQueue.prepare_job``): zeros to ``size`` in
    synced steps, then fsynced, under the temporary name ``path`` that the queue renames into
    place when it rolls. ``run()`` goes on a worker thread (one for all queues: a job of a
    closed queue must end before the next one of its name starts), then
    ``DiskQueue.prepare_done`` on the loop. A job whose queue was closed meanwhile removes
    its file.

    With a ``pace`` (a daemon's job, on a thread of its own), while the queue writes into a
    prepared segment the job waits whenever its zeros are more than ``PREPARE_LEAD`` of a
    segment ahead of the writer's progress through that segment. It hurries once the writer
    moves on without it or writes to a segment that appends (its roll waits for this job),
    while other jobs wait for its thread, once the queue is closed, and ``PREPARE_PATIENCE``
    after it started. ``clock`` and ``sleep`` are there for tests."""

    def __init__(
        self,
        path: str,
        size: int,
        fence: _Fence,
        pace: Pace | None = None,
        spare: str | None = None,
    ) -> None:
        self.path = path
        self.size = size
        self._fence = fence
        self._pace = pace
        self._spare = spare
        self.completed = False
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep

    def run(self) -> None:
        """Write and sync the file; raises DiskQueueError (and leaves no file) on failure."""
        fence = self._fence
        with fence.lock:
            if fence.closed:
                return
            try:
                fd = self._open()
            except OSError as exc:
                _unlink_quietly(self.path)
                raise DiskQueueError(f"failed to prepare {self.path} - {exc}") from exc
        try:
            self._fill(fd)
            os.fsync(fd)  # the zeros and the size: the segment's writes are overwrites
        except OSError as exc:
            _unlink_quietly(self.path)
            raise DiskQueueError(f"failed to prepare {self.path} - {exc}") from exc
        finally:
            os.close(fd)
        self.completed = self._keep()

    def _open(self) -> int:
        """The queue's spare renamed into place, cut to ``size`` if longer (the zeros go over
        its old records), else a new file."""
        if self._spare is not None:
            try:
                os.rename(self._spare, self.path)
            except FileNotFoundError:
                pass
            else:
                fd = os.open(self.path, os.O_WRONLY)
                try:
                    if os.fstat(fd).st_size > self.size:
                        os.ftruncate(fd, self.size)
                except OSError:
                    os.close(fd)
                    raise
                return fd
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def _fill(self, fd: int) -> None:
        zeros = memoryview(_ZEROS)
        segment = self._pace.writer()[0] if self._pace is not None else 0
        patience = self.clock() + PREPARE_PATIENCE
        done = 0
        while done < self.size and not self._fence.closed:  # closed: _keep removes the file
            done += os.write(fd, zeros[: self.size - done])
            os.fdatasync(fd)
            while self._ahead(done, segment) and self.clock() < patience:
                self.sleep(PREPARE_PAUSE)

    def _ahead(self, done: int, segment: int) -> bool:
        """Whether to wait before writing more (see the class docstring)."""
        pace = self._pace
        if pace is None or done >= self.size or self._fence.closed or pace.others_waiting():
            return False
        at, pos, prepared = pace.writer()
        if at != segment or not prepared:
            return False
        return done / self.size - pos / pace.segment_bytes > PREPARE_LEAD

    def _keep(self) -> bool:
        """The file stays if the queue is still open; otherwise it goes."""
        with self._fence.lock:
            if self._fence.closed:
                _unlink_quietly(self.path)
                return False
        return True


class Recycling(NamedTuple):
    """Where a durable queue keeps a consumed segment for its next preparation, or else
    offers it to its store's pool (``segment_pool``)."""

    spare: str  # <name>.diskqueue.spare.tmp
    prepared: str  # <name>.diskqueue.next.tmp: while it exists, no spare is kept
    pool: SegmentPool | None = None

    def keep(self, path: str) -> bool:
        """Make the consumed segment ``path`` the spare if there is room for one, else the
        pool's if it has room; False: delete it."""
        if not (os.path.exists(self.spare) or os.path.exists(self.prepared)):
            try:
                os.rename(path, self.spare)
            except OSError:
                pass
            else:
                return True
        return self.pool is not None and self.pool.offer(path)


class RemoveJob:
    """A consumed segment's deletion, to ``run()`` on a worker thread (``remove_later``), or
    with ``recycling`` its keeping as the spare when there is room. Under the fence's lock,
    and not at all once the queue was deleted: ``delete`` removed every segment itself, and a
    new queue of the same name may reuse this file's name."""

    def __init__(
        self,
        path: str,
        fence: _Fence,
        log: logging.Logger,
        name: str,
        recycling: Recycling | None = None,
    ) -> None:
        self.path = path
        self._fence = fence
        self._log = log
        self._name = name
        self._recycling = recycling

    def run(self) -> None:
        with self._fence.lock:
            if self._fence.deleted:
                return
            recycling = self._recycling
            if recycling is not None and not self._fence.closed and recycling.keep(self.path):
                return
            _remove_logged(self.path, self._log, self._name)


def _remove_logged(path: str, log: logging.Logger, name: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.error("DISKQUEUE(%s) failed to Remove(%s) - %s", name, path, exc)


def _write_file_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    done = os.write(fd, data)
    if done < len(data):  # short write: rare on regular files; finish (or fail) properly
        view = memoryview(data)
        while done < len(data):
            done += os.write(fd, view[done:])


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _SegmentReader:
    """Buffered reading of one segment file, record by record, from a record boundary."""

    def __init__(self, fd: int, pos: int, max_size: int) -> None:
        self.fd = fd
        self.pos = pos  # file offset of the next record
        self.size: int | None = None  # real file size, once the segment is complete
        self._max_size = max_size
        self._buf = b""
        self._off = 0  # index in _buf of the byte at self.pos

    def next(self, limit: int) -> bytes | None:
        """The record at ``pos``; None when ``pos == limit``; _Corrupt if it is unreadable."""
        pos = self.pos
        if pos >= limit:
            if pos > limit:
                raise _Corrupt(f"read position {pos} beyond end {limit}")
            return None
        buf, off = self._buf, self._off
        if len(buf) - off < 4:
            buf, off = self._fill(4, limit)
        (size,) = _LEN.unpack_from(buf, off)
        if size < MIN_MSG_SIZE or size > self._max_size:
            raise _Corrupt(f"invalid message read size ({size})")
        end = off + 4 + size
        if len(buf) < end:
            buf, off = self._fill(4 + size, limit)
            end = off + 4 + size
        self._off = end
        self.pos = pos + 4 + size
        return buf[off + 4 : end]

    def seek(self, pos: int) -> None:
        """Go on from ``pos`` (a record boundary), dropping what was read ahead."""
        self.pos = pos
        self._buf = b""
        self._off = 0

    def _fill(self, need: int, limit: int) -> tuple[bytes, int]:
        """Make ``need`` bytes from ``pos`` available, reading ahead in large chunks."""
        if self.pos + need > limit:
            raise _Corrupt(f"truncated record: {need} bytes at {self.pos}, segment ends at {limit}")
        parts = [self._buf[self._off :]]
        have = len(parts[0])
        want = min(max(_READ_CHUNK, need), limit - self.pos)
        while have < want:
            chunk = os.pread(self.fd, want - have, self.pos + have)
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        if have < need:
            raise _Corrupt(f"unexpected EOF: {need} bytes at {self.pos}, file has {have}")
        self._buf = b"".join(parts)
        self._off = 0
        return self._buf, 0


def _scan_records(path: str, start: int, max_size: int) -> tuple[int, int | None]:
    """How many whole, valid records follow ``start`` in a segment (stops at damage), and
    where the zeros of a prepared segment's unused tail begin if they are what stopped it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0, None
    reader = _SegmentReader(fd, start, max_size)
    count, tail = 0, None
    try:
        end = os.fstat(fd).st_size
        while reader.next(end) is not None:
            count += 1
    except _Corrupt:
        try:
            tail = reader.pos if _zeros_from(fd, reader.pos) else None
        except OSError:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return count, tail


def _zeros_from(fd: int, pos: int) -> bool:
    """From ``pos`` to its end the file holds zeros, and at least one: where a record would
    start, the unused tail of a prepared segment (no record is shorter than MIN_MSG_SIZE, so
    a zero length is never one)."""
    size = os.fstat(fd).st_size
    if pos >= size:
        return False
    zeros = memoryview(_ZEROS)
    while pos < size:
        chunk = os.pread(fd, min(len(zeros), size - pos), pos)
        if not chunk:
            break
        if zeros[: len(chunk)] != chunk:
            return False
        pos += len(chunk)
    return True


class DiskQueue:
    """One named disk queue in ``data_path``; every method runs on the caller's thread."""

    def __init__(
        self,
        name: str,
        data_path: str,
        *,
        max_bytes_per_file: int,
        max_record_size: int,
        sync_every: int,
        track_acks: bool = False,
        prepare_segments: bool = False,
        log: logging.Logger,
        on_corruption: Callable[[str], None] | None = None,
        remove_later: Callable[[RemoveJob], None] | None = None,
        pool: SegmentPool | None = None,
    ) -> None:
        self.name = name
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        self.max_record_size = max_record_size
        self.sync_every = sync_every
        self.track_acks = track_acks
        self._log = log
        self._on_corruption = on_corruption
        self._remove_later = remove_later
        self._meta_path = os.path.join(data_path, f"{name}.diskqueue.meta.dat")
        self._segment_re = re.compile(re.escape(name) + r"\.diskqueue\.(\d{6,})\.dat")
        self.prepare_segments = prepare_segments
        self._prepared_path = os.path.join(data_path, f"{name}.diskqueue.next.tmp")
        self._spare_path = os.path.join(data_path, f"{name}.diskqueue.spare.tmp")
        self._recycling = (
            Recycling(self._spare_path, self._prepared_path, pool) if prepare_segments else None
        )
        self._prepare_size = min(max_bytes_per_file, PREPARE_MAX)
        # the store's prepared segments, for a segment this queue has none of its own for
        self._pool = pool if prepare_segments and pool and pool.size == self._prepare_size else None
        # the next segment is prepared once the write segment holds this much: a queue that
        # holds little never gets a prepared file
        self._prepare_from = max(1, max_bytes_per_file // 8)
        self._prepare_state = _UNPREPARED
        self._zero_tail = False  # the write segment is a prepared file: zeros past writePos
        self.depth = 0  # records written and not yet read
        self._read_file = self._read_pos = self._write_file = self._write_pos = 0
        self._reader: _SegmentReader | None = None
        self._write_fd: int | None = None
        self._count = 0  # puts and reads since the last sync job
        self._unsynced = False  # records written since the last job fsynced the data
        self._force = False  # a sync is due regardless of the count
        self._moved = False  # the persisted read position moved (finish)
        self._new_segment = False  # a segment was created since the last sync job
        self._rolled: list[int] = []  # fds of segments rolled away from with unsynced records
        self._fence = _Fence()
        self._seq = 0
        self._token = 0
        # runs of records read (or taken), in order: (first token, file, [start of each]);
        # pruned up to the oldest unfinished token when a job asks for the positions
        self._acks: deque[tuple[int, int, list[int]]] = deque()
        self._unfinished = unfinished_tokens()
        self._held: deque[int] = deque()  # consumed segments kept until a sync passes them
        self._closed = False
        self._open()

    # -- opening -----------------------------------------------------------------------
    def _open(self) -> None:
        segments = self._segments(clean_tmp=True)
        meta = self._load_meta(segments)
        self.depth = meta.depth
        self._read_file, self._read_pos = meta.read_file, meta.read_pos
        self._write_file, self._write_pos = meta.write_file, meta.write_pos
        self._salvage_write_file(segments)
        for num in segments:
            if num < self._read_file:  # consumed, but its deletion did not happen
                self._remove_segment(num)
        self._check_tail()

    def _segments(self, clean_tmp: bool = False) -> list[int]:
        """Numbers of this queue's segments present (and stale metadata temp files go)."""
        tmp_prefix = os.path.basename(self._meta_path) + "."
        stale = {os.path.basename(self._prepared_path), os.path.basename(self._spare_path)}
        segments = []
        with os.scandir(self.data_path) as entries:
            for entry in entries:
                match = self._segment_re.fullmatch(entry.name)
                if match is not None:
                    segments.append(int(match.group(1)))
                elif clean_tmp and (
                    (entry.name.startswith(tmp_prefix) and entry.name.endswith(".tmp"))
                    or entry.name in stale  # a preparation may not have finished
                ):
                    _unlink_quietly(entry.path)
        return sorted(segments)

    def _load_meta(self, segments: list[int]) -> _Meta:
        try:
            with open(self._meta_path, "rb") as f:
                text = f.read(4096)
        except FileNotFoundError:
            text = None
        except OSError as exc:
            self._log.error("DISKQUEUE(%s) failed to read metadata - %s", self.name, exc)
            text = b""
        meta = _parse_meta(text) if text is not None else None
        if meta is not None:
            return meta
        if text is not None:
            self._set_meta_aside()
        elif not segments:
            return _Meta(0, 0, 0, 0, 0)  # a new queue
        return self._recover(segments)

    def _set_meta_aside(self) -> None:
        bad = self._meta_path + ".bad"
        self._log.error(
            "DISKQUEUE(%s) unreadable metadata, saving it as %s and scanning segments",
            self.name,
            bad,
        )
        try:
            os.replace(self._meta_path, bad)
        except OSError as exc:
            self._log.error("DISKQUEUE(%s) failed to rename %s - %s", self.name, bad, exc)

    def _recover(self, segments: list[int]) -> _Meta:
        """Metadata rebuilt from the segments present: all of them unread, writes after."""
        if not segments:
            return _Meta(0, 0, 0, 0, 0)
        depth = sum(self._count_segment(n, 0) for n in segments)
        self._log.warning(
            "DISKQUEUE(%s) recovered %d records from segments %d..%d without metadata",
            self.name,
            depth,
            segments[0],
            segments[-1],
        )
        self._force = True
        return _Meta(depth, segments[0], 0, segments[-1] + 1, 0)

    def _salvage_write_file(self, segments: list[int]) -> None:
        """After an unclean stop the write segment may not end at writePos (records written
        after the last sync; a prepared segment's zeros), and the writer may have rolled on
        to segments the metadata does not name yet: count their records in, cut the zeros
        of prepared segments off, and write after them all."""
        path = self._segment_path(self._write_file)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        counted = 0
        if size > self._write_pos:  # records written after the last sync: count them in
            start = self._write_pos
            if self._read_file == self._write_file:
                start = max(start, self._read_pos)
            counted, tail = _scan_records(path, start, self.max_record_size)
            if tail is not None:
                self._cut_zero_tail(path, tail)
                size = tail
        later = [num for num in segments if num > self._write_file]
        if size == self._write_pos and not later:
            return
        self._log.warning(
            "DISKQUEUE(%s) %s metadata writePos %d %s file size of %d, skipping to new file",
            self.name,
            path,
            self._write_pos,
            "<" if size > self._write_pos else ">" if size < self._write_pos else "=",
            size,
        )
        self.depth += counted
        self._write_file += 1
        self._write_pos = 0
        self._force = True
        if later:  # rolled onto after the metadata was written: read them, write after
            self._log.warning(
                "DISKQUEUE(%s) segments %d..%d are past the metadata's writeFileNum, "
                "reading them and writing after them",
                self.name,
                later[0],
                later[-1],
            )
            for num in later:
                self.depth += self._count_segment(num, 0)
            self._write_file = later[-1] + 1

    def _count_segment(self, num: int, start: int) -> int:
        """The records after ``start`` in a segment read later, its zero tail cut off."""
        path = self._segment_path(num)
        count, tail = _scan_records(path, start, self.max_record_size)
        if tail is not None:
            self._cut_zero_tail(path, tail)
        return count

    def _cut_zero_tail(self, path: str, at: int) -> None:
        """Truncate a prepared segment's unused zeros (left by an unclean stop)."""
        self._log.warning(
            "DISKQUEUE(%s) %s ends in zeros from %d (a prepared segment not truncated "
            "before an unclean stop), truncating",
            self.name,
            path,
            at,
        )
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, at)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self._log.error("DISKQUEUE(%s) failed to truncate %s - %s", self.name, path, exc)

    # -- writing -----------------------------------------------------------------------
    def put(self, records: list[bytes]) -> None:
        """Append ``records`` in order; DiskQueueError (nothing written) on a bad size."""
        self._put(records, None)

    def put_taking(self, records: list[bytes], take: int) -> range:
        """``put``, and the first ``take`` records count as read at once, as if ``read`` had
        just returned them: a caller that holds the messages already hands them out without
        reading them back. Only when nothing else is unread (else nothing is taken, so the
        order stays first-in first-out). Returns the taken records' tokens, in order."""
        if take <= 0 or self._has_unread():
            self._put(records, None)
            return range(0)
        runs: list[tuple[int, list[int]]] = []
        self._put(records, runs)
        first = self._token
        left = take
        end_file, end_pos = self._write_file, self._write_pos
        for num, starts in runs:
            short = left < len(starts)
            if short:  # the first record not taken: reading goes on there
                end_file, end_pos = num, starts[left]
                starts = starts[:left]
            if starts and self.track_acks:
                self._acks.append((self._token + 1, num, starts))
            self._token += len(starts)
            left -= len(starts)
            if short:
                break
        taken = self._token - first
        if self.track_acks:
            self._unfinished.add_range(first + 1, self._token + 1)
        self.depth -= taken
        self._count += taken
        while self._read_file < end_file:  # the batch rolled on: the read segment is consumed
            self._next_read_file()
        self._read_pos = end_pos
        if self._reader is not None:
            self._reader.seek(end_pos)
        return range(first + 1, self._token + 1)

    def _put(self, records: list[bytes], runs: list[tuple[int, list[int]]] | None) -> None:
        if self._closed:
            raise DiskQueueError("exiting")
        self._check_sizes(records)
        done = 0
        try:
            while done < len(records):
                done = self._put_segment(records, done, runs)
        except OSError as exc:
            self._log.error("DISKQUEUE(%s) failed to write - %s", self.name, exc)
            raise DiskQueueError(str(exc), written=done) from exc

    def _check_sizes(self, records: list[bytes]) -> None:
        bad = bad_size(records, MIN_MSG_SIZE, self.max_record_size)
        if bad < 0:
            return
        raise DiskQueueError(
            f"invalid message write size ({bad}) "
            f"minMsgSize={MIN_MSG_SIZE} maxMsgSize={self.max_record_size}"
        )

    def _put_segment(
        self, records: list[bytes], start: int, runs: list[tuple[int, list[int]]] | None
    ) -> int:
        """Write records from ``start`` that fit the current segment; returns the next index.
        Appends ``(segment, [start position of each record written])`` to ``runs`` when
        given. The batch is framed in one pass (``frames``; compiled when built)."""
        limit = self.max_bytes_per_file
        if self._write_pos > 0 and (
            self._write_pos + 4 + len(records[start]) > limit
            or (self._prepare_state == _PREPARED and not self._zero_tail)
        ):  # full, or an appending segment while a prepared one is ready: move to it
            self._roll()
        fd = self._write_fd if self._write_fd is not None else self._open_write_file()
        pos = self._write_pos
        data, count, starts = frame(records, start, pos, limit, runs is not None)
        if starts is not None and runs is not None:
            runs.append((self._write_file, starts))
        try:
            _write_all(fd, data)
        except OSError:
            self._drop_write_fd(truncate=True)
            raise
        self._write_pos = pos + len(data)
        self.depth += count
        self._count += count
        self._unsynced = True
        return start + count

    def _roll(self) -> None:
        """Move writes to the next segment. The old one is not synced here, on the loop (that
        stalled every client for a data fsync plus a metadata write): while it holds unsynced
        records its fd is kept for the next commit or sync job, and the positions are due."""
        fd, self._write_fd = self._write_fd, None
        if fd is not None:
            if self._zero_tail:  # a prepared segment: cut its unused zeros off
                self._zero_tail = False
                try:
                    os.ftruncate(fd, self._write_pos)
                except OSError as exc:  # reading stops at the zeros all the same
                    self._log.error("DISKQUEUE(%s) failed to truncate - %s", self.name, exc)
                self._rolled.append(fd)  # the final sync makes the truncation durable
            elif self._unsynced:
                self._rolled.append(fd)
            else:
                os.close(fd)
        if self._prepare_state == _PREPARE_FAILED:
            self._prepare_state = _UNPREPARED  # try again for the segment after this one
        if len(self._rolled) > _MAX_ROLLED:  # nobody syncs (a test, a tool): bound the fds
            try:
                self.sync_now()
            except DiskQueueError as exc:
                self._log.error("DISKQUEUE(%s) failed to sync - %s", self.name, exc)
        self._write_file += 1
        self._write_pos = 0
        self._force = True

    def _open_write_file(self) -> int:
        path = self._segment_path(self._write_file)
        fd = None
        if self._write_pos == 0 and self._prepare_state == _PREPARED:
            fd = self._take_prepared(path)
        elif self._write_pos == 0 and self._pool is not None and self._pool.take(path):
            fd = self._open_pooled(path)
        if fd is None:  # not prepared (or not in time): a segment that grows by appends
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size > self._write_pos:
                    os.ftruncate(fd, self._write_pos)  # a torn write left by an earlier failure
                os.lseek(fd, self._write_pos, os.SEEK_SET)
            except OSError:
                os.close(fd)
                raise
        if self._write_pos == 0:
            self._new_segment = True
        self._write_fd = fd
        self._log.info("DISKQUEUE(%s): writeOne() opened %s", self.name, path)
        return fd

    def _open_pooled(self, path: str) -> int | None:
        """The store's prepared segment, just renamed to ``path``: like ``_take_prepared``."""
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError:
            return None  # appended to instead: the zeros past writePos are cut off first
        self._zero_tail = True
        return fd

    def _take_prepared(self, path: str) -> int | None:
        """Rename the prepared file into place as segment ``path``; None if that fails (the
        caller appends instead). The new segment's directory entry is synced by the next
        commit or sync job, as for any new segment."""
        self._prepare_state = _UNPREPARED  # used (or unusable): the next one is due later
        try:
            if os.path.lexists(path):  # never replace a segment
                raise FileExistsError(f"{path} exists")
            os.rename(self._prepared_path, path)
            fd = os.open(path, os.O_WRONLY)
        except OSError as exc:
            self._log.error(
                "DISKQUEUE(%s) cannot use the prepared segment %s - %s",
                self.name,
                self._prepared_path,
                exc,
            )
            _unlink_quietly(self._prepared_path)
            return None
        self._zero_tail = True
        return fd

    def _drop_write_fd(self, truncate: bool = False) -> None:
        fd, self._write_fd = self._write_fd, None
        if fd is None:
            return
        if self._zero_tail:  # a failed write or a bad write segment: nothing more goes in
            self._zero_tail = False
            truncate = True
        try:
            if truncate:
                os.ftruncate(fd, self._write_pos)
        except OSError:
            pass  # retried when the segment is opened again
        finally:
            os.close(fd)

    # -- reading -----------------------------------------------------------------------
    def read(self) -> tuple[bytes, int] | None:
        """The next record and its token, or None when everything written has been read."""
        if self._closed:
            return None
        while self._read_file < self._write_file or (
            self._read_file == self._write_file and self._read_pos < self._write_pos
        ):  # _has_unread(), inlined on this hot path
            try:
                item = self._read_next()
            except (_Corrupt, OSError) as exc:
                if not (isinstance(exc, _Corrupt) and self._end_at_zeros()):
                    self._handle_corruption(str(exc))
                continue
            if item is not None:
                return item
        self._check_tail()
        return None

    def read_many(self, limit: int) -> tuple[list[bytes], range]:
        """Up to ``limit`` next records, in order, and their tokens (consecutive, one each).

        ``read`` for a batch: the same positions, depth, acks and damage handling (a bad
        segment is set aside and reading goes on in the next), with one call for the batch.
        """
        out: list[bytes] = []
        first = self._token + 1
        if self._closed or limit <= 0:
            return out, range(first, first)
        while len(out) < limit and (
            self._read_file < self._write_file
            or (self._read_file == self._write_file and self._read_pos < self._write_pos)
        ):
            try:
                self._read_run(out, limit)
            except (_Corrupt, OSError) as exc:
                if not (isinstance(exc, _Corrupt) and self._end_at_zeros()):
                    self._handle_corruption(str(exc))
        if len(out) < limit:
            self._check_tail()
        return out, range(first, first + len(out))

    def _read_run(self, out: list[bytes], limit: int) -> None:
        """``_read_next`` over a run of records in the read segment, up to ``len(out) ==
        limit``; what was read before any damage is counted as read when it raises."""
        reader = self._reader if self._reader is not None else self._open_reader()
        completed = self._read_file < self._write_file
        if completed:
            if reader.size is None:
                reader.size = os.fstat(reader.fd).st_size
            end = reader.size
        else:
            end = self._write_pos
        before = len(out)
        payload: bytes | None = b""
        try:
            if self.track_acks:
                starts: list[int] = []
                self._acks.append((self._token + 1, self._read_file, starts))
                start = self._read_pos
                while len(out) < limit and (payload := reader.next(end)) is not None:
                    starts.append(start)
                    start = reader.pos
                    out.append(payload)
            else:
                while len(out) < limit and (payload := reader.next(end)) is not None:
                    out.append(payload)
        finally:  # the reader moves only past whole, valid records
            taken = len(out) - before
            self._read_pos = reader.pos
            self.depth -= taken
            self._count += taken
            if self.track_acks:
                self._unfinished.add_range(self._token + 1, self._token + taken + 1)
            self._token += taken
        if completed and (payload is None or reader.pos >= end):
            self._next_read_file()  # the end of a completed segment
        if self._read_file == self._write_file and self._read_pos >= self._write_pos:
            self._check_tail()

    def _has_unread(self) -> bool:
        if self._read_file != self._write_file:
            return self._read_file < self._write_file
        return self._read_pos < self._write_pos

    def _read_next(self) -> tuple[bytes, int] | None:
        reader = self._reader if self._reader is not None else self._open_reader()
        completed = self._read_file < self._write_file
        if completed:
            if reader.size is None:
                reader.size = os.fstat(reader.fd).st_size
            limit = reader.size
        else:
            limit = self._write_pos
        payload = reader.next(limit)
        if payload is None:  # the end of a completed segment
            self._next_read_file()
            return None
        start = self._read_pos
        self._read_pos = reader.pos
        self.depth -= 1
        self._count += 1
        self._token = token = self._token + 1
        if self.track_acks:
            self._acks.append((token, self._read_file, [start]))
            self._unfinished.add_range(token, token + 1)
        if completed and reader.pos >= limit:
            self._next_read_file()
        if self._read_file == self._write_file and self._read_pos >= self._write_pos:
            self._check_tail()
        return payload, token

    def _open_reader(self) -> _SegmentReader:
        path = self._segment_path(self._read_file)
        fd = os.open(path, os.O_RDONLY)
        self._reader = _SegmentReader(fd, self._read_pos, self.max_record_size)
        self._log.info("DISKQUEUE(%s): readOne() opened %s", self.name, path)
        return self._reader

    def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            os.close(reader.fd)

    def _next_read_file(self) -> None:
        """The read segment is consumed: move on, and delete it unless acks hold it."""
        old = self._read_file
        self._drop_reader()
        self._read_file += 1
        self._read_pos = 0
        self._force = True
        if self.track_acks:
            self._held.append(old)
        else:
            self._remove_consumed(old)

    def peek(self, size: int) -> bytes | None:
        """Up to ``size`` leading bytes of the next unread record, leaving it unread.

        For a cheap look at the head (the backlog-age alert): one ``pread``, through the
        reader's descriptor when it is open. None when nothing is unread or the head cannot be
        read; damage is left for ``read`` to find and handle.
        """
        if self._closed or not self.depth:
            return None
        num, pos = self._read_file, self._read_pos
        try:
            while num < self._write_file or (num == self._write_file and pos < self._write_pos):
                head = self._pread(num, pos, 4 + size)
                if len(head) < 4:  # the end of a completed segment: the head is in the next
                    num, pos = num + 1, 0
                    continue
                (length,) = _LEN.unpack_from(head)
                if length == 0 and num < self._write_file:  # a prepared segment's zeros
                    num, pos = num + 1, 0
                    continue
                if not MIN_MSG_SIZE <= length <= self.max_record_size:
                    return None
                return head[4 : 4 + min(length, size)]
        except OSError:
            return None
        return None

    def _pread(self, num: int, pos: int, size: int) -> bytes:
        reader = self._reader
        if reader is not None and num == self._read_file:
            return os.pread(reader.fd, size, pos)
        fd = os.open(self._segment_path(num), os.O_RDONLY)
        try:
            return os.pread(fd, size, pos)
        finally:
            os.close(fd)

    def finish(self, token: int) -> None:
        """The record read with ``token`` is done with (only with ``track_acks``)."""
        if self._unfinished.discard(token):
            self._moved = True

    def finish_many(self, tokens: list[int]) -> None:
        """``finish`` for a batch (a run of FINs): one call, no Python step each."""
        if self._unfinished.discard_many(tokens):
            self._moved = True

    # -- damage ------------------------------------------------------------------------
    def _end_at_zeros(self) -> bool:
        """A completed segment that ends in zeros where the next record would start is a
        prepared segment whose truncation had not reached the disk before an unclean stop:
        its data ends there (cut the zeros off and go on with the next segment). False for
        anything else, which is damage."""
        reader = self._reader
        if reader is None or self._read_file >= self._write_file:
            return False
        try:
            if not _zeros_from(reader.fd, reader.pos):
                return False
        except OSError:
            return False
        self._cut_zero_tail(self._segment_path(self._read_file), reader.pos)
        self._next_read_file()
        self._check_tail()
        return True

    def _handle_corruption(self, reason: str) -> None:
        bad = self._segment_path(self._read_file)
        bad_to = bad + ".bad"
        self._log.error(
            "DISKQUEUE(%s) reading at %d of %s - %s", self.name, self._read_pos, bad, reason
        )
        self._drop_reader()
        if self._read_file == self._write_file:
            self._drop_write_fd()  # the write segment cannot be trusted either
            self._write_file += 1
            self._write_pos = 0
        self._log.warning(
            "DISKQUEUE(%s) jump to next file and saving bad file as %s", self.name, bad_to
        )
        if self._rename_bad(bad, bad_to):
            self._read_file += 1
        else:  # missing: skip any run of missing segments at once
            self._read_file = self._next_present(self._read_file)
        self._read_pos = 0
        self._force = True
        if self._on_corruption is not None:
            self._on_corruption(
                f"DISKQUEUE({self.name}) {reason} in {bad}; "
                f"jump to next file and saving bad file as {bad_to}"
            )
        self._check_tail()

    def _rename_bad(self, path: str, to: str) -> bool:
        """Set a bad segment aside; False if it does not exist."""
        try:
            os.rename(path, to)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._log.error(
                "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s - %s",
                self.name,
                path,
                to,
                exc,
            )
        return True

    def _next_present(self, after: int) -> int:
        """The first segment present after ``after``, or the write segment."""
        later = (n for n in self._segments() if after < n < self._write_file)
        return next(later, self._write_file)

    def _check_tail(self) -> None:
        """Go's checkTailCorruption: once the reader has caught up, depth must be 0."""
        if self._has_unread():
            return
        if self.depth != 0:
            kind = "negative" if self.depth < 0 else "positive"
            cause = "metadata corruption" if self.depth < 0 else "data loss"
            self._log.error(
                "DISKQUEUE(%s) %s depth at tail (%d), %s, resetting 0...",
                self.name,
                kind,
                self.depth,
                cause,
            )
            self.depth = 0
            self._force = True
        if self._read_file != self._write_file or self._read_pos != self._write_pos:
            self._log.error(
                "DISKQUEUE(%s) read position %d,%d > write position %d,%d, corruption, "
                "skipping to next writeFileNum and resetting 0...",
                self.name,
                self._read_file,
                self._read_pos,
                self._write_file,
                self._write_pos,
            )
            self._skip_to_next_file()
            self._force = True

    def _skip_to_next_file(self) -> None:
        """Delete every segment of this queue and start both cursors on a fresh one."""
        self._drop_reader()
        self._drop_write_fd()
        segments = self._segments()
        for num in segments:
            self._remove_segment(num)
        self._write_file = self._read_file = max(self._read_file, self._write_file, *segments) + 1
        self._write_pos = self._read_pos = 0
        self.depth = 0
        self._acks.clear()
        self._unfinished.clear()
        self._held.clear()

    def _remove_segment(self, num: int) -> None:
        _remove_logged(self._segment_path(num), self._log, self.name)

    def _remove_consumed(self, num: int) -> None:
        """Delete (or keep as the spare) a segment both cursors have passed, on
        ``remove_later``'s thread if any."""
        path = self._segment_path(num)
        job = RemoveJob(path, self._fence, self._log, self.name, self._recycling)
        if self._remove_later is None:
            job.run()
        else:
            self._remove_later(job)

    # -- syncing -----------------------------------------------------------------------
    @property
    def needs_sync(self) -> bool:
        """``sync_every`` puts and reads since the last job, or a file boundary was crossed."""
        return self._force or (self._count > 0 and self._count >= self.sync_every)

    @property
    def dirty(self) -> bool:
        """Anything written, read or finished since the last sync job."""
        return self._force or self._moved or self._count > 0

    @property
    def needs_commit(self) -> bool:
        """Records were written that no job has fsynced yet (durable mode's commits)."""
        return self._unsynced

    def commit_job(self) -> SyncJob:
        """A job that only makes the written records durable: fdatasync of the data (the
        segments rolled away from too) and of the directory when a segment is new. Positions
        are left to ``position_job``/``sync_job``; a crash before one replays from older
        positions, which duplicates but never loses."""
        job = SyncJob(
            self._meta_path,
            None,  # no metadata written
            self._take_data_fds(),
            self.data_path if self._new_segment else None,
            self._fence,
            self._seq,
            data_only=True,
        )
        self._unsynced = self._new_segment = False
        return job

    def sync_job(self) -> SyncJob:
        """Snapshot the state to persist now; run the job on any thread, then ``sync_done``."""
        fds = self._take_data_fds()
        dir_path = self.data_path if self._new_segment else None
        self._seq += 1
        meta = self._persisted_meta()
        job = SyncJob(self._meta_path, meta, fds, dir_path, self._fence, self._seq)
        self._count = 0
        self._force = self._moved = self._new_segment = self._unsynced = False
        return job

    def position_job(self) -> SyncJob:
        """Durable mode's metadata write, off the commits publishers wait for: fdatasync the
        data (so the metadata is never ahead of it) and write the positions, leaving what
        ``commit_job`` owns (unsynced records, rolled segments, a new segment's directory
        entry) to it: this job answers no publisher, and its failure must not pass for one's
        commit. Segments its positions have passed are deleted once it completes."""
        try:
            fds = [os.dup(fd) for fd in self._rolled]
            if self._write_fd is not None:
                fds.append(os.dup(self._write_fd))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            raise DiskQueueError(f"failed to sync - {exc}") from exc
        dir_path = self.data_path if self._new_segment else None
        self._seq += 1
        job = SyncJob(
            self._meta_path,
            self._persisted_meta(),
            fds,
            dir_path,
            self._fence,
            self._seq,
            commits=False,
        )
        self._count = 0
        self._force = self._moved = False
        return job

    def _take_data_fds(self) -> list[int]:
        """What a committing job fsyncs: the rolled segments (the job owns their fds now)
        and a duplicate of the write fd (the queue may close its own while the job runs)."""
        try:
            dup = os.dup(self._write_fd) if self._write_fd is not None else None
        except OSError as exc:
            raise DiskQueueError(f"failed to sync - {exc}") from exc
        fds, self._rolled = self._rolled, []
        if dup is not None:
            fds.append(dup)
        return fds

    def _persisted_meta(self) -> _Meta:
        """The positions to write: with acks, the read position is the start of the oldest
        unfinished record and everything read since counts in the depth."""
        acks = self._acks
        if self._unfinished:
            oldest = self._unfinished.oldest()  # once per position job
            while acks[0][0] + len(acks[0][2]) <= oldest:
                acks.popleft()  # runs wholly finished
            first, read_file, starts = acks[0]
            read_pos = starts[oldest - first]
            depth = self.depth + self._token - oldest + 1
        else:
            acks.clear()
            read_file, read_pos, depth = self._read_file, self._read_pos, self.depth
        return _Meta(depth, read_file, read_pos, self._write_file, self._write_pos)

    def sync_done(self, job: SyncJob) -> None:
        """On the loop thread after ``job.run()`` (whether it worked or raised, or never ran):
        delete the segments its metadata has passed, or ask for another sync."""
        job.release()
        if not job.completed:
            self._force = True  # try again
            if job.commits:
                self._unsynced = True
                self._new_segment = self._new_segment or job.dir_path is not None
            return
        if job.data_only:
            return  # positions were not persisted: nothing may be deleted yet
        held = self._held
        while held and held[0] < job.read_file:
            self._remove_consumed(held.popleft())

    # -- prepared segments ---------------------------------------------------------------
    @property
    def needs_prepare(self) -> bool:
        """``prepare_segments``: the next segment should be prepared now (the write segment
        holds an eighth of ``max_bytes_per_file`` and none is prepared or under way)."""
        return (
            self._prepare_state == _UNPREPARED
            and self.prepare_segments
            and self._write_pos >= self._prepare_from
            and not self._closed
        )

    def prepare_from_pool(self) -> bool:
        """Meet ``needs_prepare`` with a segment of the store's pool, if one is ready and the
        queue has no spare of its own (a spare's zeros cost the disk less than a new file's):
        it becomes the prepared next segment at once, with no job."""
        pool = self._pool
        if pool is None or os.path.exists(self._spare_path):
            return False
        if not pool.take(self._prepared_path):
            return False
        self._prepare_state = _PREPARED
        return True

    def prepare_job(self, others_waiting: Callable[[], bool] | None = None) -> PrepareJob:
        """The job that prepares the next segment; run it on a worker thread, then
        ``prepare_done`` on this one. Until then a roll appends to a new file as usual. With
        ``others_waiting`` (whether more jobs wait for that thread) the job is paced."""
        self._prepare_state = _PREPARING
        pace = None
        if others_waiting is not None:
            pace = Pace(self._writer_at, self.max_bytes_per_file, others_waiting)
        return PrepareJob(
            self._prepared_path, self._prepare_size, self._fence, pace, self._spare_path
        )

    def _writer_at(self) -> tuple[int, int, bool]:
        """``Pace.writer``: called from a prepare job's thread."""
        return self._write_file, self._write_pos, self._zero_tail

    def prepare_done(self, job: PrepareJob) -> None:
        """On the loop thread after ``job.run()``, whether it worked or raised."""
        if self._closed:
            return
        if job.completed:
            self._prepare_state = _PREPARED
        else:  # not again before the next roll (a full disk would be asked on every write)
            self._prepare_state = _PREPARE_FAILED

    def sync_now(self) -> None:
        """Sync inline: ``sync_job().run()`` then ``sync_done``."""
        job = self.sync_job()
        job.run()
        self.sync_done(job)

    # -- lifecycle ---------------------------------------------------------------------
    def empty(self) -> None:
        """Go's Empty: drop everything queued (and outstanding acks); numbering continues."""
        self._log.info("DISKQUEUE(%s): emptying", self.name)
        self._skip_to_next_file()
        with self._fence.lock:
            self._fence.floor = self._seq + 1
            try:
                os.remove(self._meta_path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._log.error("DISKQUEUE(%s) failed to remove metadata file - %s", self.name, exc)
        self._count = 0
        self._force = self._moved = False

    def close(self) -> None:
        """Sync and close; the queue reopens where it stopped."""
        if self._closed:
            return
        self._log.info("DISKQUEUE(%s): closing", self.name)
        try:
            if self._zero_tail and self._write_fd is not None:
                # a prepared write segment: exact length before its last sync
                self._zero_tail = False
                try:
                    os.ftruncate(self._write_fd, self._write_pos)
                except OSError as exc:
                    self._log.error("DISKQUEUE(%s) failed to truncate - %s", self.name, exc)
            self.sync_now()
        finally:
            self._close_files()

    def delete(self) -> None:
        """Empty and close, leaving no file behind (in-flight jobs included)."""
        self._log.info("DISKQUEUE(%s): deleting", self.name)
        self.empty()
        with self._fence.lock:
            self._fence.floor = sys.maxsize
        self._close_files()

    def _close_files(self) -> None:
        self._closed = True
        with self._fence.lock:  # a prepare job under way removes its own file
            self._fence.closed = True
            if self.prepare_segments:
                _unlink_quietly(self._prepared_path)
                _unlink_quietly(self._spare_path)
        self._drop_reader()
        self._drop_write_fd()
        rolled, self._rolled = self._rolled, []
        for fd in rolled:
            os.close(fd)

    def _segment_path(self, num: int) -> str:
        return os.path.join(self.data_path, f"{self.name}.diskqueue.{num:06d}.dat")

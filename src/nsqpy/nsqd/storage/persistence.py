"""The daemon's side of the disk: opening queues, syncing them, group commit, nsqd.dat.

``DiskStore`` is the :class:`DiskHooks` the topics and channels report to. Syncs (fsync of the
data plus an atomic metadata write) run on worker threads so the event loop never waits for
the disk. A sync round takes every queue written since the last round; callbacks registered
with ``after_commit`` run when the round that covers them completes. In durable mode every
publish registers one, so all publishers waiting at that moment share one fsync per queue:
group commit.

Up to ``ROUNDS_IN_FLIGHT`` rounds run at once, each on a thread of its own. With one, a
publisher that arrived during a round waited for it to end and then for a round of its own;
two publishers that each wait for their OK (NSQ's request/response) fell into step, one per
round, each waiting about two rounds per publish. A round starts as soon as someone waits
and a thread is free; rounds are answered in the order they started, and a failed round
fails the rounds that started while it ran (they may have counted on its fsync of a new
segment's directory entry), so overlapping never answers a publish before its data and
everything it depends on is on stable storage.

In durable mode a round is a commit and nothing else: the data fdatasync of every queue written
since the last round (``DiskQueue.commit_job``: segments rolled away from and a new segment's
directory entry included), done by ``fsyncers``' workers, which need no GIL between the loop's
request and their answer. It starts at once, when a thread is free: from ``wrote``, as soon as
a queue has been written (the publisher, which hands its messages to consumers before it asks
for its commit, then joins that round: ``after_commit`` joins the newest round when nothing was
written since it started), or from ``after_commit``. Waiting for the end of the loop iteration
cost a publisher ~100 us, and starting only from ``after_commit`` another ~100 us of delivery
work. The one wait it makes is the commit linger (``linger.CommitLinger``, ``--commit-linger``):
while a publisher that was just answered, and usually comes back quickly, has not sent again, a
round that could start waits for it, up to the linger, so that one fdatasync covers both
publishes.

The positions (``--sync-every``, ``--sync-timeout``) go to a lane of their own, one
``position_job`` round at a time on a third thread that nobody waits for: in a commit round
they cost the publishers of that round, and of the rounds answered after it, a metadata write
with its own fsync and rename (1-4 ms on a busy disk) every few MPUBs. Positions only decide
what replays after a crash (duplicates, never loss); the rules that make that so still hold in
the lane: the metadata is written after an fdatasync of the data it describes, and a segment is
deleted only after a completed position round recorded a read position past it. A round
that --sync-every asks for starts ``POSITION_GAP`` after the last one ended at the soonest.

Durable queues also prepare their next segment ahead (``DiskQueue.prepare_job``: zeros,
synced, so that commits fdatasync overwrites rather than appends, which commit the
filesystem's journal too) on one more thread, ``nsqd-files``, that nobody waits for. Every
mode's queues delete their consumed segments there too (``RemoveJob``). A durable store also
keeps a ``SegmentPool`` of consumed segments zeroed for queues that have no prepared segment of
their own (a new topic's first segment); their zeros go in steps on the same thread, and only
while no commit has started for ``POOL_QUIET``.

``MetadataWriter`` writes ``nsqd.dat`` (the topic and channel list) on a thread of its own, as
nsqd does from a goroutine: a SUB or PUB that creates a topic or channel is answered without
waiting for the file's fsync, and neither is anyone else. Requests coalesce: the list is
snapshotted on the loop when a write starts, and changes made while it runs are written by
one more write after it, so a burst of creations costs one or two writes and the last state
always reaches the disk. In durable mode a commit also covers the nsqd.dat writes requested
before it (see ``DiskStore.after_commit``), so an acknowledged message is never left in a
queue that a restart would not open.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import Backend, DiskHooks
from nsqpy.nsqd.storage import metadata
from nsqpy.nsqd.storage.diskqueue import (
    PREPARE_MAX,
    DiskQueue,
    DiskQueueError,
    PrepareJob,
    RemoveJob,
    SyncJob,
)
from nsqpy.nsqd.storage.fsyncers import Fsyncers, dir_entry
from nsqpy.nsqd.storage.linger import CommitLinger
from nsqpy.nsqd.storage.segment_pool import SegmentPool, remove_stale

log = logging.getLogger("nsqpy.nsqd")

Commit = Callable[[bool], None]
RoundDone = Callable[[list[Exception], "_Round"], None]
#: Sync rounds allowed to run at once (one thread each).
ROUNDS_IN_FLIGHT = 2
#: Durable mode: the least time (s) from one position round's end to the start of the next
#: that --sync-every asks for. Reads and FINs count toward --sync-every as writes do, so under
#: PUB+SUB at 400k msg/s the default 2500 asked for ~320 rounds a second, back to back; each
#: one's file, fsync and rename took the GIL and the disk from the commits and cost 12 % of
#: the throughput. Positions only bound what a crash replays (never what it loses), and
#: --sync-timeout already lets them lag by seconds when traffic is light.
POSITION_GAP = 0.05
#: Durable mode: the pause (s) between two steps of zeros over a segment in the store's pool, which
#: leaves the files thread to the queues' own jobs (1 MB a step: a 100 MB segment in ~1 s)...
POOL_STEP_GAP = 0.01
#: ...and how long (s) no commit round may have started before a step: the pool is for queues
#: yet to come, and its zeros must not lengthen the flushes that publishers wait for now (a
#: fresh durable PUB+SUB that zeroed it while running was 2.8 % behind: docs/performance.md,
#: "Issue 21, twenty-first pass"). Under steady publishing it stays unfilled.
POOL_QUIET = 0.1


class _Round:
    """A sync round under way: its jobs, whom it answers, and how it ended."""

    __slots__ = ("dir_fds", "done", "errors", "jobs", "outstanding", "tainted", "waiting")

    def __init__(self, jobs: list[tuple[DiskQueue, SyncJob]], waiting: list[Commit]) -> None:
        self.jobs = jobs
        self.waiting = waiting
        self.done = False
        self.errors: list[Exception] = []
        self.tainted = False  # an older round failed while this one ran
        self.outstanding = 0  # durable: fsync requests not answered yet
        self.dir_fds: list[int] = []  # durable: directories opened for this round's fsyncs


class DiskStore(DiskHooks):
    """Opens disk queues under ``data_path`` and keeps them synced."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        data_path: str,
        *,
        max_bytes_per_file: int,
        max_msg_size: int,
        sync_every: int,
        sync_timeout: float,
        durable: bool,
        set_health: Callable[[str], None],
        position_gap: float = POSITION_GAP,
        commit_linger: float = 0.0,
    ) -> None:
        self.loop = loop
        self.data_path = data_path
        self.max_bytes_per_file = max_bytes_per_file
        # a record is the message (26 bytes of header + body) plus nsqpy's extensions
        self.max_record_size = max_msg_size + 26 + records.MAX_EXTENSION_SIZE
        self.sync_every = sync_every
        self.sync_timeout = sync_timeout
        self.durable = durable
        self.set_health = set_health
        self.position_gap = position_gap
        # durable: publishers just answered, whom a commit that could start waits for
        self._linger = CommitLinger(commit_linger if durable else 0.0)
        self._linger_timer: asyncio.TimerHandle | None = None  # starts the round it held
        self._after_hold: list[Callable[[float], None]] = []  # to run when it ends
        # durable mode: commits on GIL-free fsync workers, positions on a lane of their own;
        # otherwise rounds of full sync jobs on Python threads
        self._threads = None if durable else _SyncThreads(loop, ROUNDS_IN_FLIGHT, "nsqd-sync")
        self._fsyncers = Fsyncers(loop, ROUNDS_IN_FLIGHT, self._answered) if durable else None
        self._lane = _SyncThreads(loop, 1, "nsqd-positions") if durable else None
        # segment files' slow work, one job at a time, off every other path: durable mode's
        # prepared segments (zeros, synced), and every mode's removal of consumed segments
        self._files: ThreadPoolExecutor | None = None
        self._file_jobs = 0  # submitted to it and not done yet
        # durable: prepared segments for queues that have none of their own (segment_pool)
        self._pool: SegmentPool | None = None
        if durable:
            self._pool = SegmentPool(data_path, min(max_bytes_per_file, PREPARE_MAX))
        else:
            remove_stale(data_path)
        self._pool_timer: asyncio.TimerHandle | None = None  # its next look, or next step
        self._pool_stepping = False  # a step is on the files thread
        self._pool_seen = -1  # _last_id when the pool last looked for a quiet disk
        self._by_id: dict[int, _Round] = {}  # durable: rounds waiting for fsync answers
        self._last_id = 0
        self._lane_busy = False
        self._lane_next = 0.0  # durable: when the lane may start a --sync-every round
        self._lane_timer: asyncio.TimerHandle | None = None  # wakes _kick at _lane_next
        self._dirty: dict[int, DiskQueue] = {}  # positions (and, outside durable, data) to sync
        self._written: dict[int, DiskQueue] = {}  # durable: queues written since the last round
        self._waiting: list[Commit] = []
        self._rounds: deque[_Round] = deque()  # under way or unanswered, oldest first
        self._scheduled = False  # a round starts at the end of this loop iteration
        self._busy = 0  # rounds running (touched() asks on every read and FIN: keep it O(1))
        self._drained: asyncio.Future[None] | None = None  # close() waits for the rounds
        self._timer: asyncio.TimerHandle | None = None
        self._full_due = False  # the next round writes positions too (--sync-timeout)
        self._sync_due = False  # a queue reached --sync-every
        self._closed = False
        #: nsqd.dat's writer: a durable commit waits for the writes requested before it.
        self.metadata: MetadataWriter | None = None

    def open_queue(self, name: str) -> DiskQueue:
        return DiskQueue(
            name,
            self.data_path,
            max_bytes_per_file=self.max_bytes_per_file,
            max_record_size=self.max_record_size,
            sync_every=self.sync_every,
            track_acks=self.durable,
            prepare_segments=self.durable,
            log=log,
            on_corruption=self._corruption,
            remove_later=self._remove_later,
            pool=self._pool,
        )

    def _corruption(self, message: str) -> None:
        self.set_health(f"NOK - {message}")

    # -- DiskHooks -------------------------------------------------------------------------
    def wrote(self, backend: Backend) -> None:
        if not isinstance(backend, DiskQueue):
            return
        self._dirty[id(backend)] = backend
        if self.durable:
            self._written[id(backend)] = backend
            if backend.needs_prepare and not self._closed:
                self._prepare(backend)
            if self._may_start():
                # sync it now: its publisher joins this round (after_commit) once it has
                # handed the messages to consumers, instead of starting one after that
                self._commit_round()
        self.set_health("OK")
        if backend.needs_sync:
            self._sync_due = True
            self._kick()

    def touched(self, backend: Backend) -> None:
        if not isinstance(backend, DiskQueue):
            return
        self._dirty[id(backend)] = backend
        if backend.needs_sync:
            self._sync_due = True
            self._kick()

    def after_commit(self, callback: Commit, topic: str | None = None) -> None:
        """``callback(ok)`` once everything written so far is on stable storage, nsqd.dat
        included: as far as ``topic`` and its channels go when it is given, else all of it."""
        meta = self.metadata
        if meta is not None and (meta.pending if topic is None else meta.pending_for(topic)):
            # a topic or channel this commit's data needs may not be in nsqd.dat yet
            callback = _both(callback)
            meta.after_write(callback)
        if self.durable and not self._written and self._rounds:
            # nothing written since the newest round started: it covers this caller's data,
            # and rounds are answered in the order they started
            self._rounds[-1].waiting.append(callback)
            return
        self._waiting.append(callback)
        if not self.durable:
            self._kick()
        elif self._may_start():
            self._commit_round()  # what it waits for is written: start now (module docstring)
        elif self._linger_timer is None:
            self._kick()

    def holding(self) -> bool:
        return self._linger_timer is not None

    def after_hold(self, callback: Callable[[float], None]) -> None:
        self._after_hold.append(callback)

    def _hold_ended(self) -> None:
        """The linger's hold ended (its round started, it ran out, or the store closes): the
        channels hand out what they held back."""
        callbacks, self._after_hold = self._after_hold, []
        now = self.loop.time()
        for callback in callbacks:
            callback(now)

    def publisher_answered(self, key: int, now: float) -> None:
        self._linger.answered(key, now)

    def publisher_heard(self, key: int, now: float) -> None:
        self._linger.heard(key, now)

    def publisher_gone(self, key: int) -> None:
        self._linger.gone(key)

    def _may_start(self) -> bool:
        """Durable mode: whether a commit round may start now. Not while every fsync thread
        is busy or once closed; nor, for up to the linger, while a publisher that was just
        answered has not sent again (``CommitLinger``): a timer set here starts the round
        then, unless that publisher's write or a finished round starts it first."""
        if self._busy >= ROUNDS_IN_FLIGHT or self._closed:
            return False
        linger = self._linger
        if linger.linger <= 0 or not linger.expected(self.loop.time()):
            return True
        if self._linger_timer is None:
            self._linger_timer = self.loop.call_later(linger.linger, self._lingered)
        return False

    def _lingered(self) -> None:
        """The linger ran out: commit what is written, for whoever waits."""
        self._linger_timer = None
        if self._busy < ROUNDS_IN_FLIGHT and not self._closed and (self._waiting or self._written):
            self._commit_round()
        else:
            self._kick()
        if self._after_hold:  # no round could start: the held messages wait no longer
            self._hold_ended()

    def poll_commits(self) -> None:
        """Durable mode: take the fsync answers that came while this loop iteration ran.

        The daemon calls it just before it flushes its connections, and the TCP adapter at
        the end of every connection's read: a publisher whose commit completed meanwhile gets
        its OK then, not once the loop has gone through every other read and delivery of the
        iteration and polled its descriptors again. Under PUB+SUB a durable publish waited
        ~500 us for a ~200 us fdatasync. It reads only while a commit is out and a worker has
        flagged an answer (``Fsyncers.answers_ready``, no syscall)."""
        fsyncers = self._fsyncers
        if self._by_id and fsyncers is not None and fsyncers.answers_ready():
            fsyncers.read_answers()

    def write_failed(self, error: Exception) -> None:
        self.set_health(f"NOK - {error}")

    def _prepare(self, queue: DiskQueue) -> None:
        """Durable mode: prepare the queue's next segment on the preparing thread, so that
        its commits fdatasync overwrites of written blocks, not appends (which commit the
        filesystem's journal too). One thread: a job of a closed queue ends before the next
        job of a queue of the same name starts."""
        if queue.prepare_from_pool():
            return
        job = queue.prepare_job(self._file_jobs_waiting)
        future = self._file_job(job.run)
        future.add_done_callback(lambda f: self._prepared(queue, job, f))

    def _file_job(self, run: Callable[[], None]) -> asyncio.Future[None]:
        """``run`` on the files thread; counted until it is done (``_file_jobs_waiting``)."""
        self._file_jobs += 1
        future = self.loop.run_in_executor(self._file_worker(), run)
        future.add_done_callback(self._file_job_done)
        return future

    def _file_job_done(self, future: asyncio.Future[None]) -> None:
        self._file_jobs -= 1

    def _file_jobs_waiting(self) -> bool:
        """Whether a job waits behind the one the files thread runs (asked from that thread:
        the count is only changed on the loop, and a stale answer only moves a pause)."""
        return self._file_jobs > 1

    def _file_worker(self) -> ThreadPoolExecutor:
        if self._files is None:
            self._files = ThreadPoolExecutor(1, thread_name_prefix="nsqd-files")
        return self._files

    def _remove_later(self, job: RemoveJob) -> None:
        """A consumed segment goes on the files thread (an inline unlink of a full 100 MB
        segment stalled the loop ~20 ms). Inline once the store is closing: its files thread
        is being shut down (or never started), and a stop is not the hot path."""
        if self._closed:
            job.run()
        else:
            self._file_job(job.run).add_done_callback(self._fill_pool)

    def _fill_pool(self, _: object = None) -> None:
        """Zero the pooled segment a removal may have offered, a step at a time on the files
        thread, ``POOL_STEP_GAP`` apart, and only after ``POOL_QUIET`` without a commit."""
        pool = self._pool
        if pool is None or not pool.filling or self._closed:
            return
        if self._pool_timer is not None or self._pool_stepping:
            return
        if self._last_id != self._pool_seen:  # a commit since the last look (or no look yet)
            self._pool_seen = self._last_id
            self._pool_timer = self.loop.call_later(POOL_QUIET, self._pool_resume)
            return
        self._pool_stepping = True
        self._file_job(pool.fill_step).add_done_callback(self._pool_stepped)

    def _pool_stepped(self, future: asyncio.Future[None]) -> None:
        self._pool_stepping = False
        error = None if future.cancelled() else future.exception()
        if error is not None:  # that segment is gone; another may still be filling
            log.error("DISKQUEUE failed to prepare a pooled segment - %s", error)
        if self._pool is not None and self._pool.filling and not self._closed:
            self._pool_timer = self.loop.call_later(POOL_STEP_GAP, self._pool_resume)

    def _pool_resume(self) -> None:
        self._pool_timer = None
        self._fill_pool()

    def _prepared(self, queue: DiskQueue, job: PrepareJob, future: asyncio.Future[None]) -> None:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            log.error("DISKQUEUE(%s) %s", queue.name, error)
        queue.prepare_done(job)

    # -- sync rounds -----------------------------------------------------------------------
    def start(self) -> None:
        self._timer = self.loop.call_later(self.sync_timeout, self._tick)

    def _tick(self) -> None:
        """--sync-timeout: sync whatever is dirty even if --sync-every was not reached."""
        if self._dirty:
            self._full_due = True
            self._kick()
        if not self._closed:
            self._timer = self.loop.call_later(self.sync_timeout, self._tick)

    def _kick(self) -> None:
        """Start a round (at the end of this loop iteration) if there is work and a thread
        for it: waiting publishers, a queue past --sync-every, or the --sync-timeout tick."""
        if self._scheduled or self._closed:
            return
        rounds_free = self._busy < ROUNDS_IN_FLIGHT
        due = self._sync_due or self._full_due
        if self.durable:
            positions = due and not self._lane_busy and self._lane_open()
            work = (rounds_free and bool(self._waiting)) or positions
        else:
            work = rounds_free and (bool(self._waiting) or due)
        if work:
            self._scheduled = True
            self.loop.call_soon(self._step)

    def _step(self) -> None:
        self._scheduled = False
        if not self.durable:
            if self._busy < ROUNDS_IN_FLIGHT:
                self._round()
        else:
            due = self._sync_due or self._full_due
            if due and not self._lane_busy and self._lane_open():
                self._positions()
            if self._waiting and self._busy < ROUNDS_IN_FLIGHT and self._linger_timer is None:
                self._commit_round()
        self._maybe_drained()

    def _lane_open(self) -> bool:
        """Durable mode: whether a position round may start now (``POSITION_GAP``); when it
        may not, a timer kicks once it may. The --sync-timeout tick does not wait."""
        if self._full_due:
            return True
        wait = self._lane_next - self.loop.time()
        if wait <= 0:
            return True
        if self._lane_timer is None:
            self._lane_timer = self.loop.call_later(wait, self._lane_reopened)
        return False

    def _lane_reopened(self) -> None:
        self._lane_timer = None
        self._kick()

    def _round(self) -> None:
        """One sync round outside durable mode: data and positions of every dirty queue
        that is due (all of them on the --sync-timeout tick)."""
        full_due, self._full_due = self._full_due, False
        self._sync_due = False
        jobs: list[tuple[DiskQueue, SyncJob]] = []
        for queue in list(self._dirty.values()):
            if full_due or queue.needs_sync:
                if queue.dirty:
                    jobs.append((queue, queue.sync_job()))
                del self._dirty[id(queue)]
        self._submit(jobs)

    def _commit_round(self) -> None:
        """Durable mode: a round that makes every queue written so far durable and answers
        whoever waits (positions are the lane's). Its fsyncs go to the GIL-free workers,
        spread over them when the round holds several queues."""
        assert self._fsyncers is not None
        if self._linger_timer is not None:  # this round takes what the linger held
            self._linger_timer.cancel()
            self._linger_timer = None
        jobs: list[tuple[DiskQueue, SyncJob]] = []
        written, self._written = self._written, {}
        this = _Round(jobs, [])
        try:
            jobs += [(q, q.commit_job()) for q in written.values() if q.needs_commit]
            fds: list[int] = []
            for _, job in jobs:
                fds += job.data_fds
                if job.dir_path is not None:
                    fd = os.open(job.dir_path, os.O_RDONLY)
                    this.dir_fds.append(fd)
                    fds.append(dir_entry(fd))
        except (OSError, DiskQueueError) as err:
            this.errors.append(err)
            fds = []
        this.waiting, self._waiting = self._waiting, []
        self._rounds.append(this)
        self._busy += 1
        self._last_id = self._last_id % 0x7FFFFFFF + 1
        this.outstanding = self._fsyncers.submit(self._last_id, fds)
        if this.outstanding:
            self._by_id[self._last_id] = this
        else:  # nothing to sync (or it failed before any): answered in turn, not re-entrantly
            self.loop.call_soon(self._committed, this)
        if self._after_hold:  # what the channels held goes out while the disk flushes
            self._hold_ended()

    def _answered(self, request_id: int, failed: int) -> None:
        """An fsync worker's answer (on the loop)."""
        this = self._by_id[request_id]
        if failed:
            this.errors.append(DiskQueueError(f"failed to sync - {os.strerror(failed)}"))
        this.outstanding -= 1
        if not this.outstanding:
            del self._by_id[request_id]
            self._committed(this)

    def _committed(self, this: _Round) -> None:
        for fd in this.dir_fds:
            os.close(fd)
        for _, job in this.jobs:
            job.completed = not this.errors
        self._round_done(this.errors, this)

    def _submit(self, jobs: list[tuple[DiskQueue, SyncJob]]) -> None:
        assert self._threads is not None
        waiting, self._waiting = self._waiting, []
        this = _Round(jobs, waiting)
        self._rounds.append(this)
        self._busy += 1
        self._threads.submit([j for _, j in jobs], self._round_done, this)

    def _positions(self) -> None:
        """Durable mode: write the positions of the queues that are due, on the lane."""
        assert self._lane is not None
        full_due, self._full_due = self._full_due, False
        self._sync_due = False
        jobs: list[tuple[DiskQueue, SyncJob]] = []
        for queue in list(self._dirty.values()):
            if full_due or queue.needs_sync:
                if queue.dirty:
                    jobs.append((queue, queue.position_job()))
                del self._dirty[id(queue)]
        if jobs:
            self._lane_busy = True
            self._lane.submit([j for _, j in jobs], self._positions_done, _Round(jobs, []))

    def _positions_done(self, errors: list[Exception], this: _Round) -> None:
        self._lane_busy = False
        self._lane_next = self.loop.time() + self.position_gap
        for queue, job in this.jobs:
            queue.sync_done(job)  # deletes the segments passed, or asks for another sync
        if errors:
            log.error("DISKQUEUE sync failed - %s", errors[0])
            self.set_health(f"NOK - {errors[0]}")
        self._maybe_drained()
        self._kick()

    def _round_done(self, errors: list[Exception], this: _Round) -> None:
        this.done = True
        this.errors = errors
        self._busy -= 1
        for queue, job in this.jobs:
            queue.sync_done(job)  # always: a failed job asks for another sync
        if errors:
            log.error("DISKQUEUE sync failed - %s", errors[0])
            self.set_health(f"NOK - {errors[0]}")
            started_after = False
            for other in self._rounds:  # those started while this one ran
                other.tainted = other.tainted or started_after
                started_after = started_after or other is this
        rounds = self._rounds
        while rounds and rounds[0].done:  # answer in the order the rounds started
            head = rounds.popleft()
            ok = not head.errors and not head.tainted
            for callback in head.waiting:
                callback(ok)
        self._maybe_drained()
        if self.durable and self._waiting and not self._closed:
            self._commit_round()  # those who came meanwhile: this thread is free now
        else:
            self._kick()

    def _maybe_drained(self) -> None:
        drained = self._drained
        if drained is None or drained.done():
            return
        if not self._rounds and not self._scheduled and not self._lane_busy:
            drained.set_result(None)

    async def close(self, queues: list[DiskQueue]) -> None:
        """Finish the sync rounds under way, then close every queue (each syncs itself)."""
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
            if self._busy < ROUNDS_IN_FLIGHT and (self._waiting or self._written):
                self._commit_round()  # a round the linger held commits, not fails
        if self._after_hold:  # no round could start: the hold ends all the same
            self._hold_ended()
        self._closed = True
        for timer in (self._timer, self._lane_timer):
            if timer is not None:
                timer.cancel()
        if self._rounds or self._scheduled or self._lane_busy:
            self._drained = self.loop.create_future()
            await self._drained
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback(False)  # nothing commits after close: those publishers get an error
        await self.loop.run_in_executor(None, _close_all, queues)
        for workers in (self._threads, self._fsyncers, self._lane):
            if workers is not None:
                workers.stop()
        if self._pool_timer is not None:
            self._pool_timer.cancel()
            self._pool_timer = None
        files, self._files = self._files, None
        if files is not None:  # a prepare job under way removes its file (its queue is closed)
            await self.loop.run_in_executor(None, files.shutdown)
        if self._pool is not None:
            self._pool.close()


class _SyncThreads:
    """The threads sync rounds run on. A round's end is handed straight to the loop
    (``call_soon_threadsafe``), without concurrent.futures' and asyncio's futures in
    between: each of those took a loop iteration of a publisher's wait."""

    def __init__(self, loop: asyncio.AbstractEventLoop, count: int, name: str) -> None:
        self.loop = loop
        self._work: SimpleQueue[tuple[list[SyncJob], RoundDone, _Round] | None] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, jobs: list[SyncJob], done: RoundDone, round_: _Round) -> None:
        self._work.put((jobs, done, round_))

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            jobs, done, round_ = item
            errors = _run_jobs(jobs)
            self.loop.call_soon_threadsafe(done, errors, round_)

    def stop(self) -> None:
        """End the threads once the work given them is done (waits for them)."""
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join()


def _run_jobs(jobs: list[SyncJob]) -> list[Exception]:
    """Run every job (one failing must not stop the others); return the failures."""
    errors: list[Exception] = []
    for job in jobs:
        try:
            job.run()
        except (OSError, DiskQueueError) as err:
            errors.append(err)
    return errors


def _close_all(queues: list[DiskQueue]) -> None:
    for queue in queues:
        queue.close()


def _both(callback: Commit) -> Commit:
    """A commit callback to give to two waiters: ``callback`` runs once both have answered,
    with True only if both succeeded."""
    answers: list[bool] = []

    def one(ok: bool) -> None:
        answers.append(ok)
        if len(answers) == 2:
            callback(all(answers))

    return one


class MetadataWriter:
    """Writes nsqd.dat off the event loop, coalescing requests (see the module docstring).

    ``snapshot`` returns the file's bytes (called on the loop when a write starts); ``write``
    puts them on disk (called on the worker thread; ``metadata.write_file`` by default, tests
    pass a slow or failing one). A failed write is logged, as nsqd does, and the next request
    or ``close`` writes again.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        data_path: str,
        snapshot: Callable[[], bytes],
        write: Callable[[str, bytes], None] = metadata.write_file,
    ) -> None:
        self.loop = loop
        self.data_path = data_path
        self.snapshot = snapshot
        self.write = write
        self._executor: ThreadPoolExecutor | None = None
        self._requested = 0  # number of the latest request
        self._written = 0  # requests up to this number are on disk (or their write failed)
        self._scheduled = False  # a write starts at the end of this loop iteration
        self._running: asyncio.Future[None] | None = None
        self._waiters: list[tuple[int, Commit]] = []
        self._topics: dict[str, int] = {}  # topic -> latest request about it or its channels
        self.writes = 0  # writes started (tests see the coalescing)

    @property
    def pending(self) -> bool:
        """A requested state is not on disk yet."""
        return self._requested > self._written

    def pending_for(self, topic: str) -> bool:
        """A change to ``topic`` or one of its channels is not on disk yet."""
        return self._topics.get(topic, 0) > self._written

    def request(self, topic: str | None = None) -> None:
        """The topic/channel list changed (``topic`` or one of its channels, if given): write
        it soon, once for a whole burst."""
        self._requested += 1
        if topic is not None:
            self._topics[topic] = self._requested
        if not self._scheduled and self._running is None:
            self._scheduled = True
            self.loop.call_soon(self._start)

    def after_write(self, callback: Commit) -> None:
        """``callback(ok)`` once the state as of now is on disk; at once if it is."""
        if not self.pending:
            callback(True)
            return
        self._waiters.append((self._requested, callback))

    async def written(self) -> bool:
        """Wait until the state as of now is on disk (False if that write failed)."""
        done: asyncio.Future[bool] = self.loop.create_future()

        def answer(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)

        self.after_write(answer)
        return await done

    def _start(self) -> None:
        self._scheduled = False
        if self._running is not None or not self.pending:
            return
        covers = self._requested
        data = self.snapshot()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="nsqd-metadata")
        self.writes += 1
        self._running = self.loop.create_future()
        job = self.loop.run_in_executor(self._executor, self.write, self.data_path, data)
        job.add_done_callback(lambda f: self._done(f, covers))

    def _done(self, job: asyncio.Future[None], covers: int) -> None:
        error = job.exception()
        ok = error is None
        if error is not None:
            log.error("%s", error)
        self._written = max(self._written, covers)
        self._topics = {t: n for t, n in self._topics.items() if n > covers}
        waiters, self._waiters = self._waiters, []
        for number, callback in waiters:
            if number <= covers:
                callback(ok)
            else:
                self._waiters.append((number, callback))
        running, self._running = self._running, None
        if running is not None:
            running.set_result(None)
        if self.pending:
            self._start()  # what changed while this write ran

    async def close(self, snapshot: Callable[[], bytes] | None = None) -> None:
        """Wait for the write under way, then write the latest state (always, so that a clean
        stop leaves nsqd.dat as it is now; ``snapshot`` instead of the usual one if given);
        the writer can be used again afterwards."""
        while self._running is not None:
            await self._running
        self._scheduled = False
        covers = self._requested
        data = (snapshot or self.snapshot)()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="nsqd-metadata")
        executor = self._executor
        self._executor = None
        try:
            await self.loop.run_in_executor(executor, self.write, self.data_path, data)
            ok = True
        except (metadata.MetadataError, OSError) as err:
            log.error("%s", err)
            ok = False
        finally:
            executor.shutdown(wait=True)
        self._written = max(self._written, covers)
        self._topics.clear()
        waiters, self._waiters = self._waiters, []
        for _, callback in waiters:
            callback(ok)

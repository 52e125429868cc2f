"""The daemon's side of the disk: opening queues, syncing them, group commit.

``DiskStore`` is the :class:`DiskHooks` the topics and channels report to. Syncs (fsync of the
data plus an atomic metadata write) run on one worker thread so the event loop never waits for
the disk. A sync round takes every queue written since the last round; callbacks registered
with ``after_commit`` run when the round that covers them completes. In durable mode every
publish registers one, so all publishers waiting at that moment share one fsync per queue:
group commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from nsqpy.nsqd import records
from nsqpy.nsqd.backend import Backend, DiskHooks
from nsqpy.nsqd.diskqueue import DiskQueue, DiskQueueError, SyncJob

log = logging.getLogger("nsqpy.nsqd")

Commit = Callable[[bool], None]


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
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="nsqd-sync")
        self._dirty: dict[int, DiskQueue] = {}
        self._waiting: list[Commit] = []
        self._running: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._full_due = False  # the next round writes positions too (--sync-timeout)
        self._sync_due = False  # a queue reached --sync-every
        self._closed = False

    def open_queue(self, name: str) -> DiskQueue:
        return DiskQueue(
            name,
            self.data_path,
            max_bytes_per_file=self.max_bytes_per_file,
            max_record_size=self.max_record_size,
            sync_every=self.sync_every,
            track_acks=self.durable,
            log=log,
            on_corruption=self._corruption,
        )

    def _corruption(self, message: str) -> None:
        self.set_health(f"NOK - {message}")

    # -- DiskHooks -------------------------------------------------------------------------
    def wrote(self, backend: Backend) -> None:
        if not isinstance(backend, DiskQueue):
            return
        self._dirty[id(backend)] = backend
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

    def after_commit(self, callback: Commit) -> None:
        self._waiting.append(callback)
        self._kick()

    def write_failed(self, error: Exception) -> None:
        self.set_health(f"NOK - {error}")

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
        """Start a round if none runs and there is work: waiting publishers, a queue past
        --sync-every, or the --sync-timeout tick."""
        if self._running is not None or self._closed:
            return
        if self._waiting or self._sync_due or self._full_due:
            self._running = self.loop.create_future()
            self.loop.call_soon(self._round)

    def _round(self) -> None:
        """One sync round. In durable mode a round that only serves waiting publishers fsyncs
        just the data; positions (metadata) are written on --sync-every / --sync-timeout."""
        full_due, self._full_due = self._full_due, False
        self._sync_due = False
        jobs: list[tuple[DiskQueue, SyncJob]] = []
        for queue in list(self._dirty.values()):
            if full_due or not self.durable or queue.needs_sync:
                if queue.dirty:
                    jobs.append((queue, queue.sync_job()))
                del self._dirty[id(queue)]
            elif queue.needs_commit:
                jobs.append((queue, queue.commit_job()))  # stays dirty for the next full sync
        waiting, self._waiting = self._waiting, []
        future = self.loop.run_in_executor(self._executor, _run_jobs, [j for _, j in jobs])
        future.add_done_callback(lambda f: self._round_done(f, jobs, waiting))

    def _round_done(
        self,
        future: asyncio.Future[list[Exception]],
        jobs: list[tuple[DiskQueue, SyncJob]],
        waiting: list[Commit],
    ) -> None:
        errors = future.result()
        for queue, job in jobs:
            queue.sync_done(job)  # always: a failed job asks for another sync
        ok = not errors
        if not ok:
            log.error("DISKQUEUE sync failed - %s", errors[0])
            self.set_health(f"NOK - {errors[0]}")
        running, self._running = self._running, None
        for callback in waiting:
            callback(ok)
        if running is not None:
            running.set_result(None)
        self._kick()

    async def close(self, queues: list[DiskQueue]) -> None:
        """Finish the sync round under way, then close every queue (each syncs itself)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._running is not None:
            await self._running
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback(False)  # nothing commits after close: those publishers get an error
        await self.loop.run_in_executor(self._executor, _close_all, queues)
        self._executor.shutdown(wait=True)


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

"""The NSQ side of the ``nsq`` source: connections and held messages, without pyspark.

An ``Ingest`` lives in the one process that may own NSQ connections (Spark's driver-side
streaming source runner, or the batch planner). It runs nsqpy's asyncio ``Consumer`` on a
``LoopThread``; all of its mutable state belongs to that loop thread:

* the consumer's handler appends each message to the inbox (no answer: the message is held);
* ``take`` runs on the loop as a coroutine and hands the caller a list of messages, which is
  then registered as held until ``finish`` or ``shutdown`` answers it;
* a timer TOUCHes held messages that get close to their timeout.

The caller's thread only ever receives finished lists, so no lock is needed anywhere.
Messages are FINished on the connection that delivered them (NSQ refuses anything else).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final

import aiohttp

from nsqpy.client.connection import NsqdConnection
from nsqpy.client.consumer import Consumer
from nsqpy.client.discovery import LookupdError, query_lookupd
from nsqpy.client.errors import NSQError
from nsqpy.client.message import Message
from nsqpy.client.sync import LoopThread
from nsqpy.spark.options import ReadOptions

log = logging.getLogger("nsqpy.spark")

#: After the first message of an empty inbox arrives, wait while messages keep coming (no gap
#: longer than this), so that a fresh connection's first batch is not a handful of messages...
LINGER: Final = 0.05
#: ... but no longer than this in all, and not once a batch's worth is waiting. Without these
#: bounds a steady stream (messages less than LINGER apart) held the trigger until nsqd had
#: sent maxInFlight messages: 21 s for the first batch of a live archive at 40k msg/s.
SETTLE_LIMIT: Final = 0.25
#: How long connecting (IDENTIFY, SUB, first lookupd round) may take before the query fails.
START_TIMEOUT: Final = 30.0


class SourceUnavailableError(ConnectionError):
    """No nsqd or nsqlookupd could be reached: the query fails with this message."""


@dataclass(slots=True)
class IngestStats:
    received: int = 0
    admitted: int = 0
    finished: int = 0
    fin_failed: int = 0  # FIN could not be sent (connection gone): nsqd will redeliver
    requeued: int = 0
    touched: int = 0
    deferred_after_cut: int = 0  # published after an AvailableNow/batch cut: not admitted
    rdy_capped: list[str] = field(default_factory=list)  # nsqd whose --max-rdy-count binds


@dataclass(slots=True)
class _Held:
    """Messages admitted together, and the oldest time any of them was delivered or touched."""

    msgs: list[Message]
    since: float


class Ingest:
    """One consumer's worth of held NSQ messages (see the module docstring)."""

    def __init__(self, opts: ReadOptions, settle_limit: float = SETTLE_LIMIT) -> None:
        self.opts = opts
        self._settle_limit = settle_limit
        self.stats = IngestStats()
        self._thread: LoopThread | None = None
        self._consumer: Consumer | None = None
        self._inbox: deque[Message] = deque()
        self._inbox_since: float | None = None
        self._held: deque[_Held] = deque()
        self._later = _Held([], 0.0)
        self._arrived: asyncio.Event | None = None
        self._touch_timer: asyncio.TimerHandle | None = None
        self._stopping = False
        self._shut = threading.Event()  # set once a shutdown has run to its end
        self._first_shutdown = threading.Lock()  # taken (never given back) by the first one

    # --- lifecycle (caller's thread) ---------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Connect now; raises SourceUnavailableError when nothing can be reached."""
        if self._thread is not None:
            return
        thread = LoopThread()
        try:
            self._consumer = thread.run(self._open(), timeout=START_TIMEOUT)
        except BaseException:
            thread.stop()
            raise
        self._thread = thread

    def shutdown(self, *, requeue: bool, timeout: float = 2.0) -> None:
        """RDY 0, then REQ every held message (``requeue``), CLS, close. Idempotent.

        A call while another thread's shutdown is under way waits for it (up to the same
        bound): a SIGTERM handler exits the process right after its call, which must not cut
        off the REQs of a shutdown that Spark's end of stream started a moment before.
        """
        thread = self._thread
        if thread is None:
            return
        if not self._first_shutdown.acquire(blocking=False):  # atomic, even in a handler
            self._shut.wait(timeout + 1.0)
            return
        try:
            thread.run(self._close_marked(requeue, timeout), timeout=timeout + 1.0)
        finally:
            thread.stop()
            self._shut.set()  # also when the close never ran (the loop thread was gone)

    # --- messages (caller's thread) ------------------------------------------------------------

    def take(
        self, max_count: int, max_bytes: int, wait: float, cut_ns: int | None = None
    ) -> list[Message]:
        """Up to ``max_count`` messages (and ``max_bytes`` of bodies, at least one message).

        Waits up to ``wait`` seconds for a first message when the inbox is empty, then a little
        longer while more arrive (at most ``SETTLE_LIMIT``, or until ``max_count`` are waiting,
        or ``wait``, whichever is least). Messages
        published after ``cut_ns`` (wall-clock ns) are held back rather than returned.
        The returned messages stay held (and touched) until ``finish`` or ``shutdown``.
        """
        assert self._thread is not None, "start() first"
        return self._thread.run(self._take(max_count, max_bytes, wait, cut_ns))

    def pause(self) -> None:
        """RDY 0 everywhere: nsqd sends nothing more (messages already sent still arrive)."""
        assert self._thread is not None, "start() first"
        self._thread.run(self._pause())

    def available(self) -> int:
        """Messages waiting in the inbox (a snapshot: the loop thread keeps appending)."""
        return len(self._inbox)

    def finish(self, msgs: Sequence[Message]) -> None:
        """FIN ``msgs`` with one hop to the loop; never raises (failures are counted)."""
        if not msgs or self._thread is None or self._first_shutdown.locked():
            return
        total = len(msgs)
        future = self._thread.finish_many(msgs)

        def account(fut: Future[int]) -> None:
            # runs on the loop thread, which owns the stats
            sent = 0 if fut.cancelled() or fut.exception() is not None else fut.result()
            self.stats.finished += sent
            self.stats.fin_failed += total - sent
            if sent < total:
                log.warning("nsq source: %d of %d FINs could not be sent (connection lost); "
                            "nsqd will redeliver them", total - sent, total)

        future.add_done_callback(account)

    # --- loop thread -----------------------------------------------------------------------------

    async def _open(self) -> Consumer:
        opts = self.opts
        if opts.lookupd:
            await _probe_lookupds(opts)
        self._arrived = asyncio.Event()
        consumer = Consumer(
            opts.topic,
            opts.channel,
            nsqd_tcp_addresses=list(opts.nsqd),
            lookupd_http_addresses=list(opts.lookupd),
            config=opts.client_config(),
            handler=self._on_message,
        )
        await consumer.start()
        if opts.nsqd and not consumer.connections:
            reason = await _probe_nsqd(opts)
            await consumer.close(0.1)
            raise SourceUnavailableError(
                f"nsq source: cannot connect to any nsqd of {list(opts.nsqd)} "
                f"for topic {opts.topic!r}: {reason}"
            )
        self._check_rdy(consumer)
        self._schedule_touch()
        return consumer

    def _check_rdy(self, consumer: Consumer) -> None:
        conns = consumer.connections
        if not conns:
            return
        share = self.opts.max_in_flight // len(conns)
        for address, conn in conns.items():
            if conn.settings.max_rdy_count < share:
                self.stats.rdy_capped.append(address)
                log.warning(
                    "nsq source: nsqd %s caps RDY at %d (--max-rdy-count) but maxInFlight=%d "
                    "asks %d per connection; start nsqd with --max-rdy-count=%d or more",
                    address, conn.settings.max_rdy_count, self.opts.max_in_flight, share, share,
                )

    def _on_message(self, msg: Message) -> None:
        # The hot path: one append per message, the answer comes much later.
        msg.disable_auto_response()
        if self._stopping:
            msg.requeue(0, backoff=False)
            return
        if self._inbox_since is None:
            self._inbox_since = time.monotonic()
        self._inbox.append(msg)
        arrived = self._arrived
        if arrived is not None and not arrived.is_set():
            arrived.set()

    async def _take(
        self, max_count: int, max_bytes: int, wait: float, cut_ns: int | None
    ) -> list[Message]:
        self._prune()
        if not self._inbox and wait > 0:
            await self._wait_first(wait, max_count)
        since = self._inbox_since or time.monotonic()
        msgs = self._pop(max_count, max_bytes, cut_ns)
        if not self._inbox:
            self._inbox_since = None
        if msgs:
            self._held.append(_Held(msgs, since))
            self.stats.admitted += len(msgs)
        return msgs

    async def _wait_first(self, wait: float, max_count: int) -> None:
        arrived = self._arrived
        assert arrived is not None
        arrived.clear()
        try:
            async with asyncio.timeout(wait):
                await arrived.wait()
        except TimeoutError:
            return
        # a burst may be arriving (typically a fresh connection): let it settle, but within
        # bounds, since a steady stream never pauses for LINGER
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(self._settle_limit, wait)
        inbox = self._inbox
        size = -1
        while size != len(inbox) and len(inbox) < max_count:
            left = deadline - loop.time()
            if left <= 0:
                return
            size = len(inbox)
            await asyncio.sleep(min(LINGER, left))

    def _pop(self, max_count: int, max_bytes: int, cut_ns: int | None) -> list[Message]:
        inbox = self._inbox
        count = min(max_count, len(inbox))
        if cut_ns is None:
            out = [inbox.popleft() for _ in range(count)]
            return _trim_bytes(out, max_bytes, inbox)
        out = []
        later = self._later
        size = 0
        while inbox and len(out) < max_count:
            msg = inbox.popleft()
            if msg.timestamp > cut_ns:
                if not later.msgs:
                    later.since = time.monotonic()
                later.msgs.append(msg)
                self.stats.deferred_after_cut += 1
                continue
            size += len(msg.body)
            if out and size > max_bytes:
                inbox.appendleft(msg)
                break
            out.append(msg)
        return out

    # --- touching ------------------------------------------------------------------------------

    def _schedule_touch(self) -> None:
        loop = asyncio.get_running_loop()
        self._touch_timer = loop.call_later(self.opts.msg_timeout / 4, self._touch_tick)

    def _touch_tick(self) -> None:
        """TOUCH every held group whose oldest message passed half its timeout.

        Ticks come every msg_timeout/4, so no message gets older than 3/4 of its timeout
        untouched; groups are touched whole, so each message costs at most one TOUCH per tick.
        """
        if self._stopping:
            return
        now = time.monotonic()
        old = now - self.opts.msg_timeout / 2
        self._prune()
        for group in [*self._held, self._later]:
            if group.msgs and group.since < old:
                self._touch(group.msgs)
                group.since = now
        if self._inbox_since is not None and self._inbox_since < old:
            self._touch(list(self._inbox))
            self._inbox_since = now
        self._schedule_touch()

    def _prune(self) -> None:
        """Forget FINished batches (commit answers whole batches, oldest first)."""
        held = self._held
        while held and held[0].msgs[0].responded:
            held.popleft()

    def _touch(self, msgs: Sequence[Message]) -> None:
        for msg in msgs:
            if not msg.responded:
                msg.touch()
                self.stats.touched += 1

    # --- shutdown --------------------------------------------------------------------------------

    async def _pause(self) -> None:
        if self._consumer is not None:
            for conn in self._consumer.connections.values():
                conn.set_rdy(0)

    async def _close_marked(self, requeue: bool, drain_limit: float) -> None:
        """``_close``, then ``_shut`` set from the loop thread: the caller's thread may be the
        one a SIGTERM handler interrupted, waiting for this shutdown until it has returned."""
        try:
            await self._close(requeue, drain_limit)
        finally:
            self._shut.set()

    async def _close(self, requeue: bool, drain_limit: float) -> None:
        self._stopping = True
        if self._touch_timer is not None:
            self._touch_timer.cancel()
        consumer = self._consumer
        if consumer is None:
            return
        # RDY 0 first: a REQ to a connection that still has RDY comes straight back to it
        await self._pause()
        unanswered = self._unanswered()
        if requeue:
            for msg in unanswered:
                msg.requeue(0, backoff=False)
            self.stats.requeued += len(unanswered)
        # without requeue the held messages time out in nsqd: do not wait for answers
        await consumer.close(drain_limit if requeue else 0.0)

    def _unanswered(self) -> list[Message]:
        groups = [g.msgs for g in self._held] + [self._later.msgs, list(self._inbox)]
        self._inbox.clear()
        return [m for msgs in groups for m in msgs if not m.responded]


def _trim_bytes(out: list[Message], max_bytes: int, inbox: deque[Message]) -> list[Message]:
    """Cut ``out`` to ``max_bytes`` of bodies (keeping at least one); the rest go back."""
    total = 0
    for i, msg in enumerate(out):
        total += len(msg.body)
        if total > max_bytes and i > 0:
            inbox.extendleft(reversed(out[i:]))
            return out[:i]
    return out


async def _probe_lookupds(opts: ReadOptions) -> None:
    """Fail fast when no lookupd answers (an unknown topic is fine: it may come later)."""
    timeout = aiohttp.ClientTimeout(total=5.0)
    errors: list[str] = []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for address in opts.lookupd:
            try:
                await query_lookupd(session, address, opts.topic)
                return
            except LookupdError as exc:
                errors.append(str(exc))
    raise SourceUnavailableError(
        f"nsq source: no nsqlookupd reachable for topic {opts.topic!r}: {'; '.join(errors)}"
    )


async def _probe_nsqd(opts: ReadOptions) -> str:
    """Why the first nsqd could not be used (the pool only logs it)."""
    try:
        conn = await NsqdConnection.open(opts.nsqd[0], opts.client_config())
    except (NSQError, ValueError) as exc:
        return str(exc)
    conn.close()
    return "connected on retry; check nsqd's log"

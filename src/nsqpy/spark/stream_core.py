"""What the streaming reader does in the driver-side runner, without pyspark types.

Spark's calls, in the order a micro-batch sees them::

    latestOffset(start)  -> take messages from the inbox, number them seq+1..seq+n, hold them
    partitions(start, end) -> the held messages of (start, end] as payloads for the executors
    ... the sink writes and commits batch N, Spark writes commits/N ...
    latestOffset (batch N+1), then commit(end_N) -> FIN batch N's messages

So a message is FINished only after the sink committed it: at-least-once. When no new message
arrives but a batch still waits for its commit, ``latest`` moves ``tick`` on to make Spark run one
empty batch, whose planning commits the previous one (see offsets.py).
"""

from __future__ import annotations

import gc
import logging
import time

from nsqpy.client.message import Message
from nsqpy.spark import payload
from nsqpy.spark.ingest import Ingest
from nsqpy.spark.limits import Limits
from nsqpy.spark.offsets import Offset
from nsqpy.spark.options import ReadOptions
from nsqpy.spark.shutdown import install_sigterm

log = logging.getLogger("nsqpy.spark")


class StreamCore:
    def __init__(self, opts: ReadOptions, ingest: Ingest | None = None) -> None:
        self.opts = opts
        self.ingest = ingest if ingest is not None else Ingest(opts)
        #: admitted, not yet committed: (start seq, end seq) -> messages
        self.pending: dict[tuple[int, int], list[Message]] = {}
        self.cut_ns: int | None = None
        self.replay_unknown = 0
        self._last_batch_at = time.monotonic()
        self._signal_installed = False

    def prepare_available_now(self) -> None:
        """AvailableNow: only messages published before now belong to this run."""
        self.cut_ns = time.time_ns()

    def latest(self, start: Offset, limits: Limits) -> Offset:
        self._start()
        for (first, last) in self.pending:
            if first == start.seq:
                return Offset(last, start.tick)  # asked again for a batch not yet planned
        msgs = self._admit(limits)
        if msgs:
            end = start.advanced(len(msgs))
            self.pending[(start.seq, end.seq)] = msgs
            self._last_batch_at = time.monotonic()
            return end
        if self.pending and self.opts.commit_tick:
            return start.ticked()
        return start

    def partitions(self, start: Offset, end: Offset) -> list[payload.Payload]:
        if start.seq == end.seq:
            return []
        msgs = self.pending.get((start.seq, end.seq))
        if msgs is None:
            # a batch planned by an earlier run of the query (replayed from the offset log):
            # its messages went back to nsqd with that run and arrive again as new ones
            self.replay_unknown += 1
            log.warning("nsq source: batch (%d, %d] is not held by this run (replay after a "
                        "restart?); it is empty, its messages are redelivered by nsqd",
                        start.seq, end.seq)
            return []
        opts = self.opts
        return payload.split(
            msgs, payload.body_bytes(msgs), opts.num_partitions, opts.topic, opts.channel
        )

    def commit(self, end: Offset) -> None:
        done = sorted(key for key in self.pending if key[1] <= end.seq)
        msgs = [m for key in done for m in self.pending.pop(key)]
        try:
            self.ingest.finish(msgs)
        except Exception:  # last line of defence: Spark fails the query on a commit error,
            # while a lost FIN only means that nsqd redelivers the messages
            self.ingest.stats.fin_failed += len(msgs)
            log.exception("nsq source: FIN of %d messages failed; nsqd will redeliver them",
                          len(msgs))

    def stop(self) -> None:
        self.ingest.shutdown(requeue=self.opts.requeue_on_stop)

    # --- internals -------------------------------------------------------------------------------

    def _start(self) -> None:
        if self.ingest.started:
            return
        _tune_gc()
        self.ingest.start()
        if not self._signal_installed:
            self._signal_installed = install_sigterm(self.stop)

    def _admit(self, limits: Limits) -> list[Message]:
        opts = self.opts
        if limits.min_count and self.ingest.available() < limits.min_count:
            waited = time.monotonic() - self._last_batch_at
            if waited < opts.max_trigger_delay:
                return []
        # a batch waiting for its commit needs the tick now; otherwise an idle source may wait
        wait = 0.0 if self.pending else opts.poll_timeout
        return self.ingest.take(limits.max_count, limits.max_bytes, wait, self.cut_ns)


def _tune_gc() -> None:
    """Collect young objects far less often in the runner process, which is ours alone.

    It holds up to maxInFlight messages and creates and drops ~100k per second; with the default
    threshold (700) the cyclic collector ran every few hundred messages and rescanned the held
    ones, which took a third of the runner's time in a profile. Messages form no cycles.
    """
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 50_000), max(gen1, 20), max(gen2, 100))

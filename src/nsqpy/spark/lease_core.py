"""What the streaming reader does in the driver-side runner when it reads through leases.

The driver only plans; the executors read their leases from nsqd themselves. Spark's calls::

    latestOffset(start)    -> FIN start's leases, then reserve batch N+1's leases (sizes only)
    partitions(start, end) -> one task per group of end's leases (no I/O)
    read(partition)        -> on an executor: fetch those leases from their nsqd (lease_read.py)
    commit(end)            -> FIN end's leases (done already, see below)

Spark asks ``latestOffset(start)`` only once the batch that ends at ``start`` is in the
checkpoint's commit log (it runs one batch at a time and writes the commit log at the end of
each), so ``start``'s leases are committed and are FINished right there: the last batch of a
run needs no commit tick, and a restarted query FINishes what its predecessor committed but
did not live to FIN. A batch planned but not committed is re-run by Spark from the offset log
with the same lease names: nsqd hands the same messages to the re-run, so a sink that writes a
batch once (the Parquet file sink) holds each message exactly once, as long as the leases' TTL
has not passed (docs/spark.md, "Exactly once").
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nsqpy.spark import lease_plan
from nsqpy.spark.lease_plan import Ask
from nsqpy.spark.limits import Limits
from nsqpy.spark.offsets import LeaseOffset, LeaseRef, Offset
from nsqpy.spark.options import ReadOptions

log = logging.getLogger("nsqpy.spark")

#: FINished batches remembered, so that commit(end) after latestOffset(end) sends nothing.
_REMEMBERED: int = 16


class ClosedName(Exception):
    """nsqd refused a lease name as closed (finished or requeued): see ``LeaseCore._plan``."""


@dataclass(slots=True)
class Finished:
    """What a round of LEASE_FINs came to."""

    done: int = 0  # leases FINished (or found FINished already)
    gone: list[LeaseRef] = field(default_factory=list)  # expired or lost before their FIN
    failed: list[LeaseRef] = field(default_factory=list)  # not sent: the nsqd was unreachable


class Links(Protocol):
    """The planner's side of the network (``lease_links.LeaseLinks``; a fake in tests)."""

    def caps(self) -> dict[str, int]:
        """Reachable nsqds of the topic and the largest lease each allows."""
        ...

    def reserve(
        self, asks: Sequence[Ask], *, wait: float, ttl: float, before_ns: int
    ) -> list[LeaseRef]:
        """One LeaseRef per ask (count 0: empty or unreachable); ClosedName if one is closed."""
        ...

    def prefetch(self, asks: Sequence[Ask], *, ttl: float, before_ns: int) -> None:
        """Reserve ``asks`` at once (no wait) in the background; errors are only logged."""
        ...

    def finish(self, leases: Sequence[LeaseRef]) -> Finished: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class LeaseStats:
    batches: int = 0
    leases: int = 0
    messages: int = 0
    finished: int = 0
    expired: int = 0  # messages whose lease was gone at its FIN: read again, at-least-once
    fin_failed: int = 0


def new_token() -> str:
    return secrets.token_hex(6)


class LeaseCore:
    def __init__(self, opts: ReadOptions, links: Links, token: str) -> None:
        self.opts = opts
        self.links = links
        #: the query token of batches planned from a driver-side (v1) start, or after a clash
        self.token = token
        self.cut_ns = 0
        self.stats = LeaseStats()
        self._planned: tuple[LeaseOffset | Offset, LeaseOffset] | None = None
        self._caps: dict[str, int] = {}
        self._finished: list[tuple[str, int]] = []
        self._retry: list[LeaseRef] = []

    def prepare_available_now(self) -> None:
        """AvailableNow: leases take only messages published before now."""
        self.cut_ns = time.time_ns()

    def latest(self, start: LeaseOffset | Offset, limits: Limits) -> LeaseOffset | None:
        """Batch N+1's leases after ``start`` (committed: FINished here), or None if none came."""
        if isinstance(start, LeaseOffset):
            self.finish(start)
        self._finish_retries()
        if self._planned is not None and self._planned[0] == start:
            return self._planned[1]  # asked again for a batch already planned
        query, batch = (start.query, start.batch) if isinstance(start, LeaseOffset) else (
            self.token, 0)  # fmt: skip
        try:
            leases = self._plan(query, batch + 1, limits)
        except ClosedName:
            # a name of this batch was used before (the leases of a crashed planner that
            # expired): plan it under a new token rather than wait for nsqd to forget them
            query = self.token = new_token()
            log.warning("nsq source: batch %d's lease names are taken; planning it as %s",
                        batch + 1, query)  # fmt: skip
            leases = self._plan(query, batch + 1, limits)
        if not leases:
            return None
        end = LeaseOffset(query, batch + 1, tuple(leases))
        self._planned = (start, end)
        self.stats.batches += 1
        self.stats.leases += len(leases)
        self.stats.messages += end.count
        self._prefetch(query, batch + 2, limits)
        return end

    def _prefetch(self, query: str, batch: int, limits: Limits) -> None:
        """Reserve the next batch's leases while Spark runs this one: nsqd fills them off the
        critical path, and the next plan asks for the same names and finds them sealed (nsqd
        gives a lease back as it is). Should the query stop first, they are a crashed plan's
        leases: the next run asks for them, or they expire."""
        asks = lease_plan.asks(query, batch, self._caps, limits, self.opts.num_partitions)
        if asks:
            self.links.prefetch(asks, ttl=self.opts.lease_ttl, before_ns=self.cut_ns)

    def partitions(self, end: LeaseOffset) -> list[lease_plan.LeaseSplit]:
        return lease_plan.splits(end.leases, self.opts.num_partitions)

    def finish(self, end: LeaseOffset) -> None:
        """FIN ``end``'s leases, once; never raises (a lost FIN means a redelivery, counted)."""
        key = (end.query, end.batch)
        if not end.leases or key in self._finished:
            return
        self._finished = [*self._finished[-_REMEMBERED + 1 :], key]
        self._account(self.links.finish(end.leases))

    def stop(self) -> None:
        # Nothing to hand back: a batch planned but not known to be committed keeps its leases
        # for the next run (which re-runs or FINishes it) until their TTL.
        self.links.close()

    # --- internals -------------------------------------------------------------------------------

    def _plan(self, query: str, batch: int, limits: Limits) -> list[LeaseRef]:
        """Reserve the batch's leases at once; if all come back empty, wait for messages in
        steps of one waiting lease per nsqd, up to ``pollTimeout``; then reserve them all.
        Under AvailableNow a run that has taken a batch does not wait."""
        opts = self.opts
        self._caps = self.links.caps()
        planned = lease_plan.asks(query, batch, self._caps, limits, opts.num_partitions)
        if not planned:
            time.sleep(opts.poll_timeout)  # no nsqd (yet): do not spin
            return []
        got = self._reserve(planned, 0.0)
        if not got and self.cut_ns and self.stats.batches:
            # AvailableNow, once the run has taken a batch: nsqd has just answered for its
            # whole queue, and later messages are not this run's, so the run ends here rather
            # than after pollTimeout. (Not at the first trigger: a message published just before
            # the cut may still be on its way from the topic to the channel.)
            return got
        deadline = time.monotonic() + opts.poll_timeout
        firsts = lease_plan.firsts(planned)
        while not got and (left := deadline - time.monotonic()) > 0:
            if self._reserve(firsts, min(lease_plan.WAIT_STEP, left)):
                got = self._reserve(planned, 0.0)  # the sealed first ones come back as they are
        return got

    def _reserve(self, asks: Sequence[Ask], wait: float) -> list[LeaseRef]:
        refs = self.links.reserve(asks, wait=wait, ttl=self.opts.lease_ttl, before_ns=self.cut_ns)
        return [ref for ref in refs if ref.count > 0]

    def _finish_retries(self) -> None:
        """FINs that could not be sent are tried once more, at the next trigger."""
        if self._retry:
            retry, self._retry = self._retry, []
            self._account(self.links.finish(retry), retry=False)

    def _account(self, result: Finished, *, retry: bool = True) -> None:
        stats = self.stats
        stats.finished += result.done
        if result.gone:
            lost = sum(ref.count for ref in result.gone)
            stats.expired += lost
            log.warning(
                "nsq source: %d lease(s) holding %d messages were gone before their FIN (their "
                "TTL, leaseTTL=%gs, passed, or nsqd restarted): nsqd delivers those messages "
                "again, so they may be written twice", len(result.gone), lost, self.opts.lease_ttl,
            )  # fmt: skip
        if result.failed:
            log.warning("nsq source: %d LEASE_FIN(s) could not be sent%s", len(result.failed),
                        "; trying again at the next trigger" if retry else
                        ": their leases expire after leaseTTL and are read again")  # fmt: skip
            stats.fin_failed += len(result.failed)
            if retry:
                self._retry.extend(result.failed)

"""The lease planner's connections: one ``LeaseConnection`` per nsqd of the topic.

They run on a ``LoopThread`` in the driver-side runner. Each connection SUBscribes to the
topic and channel with RDY 0, as the driver-side consumer would: that creates them in nsqd (a
lease never creates its channel) and lists the query among the channel's clients, while no
message is ever sent to it. nsqds come from the ``nsqd`` option, or from the ``lookupd``s,
asked again every ``nsq.lookupd_poll_interval`` (and at every trigger while none is known).

A connection that fails is dropped and opened again when next needed; meanwhile its nsqd gets
no leases (its messages wait) and the FINs meant for it are tried again at the next trigger.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Final, TypeVar

import aiohttp

from nsqpy.client.discovery import LookupdError, query_lookupd
from nsqpy.client.errors import LeaseError, NSQError
from nsqpy.client.leases import LeaseConnection
from nsqpy.client.sync import LoopThread
from nsqpy.spark.ingest import START_TIMEOUT, SourceUnavailableError
from nsqpy.spark.lease_core import ClosedName, Finished
from nsqpy.spark.lease_plan import Ask
from nsqpy.spark.offsets import LeaseRef
from nsqpy.spark.options import ReadOptions

log = logging.getLogger("nsqpy.spark")

#: How long a round of commands may take beyond its wait before its connections are dropped.
IO_TIMEOUT: Final = 30.0
#: An nsqd that could not be reached is tried again after this long, not at every trigger (a
#: dial that times out would slow every batch down).
RECONNECT_INTERVAL: Final = 5.0
_CLOSED: Final = frozenset({"E_LEASE_FINISHED", "E_LEASE_REQUEUED"})

T = TypeVar("T")


class LeasesUnsupportedError(RuntimeError):
    """An nsqd of the query has no leases (Go nsqd) while the query reads through leases."""


class LeaseLinks:
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._config = opts.client_config()
        self._thread: LoopThread | None = None
        self._conns: dict[str, LeaseConnection] = {}
        self._addresses: list[str] = list(opts.nsqd)
        self._looked_up = -math.inf
        #: nsqds that answered IDENTIFY without leases
        self.unsupported: set[str] = set()
        self._errors: dict[str, str] = {}  # why an nsqd could not be reached, last time
        self._retry_at: dict[str, float] = {}  # when to try an unreachable nsqd again
        #: fail (True: the query reads through leases) or only note an nsqd without leases
        self.strict = False

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect to every nsqd known now; SourceUnavailableError when none can be reached."""
        if self._thread is None:
            self._thread = LoopThread()
        self._run(self._connect_all(), START_TIMEOUT)
        if self.opts.nsqd and not self._conns and not self.unsupported:
            raise SourceUnavailableError(
                f"nsq source: cannot connect to any nsqd of {list(self.opts.nsqd)} "
                f"for topic {self.opts.topic!r}: {'; '.join(self._errors.values())}"
            )

    @property
    def known(self) -> list[str]:
        """The nsqds of the topic found so far (lookupd may add more later)."""
        return list(self._addresses)

    def close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        for conn in self._conns.values():
            thread.call(conn.close)
        self._conns.clear()
        thread.stop()

    # --- Links ---------------------------------------------------------------------------------

    def caps(self) -> dict[str, int]:
        self._run(self._connect_all(), START_TIMEOUT)
        return {a: c.settings.max_rdy_count for a, c in self._conns.items() if not c.closed}

    def reserve(
        self, asks: Sequence[Ask], *, wait: float, ttl: float, before_ns: int
    ) -> list[LeaseRef]:
        try:
            return self._run(self._reserve_all(asks, wait, ttl, before_ns), wait + IO_TIMEOUT)
        except TimeoutError:
            log.warning("nsq source: reserving leases took over %gs; reconnecting", IO_TIMEOUT)
            self._drop({ask.nsqd for ask in asks})
            return [LeaseRef(a.nsqd, a.name, 0, 0) for a in asks]

    def prefetch(self, asks: Sequence[Ask], *, ttl: float, before_ns: int) -> None:
        if self._thread is not None:
            asyncio.run_coroutine_threadsafe(self._prefetch(asks, ttl, before_ns),
                                             self._thread.loop)  # fmt: skip

    async def _prefetch(self, asks: Sequence[Ask], ttl: float, before_ns: int) -> None:
        try:
            await _bounded(self._reserve_all(asks, 0.0, ttl, before_ns), IO_TIMEOUT)
        except (ClosedName, TimeoutError, NSQError, OSError) as exc:  # the next plan asks again
            log.info("nsq source: reserving the next batch ahead failed: %r", exc)

    def finish(self, leases: Sequence[LeaseRef]) -> Finished:
        try:
            return self._run(self._finish_all(leases), IO_TIMEOUT)
        except TimeoutError:
            log.warning("nsq source: LEASE_FIN took over %gs; reconnecting", IO_TIMEOUT)
            self._drop({ref.nsqd for ref in leases})
            return Finished(failed=list(leases))

    def _drop(self, nsqds: set[str]) -> None:
        """Close connections whose answers are late: a late answer would be taken for the
        answer to the next command."""
        thread = self._thread
        for nsqd in nsqds:
            conn = self._conns.pop(nsqd, None)
            if conn is not None and thread is not None:
                thread.call(conn.close)

    # --- loop thread ---------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        if self._thread is None:
            self._thread = LoopThread()
        return self._thread.run(_bounded(coro, timeout))

    async def _connect_all(self) -> None:
        await self._look_up()
        now = time.monotonic()
        missing = [a for a in self._addresses
                   if a not in self.unsupported and self._retry_at.get(a, 0.0) <= now
                   and (a not in self._conns or self._conns[a].closed)]
        await asyncio.gather(*(self._connect(a) for a in missing))  # fmt: skip

    async def _connect(self, address: str) -> None:
        opts = self.opts
        try:
            conn = await LeaseConnection.open(address, self._config)
        except (NSQError, OSError, ValueError) as exc:
            log.warning("nsq source: cannot connect to nsqd %s: %s", address, exc)
            self._errors[address] = str(exc)
            self._retry_at[address] = time.monotonic() + RECONNECT_INTERVAL
            return
        if not conn.leases_supported:
            conn.close()
            self.unsupported.add(address)
            if self.strict:
                raise LeasesUnsupportedError(
                    f"nsq source: nsqd {address} has no leases (Go nsqd?) but this query reads "
                    "through leases; restart it with mode=driver (mode=auto then chooses it)"
                )
            return
        try:
            await conn.subscribe(opts.topic, opts.channel)  # RDY stays 0
        except NSQError as exc:
            conn.close()
            log.warning("nsq source: SUB on nsqd %s failed: %s", address, exc)
            return
        self._conns[address] = conn

    async def _look_up(self) -> None:
        opts = self.opts
        interval = self._config.lookupd_poll_interval
        if not opts.lookupd or (self._addresses and time.monotonic() - self._looked_up < interval):
            return
        self._looked_up = time.monotonic()
        errors: list[str] = []
        found: set[str] = set()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
            for lookupd in opts.lookupd:
                try:
                    found.update(await query_lookupd(session, lookupd, opts.topic))
                except LookupdError as exc:
                    errors.append(str(exc))
        if len(errors) == len(opts.lookupd):
            if not self._addresses:
                raise SourceUnavailableError(
                    f"nsq source: no nsqlookupd reachable for topic {opts.topic!r}: "
                    + "; ".join(errors)
                )
            log.warning("nsq source: no nsqlookupd answered: %s", "; ".join(errors))
            return
        # an nsqd that lookupd no longer lists keeps its connection: it may still hold leases
        self._addresses = sorted(set(self._addresses) | found)

    async def _reserve_all(
        self, asks: Sequence[Ask], wait: float, ttl: float, before_ns: int
    ) -> list[LeaseRef]:
        by_nsqd: dict[str, list[int]] = {}
        for i, ask in enumerate(asks):
            by_nsqd.setdefault(ask.nsqd, []).append(i)
        out = [LeaseRef(a.nsqd, a.name, 0, 0) for a in asks]
        rounds = [self._reserve_on(n, [asks[i] for i in idx], wait, ttl, before_ns)
                  for n, idx in by_nsqd.items()]  # fmt: skip
        for idx, refs in zip(by_nsqd.values(), await asyncio.gather(*rounds), strict=True):
            for i, ref in zip(idx, refs, strict=True):
                out[i] = ref
        return out

    async def _reserve_on(
        self, nsqd: str, asks: list[Ask], wait: float, ttl: float, before_ns: int
    ) -> list[LeaseRef]:
        empty = [LeaseRef(a.nsqd, a.name, 0, 0) for a in asks]
        conn = self._conns.get(nsqd)
        if conn is None or conn.closed:
            return empty
        limit = conn.settings.max_msg_timeout
        replies = await asyncio.gather(
            *(self._reserve_one(conn, a, min(wait, limit), min(ttl, limit), before_ns)
              for a in asks),
            return_exceptions=True,
        )  # fmt: skip
        out = []
        for ask, reply in zip(asks, replies, strict=True):
            if isinstance(reply, ClosedName):
                raise reply
            if isinstance(reply, BaseException):
                log.warning("nsq source: reserving lease %s on nsqd %s failed: %s", ask.name,
                            nsqd, reply)  # fmt: skip
                conn.close()  # opened (and SUBscribed) again at the next trigger
                return empty
            out.append(reply)
        return out

    async def _reserve_one(
        self, conn: LeaseConnection, ask: Ask, wait: float, ttl: float, before_ns: int
    ) -> LeaseRef:
        topic, channel = self.opts.topic, self.opts.channel
        try:
            got = await conn.reserve(topic, channel, ask.name, count=ask.count,
                                     max_bytes=ask.max_bytes, wait=wait, ttl=ttl,
                                     before_ns=before_ns)  # fmt: skip
        except LeaseError as err:
            if err.code in _CLOSED:
                raise ClosedName(ask.name) from err
            if err.code != "E_LEASE_MISMATCH":
                raise
            # planned before with other limits (a crashed run's): take it as it is
            got = await conn.reserved(topic, channel, ask.name)
        return LeaseRef(ask.nsqd, ask.name, got.count, got.size)

    async def _finish_all(self, leases: Sequence[LeaseRef]) -> Finished:
        result = Finished()
        replies = await asyncio.gather(*(self._finish_one(ref) for ref in leases),
                                       return_exceptions=True)  # fmt: skip
        for ref, reply in zip(leases, replies, strict=True):
            if reply is None:
                result.done += 1
            elif isinstance(reply, LeaseError) and reply.gone and reply.code != "E_LEASE_FINISHED":
                result.gone.append(ref)
            elif isinstance(reply, LeaseError) and reply.code == "E_LEASE_FINISHED":
                result.done += 1  # FINished before (a retry, or another run)
            else:
                log.warning("nsq source: LEASE_FIN %s on nsqd %s failed: %s", ref.name,
                            ref.nsqd, reply)  # fmt: skip
                result.failed.append(ref)
        return result

    async def _finish_one(self, ref: LeaseRef) -> None:
        conn = self._conns.get(ref.nsqd)
        if conn is None or conn.closed:
            await self._connect(ref.nsqd)
            conn = self._conns.get(ref.nsqd)
            if conn is None:
                raise NSQError(f"nsqd {ref.nsqd} is unreachable")
        await conn.finish_lease(self.opts.topic, self.opts.channel, ref.name)


async def _bounded(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    async with asyncio.timeout(seconds):
        return await coro

"""``spark.readStream.format("nsq")``: the pyspark face of the two ways to read.

* Lease mode (``LeaseCore``): the driver plans each micro-batch as leases in nsqd and the
  executors read them; exactly-once into the Parquet file sink (docs/spark.md).
* Driver-side mode (``StreamCore``): the driver receives every message and ships it to the
  executors inside the partitions; at-least-once. The only way with Go nsqd.

``mode=auto`` (the default) reads through leases when every nsqd of the query says
``"leases": true`` in its IDENTIFY reply, else driver-side, which is logged once; the choice
is made at the first offset call of each run. Each way accepts the other's offsets, so a query
can change its way at a restart.

Spark builds this reader twice: in the driver-side runner process, which then calls
``latestOffset``/``partitions``/``commit`` on that one object for the whole run, and in a planner
worker, which pickles it for the executors' ``read``. So nothing may connect in ``__init__`` (the
planner's copy would subscribe and grab messages nobody answers) and the reader must pickle
without its connections: the cores are created on first use and never pickled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from nsqpy.spark import lease_plan, payload
from nsqpy.spark.lease_core import LeaseCore, new_token
from nsqpy.spark.lease_links import LeaseLinks
from nsqpy.spark.lease_plan import LeaseSplit
from nsqpy.spark.lease_read import read_split
from nsqpy.spark.limits import Limits
from nsqpy.spark.offsets import LeaseOffset, Offset, parse_any
from nsqpy.spark.options import ReadOptions
from nsqpy.spark.stream_core import StreamCore

log = logging.getLogger("nsqpy.spark")

LEASE = "lease"
DRIVER = "driver"


class NsqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._token = new_token()
        self._reset()

    def _reset(self) -> None:
        self._mode: str | None = None
        self._core: StreamCore | None = None
        self._leases: LeaseCore | None = None
        self._cut_ns: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_opts": self._opts, "_token": self._token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._opts = state["_opts"]
        self._token = state["_token"]
        self._reset()

    @property
    def core(self) -> StreamCore:
        if self._core is None:
            self._core = StreamCore(self._opts)
            if self._cut_ns is not None:
                self._core.cut_ns = self._cut_ns
        return self._core

    # --- driver-side runner --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        if self._opts.mode == DRIVER:
            return Offset().to_json()
        return LeaseOffset(self._token).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # only messages published before now belong to this run, whichever way it reads
        self._cut_ns = time.time_ns()
        if self._core is not None:
            self._core.cut_ns = self._cut_ns
        if self._leases is not None:
            self._leases.cut_ns = self._cut_ns

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        parsed = parse_any(start)
        mode = self._decide()
        limits = limits_for(limit, self._opts)
        if mode is None:  # auto, and lookupd lists no nsqd for the topic yet
            time.sleep(self._opts.poll_timeout)
            return start
        if mode == LEASE:
            assert self._leases is not None
            end = self._leases.latest(parsed, limits)
            return start if end is None else end.to_json()
        driver_start = self._driver_start(parsed)
        driver_end = self.core.latest(driver_start, limits)
        return start if driver_end == driver_start else driver_end.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        parsed_end = parse_any(end)
        if isinstance(parsed_end, LeaseOffset):  # also a batch of an earlier run, re-run
            return [InputPartition(split)
                    for split in lease_plan.splits(parsed_end.leases, self._opts.num_partitions)]
        payloads = self.core.partitions(self._driver_start(parse_any(start), settle=False),
                                        parsed_end)  # fmt: skip
        return [InputPartition(p) for p in payloads]

    def commit(self, end: dict[str, Any]) -> None:
        # Never raises: a failed FIN means a redelivery (counted), not a failed query.
        parsed = parse_any(end)
        if isinstance(parsed, LeaseOffset):
            self._settler().finish(parsed)
        elif self._core is not None:
            self._core.commit(parsed)

    def stop(self) -> None:
        if self._core is not None:
            self._core.stop()
        if self._leases is not None:
            self._leases.stop()

    # --- executors -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition.value, LeaseSplit):
            yield from read_split(self._opts, partition.value)
        else:
            yield payload.to_record_batch(partition.value)

    # --- the way to read -------------------------------------------------------------------------

    def _decide(self) -> str | None:
        """This run's way to read, decided at its first offset call (see the module docstring);
        None while ``mode=auto`` finds no nsqd to ask (lookupd does not list the topic yet)."""
        if self._mode is not None:
            return self._mode
        opts = self._opts
        if opts.mode == DRIVER:
            return self._chose(DRIVER, "mode=driver")
        if opts.mode == "auto" and opts.min_records_per_batch:
            return self._chose(DRIVER, "minRecordsPerBatch is set")
        links = LeaseLinks(opts)
        links.strict = opts.mode == LEASE
        try:
            links.start()
        except BaseException:
            links.close()
            raise
        if links.unsupported:
            links.close()
            names = ", ".join(sorted(links.unsupported))
            return self._chose(DRIVER, f"nsqd {names} has no leases (Go nsqd?)")
        if not links.known and opts.mode == "auto":
            links.close()
            return None
        links.strict = True  # from now on an nsqd without leases fails the query
        self._leases = LeaseCore(opts, links, self._token)
        if self._cut_ns is not None:
            self._leases.cut_ns = self._cut_ns
        return self._chose(LEASE, f"every nsqd of {links.known} has leases")

    def _chose(self, mode: str, why: str) -> str:
        self._mode = mode
        if mode == LEASE:
            log.info("nsq source: topic %r reads through nsqd leases (%s): exactly-once into "
                        "the Parquet file sink", self._opts.topic, why)  # fmt: skip
        else:
            log.warning("nsq source: topic %r reads driver-side (%s): at-least-once",
                        self._opts.topic, why)  # fmt: skip
        return mode

    def _settler(self) -> LeaseCore:
        """Who FINs lease batches: the lease core, or in a driver-side run one made for the
        lease batches left by an earlier run that read through leases."""
        if self._leases is None:
            links = LeaseLinks(self._opts)
            self._leases = LeaseCore(self._opts, links, self._token)
        return self._leases

    def _driver_start(self, start: Offset | LeaseOffset, settle: bool = True) -> Offset:
        """A driver-side run's start: a lease offset (an earlier run's) counts from 0, and its
        leases are committed: FIN them."""
        if isinstance(start, Offset):
            return start
        if settle:
            self._settler().finish(start)
        return Offset()


def limits_for(limit: ReadLimit, opts: ReadOptions) -> Limits:
    """Spark passes our own default limit, or ReadAllAvailable (AvailableNow, Once)."""
    max_bytes = opts.max_bytes_per_batch  # also a safety cap on the task payload size
    if isinstance(limit, ReadMaxRows):
        return Limits(limit.max_rows, max_bytes, opts.min_records_per_batch)
    if isinstance(limit, ReadMaxBytes):
        return Limits(opts.max_records_per_batch, min(limit.max_bytes, max_bytes),
                      opts.min_records_per_batch)
    if isinstance(limit, ReadMinRows):
        return Limits(opts.max_records_per_batch, max_bytes, limit.min_rows)
    if not isinstance(limit, ReadAllAvailable):
        raise ValueError(f"nsq source: unsupported read limit {limit!r}")
    # everything held: the inbox is bounded by maxInFlight anyway
    return Limits(opts.max_in_flight, max_bytes)

"""``spark.readStream.format("nsq")``: the pyspark face of StreamCore.

Spark builds this reader twice: in the driver-side runner process, which then calls
``latestOffset``/``partitions``/``commit`` on that one object for the whole run, and in a planner
worker, which pickles it for the executors' ``read``. So nothing may connect in ``__init__`` (the
planner's copy would subscribe and grab messages nobody answers) and the reader must pickle
without its connections: the core is created on first use and never pickled.
"""

from __future__ import annotations

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

from nsqpy.spark import payload
from nsqpy.spark.offsets import Offset
from nsqpy.spark.options import ReadOptions
from nsqpy.spark.stream_core import Limits, StreamCore


class NsqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts
        self._core: StreamCore | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_opts": self._opts, "_core": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._opts = state["_opts"]
        self._core = None

    @property
    def core(self) -> StreamCore:
        if self._core is None:
            self._core = StreamCore(self._opts)
        return self._core

    # --- driver-side runner --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return Offset().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        self.core.prepare_available_now()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        return self.core.latest(Offset.parse(start), limits_for(limit, self._opts)).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        payloads = self.core.partitions(Offset.parse(start), Offset.parse(end))
        return [InputPartition(p) for p in payloads]

    def commit(self, end: dict[str, Any]) -> None:
        # Never raises: a failed FIN means a redelivery (counted), not a failed query.
        self.core.commit(Offset.parse(end))

    def stop(self) -> None:
        if self._core is not None:
            self._core.stop()

    # --- executors -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield payload.to_record_batch(partition.value)


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

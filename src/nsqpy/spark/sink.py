"""``df.write.format("nsq")`` and ``df.writeStream.format("nsq")``: Arrow writers.

Columns: ``body`` (binary or string, required), ``topic`` (string; the ``topic`` option wins when
both are given), ``defer`` (integer milliseconds; > 0 publishes that row with DPUB). Other columns
are ignored. ``write`` runs on the executors and must return a commit message (pyspark fails the
task on ``None``); ``commit`` runs in a fresh driver-side process per batch, so it keeps no state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, ShortType, StringType, StructType

from nsqpy.protocol.names import is_valid_name
from nsqpy.spark.options import WriteOptions
from nsqpy.spark.publish import Counts, Publisher

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

log = logging.getLogger("nsqpy.spark")


@dataclass
class NsqCommitMessage(WriterCommitMessage):
    """What one task published: messages per topic, and how many of them with DPUB."""

    published: dict[str, int] = field(default_factory=dict)
    deferred: int = 0


@dataclass(frozen=True, slots=True)
class Columns:
    """Which input columns the sink uses (checked once, when Spark creates the writer)."""

    topic_column: bool
    defer_column: bool

    @classmethod
    def check(cls, schema: StructType, opts: WriteOptions) -> Columns:
        types = {f.name: f.dataType for f in schema.fields}
        if not isinstance(types.get("body"), BinaryType | StringType):
            raise ValueError("nsq sink: the DataFrame needs a 'body' column of type binary or "
                             f"string (columns: {sorted(types)})")
        use_topic = opts.topic is None
        if use_topic and not isinstance(types.get("topic"), StringType):
            raise ValueError("nsq sink: set the 'topic' option or give the DataFrame a string "
                             "'topic' column")
        defer = types.get("defer")
        if defer is not None and not isinstance(defer, IntegerType | LongType | ShortType):
            raise ValueError(f"nsq sink: column 'defer' must be an integer (ms), not {defer}")
        return cls(topic_column=use_topic, defer_column=defer is not None)


def write_batches(
    opts: WriteOptions, cols: Columns, batches: Iterator[pa.RecordBatch]
) -> NsqCommitMessage:
    """Publish every row of ``batches`` (one task's share of the DataFrame)."""
    publisher: Publisher | None = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if publisher is None:
                publisher = Publisher(opts)  # connect only for a task that has rows
            for topic, part in _by_topic(batch, opts, cols):
                publisher.publish(topic, _bodies(part), _defers(part) if cols.defer_column else ())
        counts = publisher.counts if publisher is not None else Counts()
    finally:
        if publisher is not None:
            publisher.close()
    return NsqCommitMessage(dict(counts.published), counts.deferred)


def _by_topic(
    batch: pa.RecordBatch, opts: WriteOptions, cols: Columns
) -> Iterator[tuple[str, pa.RecordBatch]]:
    if opts.topic is not None:
        yield opts.topic, batch
        return
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    topics = batch.column("topic")
    if topics.null_count:
        raise ValueError("nsq sink: a row has a null 'topic'")
    for topic in pc.unique(topics).to_pylist():
        if not is_valid_name(topic):
            raise ValueError(f"nsq sink: invalid topic name {topic!r} in column 'topic'")
        yield topic, batch.filter(pc.equal(topics, topic))


def _bodies(batch: pa.RecordBatch) -> list[bytes]:
    import pyarrow as pa

    column = batch.column("body")
    if column.null_count:
        raise ValueError("nsq sink: a row has a null 'body' (NSQ messages cannot be null)")
    if not pa.types.is_binary(column.type):
        column = column.cast(pa.binary())  # UTF-8 text: same bytes, no copy per row
    bodies: list[bytes] = column.to_pylist()
    return bodies


def _defers(batch: pa.RecordBatch) -> list[int]:
    column = batch.column("defer").fill_null(0)
    defers: list[int] = column.to_pylist()
    return defers


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    counts = Counts()
    for msg in messages:
        if isinstance(msg, NsqCommitMessage):
            for topic, n in msg.published.items():
                counts.add(topic, n)
            counts.deferred += msg.deferred
    log.info("nsq sink: %s published %s (%d deferred)", what, counts.published, counts.deferred)


class NsqArrowWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, cols: Columns) -> None:
        self._opts = opts
        self._cols = cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self._opts, self._cols, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "job")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # published messages cannot be taken back: the retried job publishes them again
        log.warning("nsq sink: job aborted; messages already published stay published")


class NsqStreamArrowWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, cols: Columns) -> None:
        self._opts = opts
        self._cols = cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self._opts, self._cols, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("nsq sink: batch %d aborted; messages already published stay published",
                    batchId)

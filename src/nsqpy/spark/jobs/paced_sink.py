"""The ``nsq`` sink wrapped so that each writer task paces and counts what it publishes.

Pacing has to happen in the process that publishes. A separate pacing stage (``mapInArrow``
before the sink) does not work: its output reaches the sink through a 64 KiB buffered pipe and
Spark's Arrow batching, so paced chunks arrive at the sink all at once (measured). Wrapping the
sink's writer makes the pacer the iterator the writer pulls from: the writer can only publish a
row once the pacer has released it, plus at most one MPUB frame of buffering, which
``replay.py`` sizes to one chunk.

The wrapper class is built per replay so that it can carry an accumulator (a data source only
receives string options): cloudpickle ships such a class by value to the executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import Accumulator
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from nsqpy.spark.jobs.pacing import Batch, Pacer, chunk_size, pace_batches

#: The name the wrapped sink is registered under (never the user-facing ``nsq``).
PACED_FORMAT = "nsqpy_paced_nsq"


class PacedArrowWriter(DataSourceArrowWriter):
    """``inner`` pulling its Arrow batches through a pacer, counting the rows it took."""

    def __init__(
        self, inner: DataSourceArrowWriter, rate: float | None, counter: Accumulator[int]
    ) -> None:
        self.inner = inner
        self.rate = rate
        self.counter = counter

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        rows = 0

        def counted(batches: Iterator[Batch]) -> Iterator[Batch]:
            nonlocal rows
            for batch in batches:
                rows += batch.num_rows
                yield batch

        batches: Iterator[Batch] = iter(iterator)
        if self.rate is not None:
            batches = pace_batches(batches, Pacer(self.rate), chunk_size(self.rate))
        message = self.inner.write(counted(batches))
        # Only a task that published everything counts: a failed one is retried.
        self.counter.add(rows)
        return message

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.inner.abort(messages)


def paced(
    writer: DataSourceWriter, rate: float | None, counter: Accumulator[int]
) -> DataSourceWriter:
    """``writer`` paced at ``rate`` rows per second (None: unpaced), counting into ``counter``.

    The ``nsq`` sink's writer takes Arrow batches (Spark picks the input kind by the writer's
    class), so that is the one kind wrapped.
    """
    if not isinstance(writer, DataSourceArrowWriter):
        raise TypeError(f"only Arrow writers can be paced, not {type(writer).__name__}")
    return PacedArrowWriter(writer, rate, counter)


def paced_source(
    base: type[DataSource], rate_per_task: float | None, counter: Accumulator[int]
) -> type[DataSource]:
    """A subclass of the ``nsq`` data source whose writers pace and count."""

    class PacedNsqDataSource(base):  # type: ignore[valid-type,misc]
        @classmethod
        def name(cls) -> str:
            return PACED_FORMAT

        def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
            return paced(super().writer(schema, overwrite), rate_per_task, counter)

    return PacedNsqDataSource

"""``spark.read.format("nsq")``: a bounded drain of what the channel holds now (see drain.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from nsqpy.spark import payload
from nsqpy.spark.drain import drain
from nsqpy.spark.options import ReadOptions


class NsqBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self._opts = opts

    def partitions(self) -> list[InputPartition]:
        # Spark plans once per DataFrame: this is where the messages are taken and FINished
        return [InputPartition(p) for p in drain(self._opts)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if partition.value is None:  # Spark's stand-in when partitions() found nothing
            return
        yield payload.to_record_batch(partition.value)

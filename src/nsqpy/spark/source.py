"""The ``nsq`` data source: Spark's entry point to the readers and writers.

Every method here runs in one of Spark's Python worker processes, never in the user's driver.
A bad option fails the ``load()`` of a read (``schema``) or the planning of a write
(``writer``), and its message is the first line of the error Spark raises (see ``_parse``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from nsqpy.spark.batch_reader import NsqBatchReader
from nsqpy.spark.options import ReadOptions, WriteOptions, parse_read_options, parse_write_options
from nsqpy.spark.sink import Columns, NsqArrowWriter, NsqStreamArrowWriter
from nsqpy.spark.stream_reader import NsqStreamReader

#: The rows of both readers (payload.SCHEMA_DDL): ids are the 16-character hex NSQ ids, unique
#: per nsqd, so deduplicate on (nsqd, id).
SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("body", BinaryType()),
        StructField("timestamp", TimestampType()),
        StructField("attempts", IntegerType()),
        StructField("topic", StringType()),
        StructField("channel", StringType()),
        StructField("nsqd", StringType()),
    ]
)


#: pyspark's worker reports an exception without its traceback when this is set (it is how
#: ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` reaches the worker).
HIDE_TRACEBACK: Final = "SPARK_HIDE_TRACEBACK"

T = TypeVar("T", ReadOptions, WriteOptions)


class NsqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        # Spark asks for the schema when a read is loaded (spark.read/readStream...load(),
        # never for a write), so a bad read option fails load() itself, not the first trigger.
        _parse(parse_read_options, self.options)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return NsqBatchReader(_parse(parse_read_options, self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        # Not _parse: pyspark's streaming runner then fails on its own ("cannot access local
        # variable 'reader'") and a report without traceback would only show that error.
        # schema() has checked the options already, unless the user gave a schema.
        return NsqStreamReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = _parse(parse_write_options, self.options)
        return NsqArrowWriter(opts, Columns.check(schema, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = _parse(parse_write_options, self.options)
        return NsqStreamArrowWriter(opts, Columns.check(schema, opts))


def _parse(parse: Callable[[Mapping[str, str]], T], options: Mapping[str, str]) -> T:
    """``parse(options)``; an invalid option is reported as its message alone.

    Spark's Python worker reports an exception as its whole traceback, so the error the user
    gets starts ``[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance:
    Traceback (most recent call last):`` and names the option some ten lines further down. A
    bad option is the user's input, not a bug, and a trace into the option parser helps no one:
    the worker is asked to report the message alone, which makes it the first line. The worker
    process exits right after reporting the error, so the setting ends with it.
    """
    try:
        return parse(options)
    except ValueError:
        os.environ[HIDE_TRACEBACK] = "1"
        raise


def _check_schema(schema: StructType) -> None:
    if schema.simpleString() != SCHEMA.simpleString():
        raise ValueError(f"nsq source: the schema is fixed ({SCHEMA.simpleString()}); "
                         f"got {schema.simpleString()}")

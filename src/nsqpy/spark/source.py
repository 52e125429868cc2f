"""The ``nsq`` data source: Spark's entry point to the readers and writers."""

from __future__ import annotations

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
from nsqpy.spark.options import parse_read_options, parse_write_options
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


class NsqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return NsqBatchReader(parse_read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return NsqStreamReader(parse_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = parse_write_options(self.options)
        return NsqArrowWriter(opts, Columns.check(schema, opts))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = parse_write_options(self.options)
        return NsqStreamArrowWriter(opts, Columns.check(schema, opts))


def _check_schema(schema: StructType) -> None:
    if schema.simpleString() != SCHEMA.simpleString():
        raise ValueError(f"nsq source: the schema is fixed ({SCHEMA.simpleString()}); "
                         f"got {schema.simpleString()}")

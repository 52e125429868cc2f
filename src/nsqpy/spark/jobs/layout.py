"""The archive's on-disk layout: Parquet files under ``topic=<t>/date=<yyyy-mm-dd>/hour=<hh>``.

The partition values come from the message's own timestamp (when nsqd accepted it), in UTC, so
a replay of "03:00 to 04:00 on the 22nd" reads exactly the directories it names. They are
computed from epoch seconds, never with the session time zone, which may be anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from types import MappingProxyType
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from nsqpy.spark.jobs.errors import JobError

PARTITION_COLUMNS: Final = ("topic", "date", "hour")
#: When the archive job wrote the row (the micro-batch's time): the report's delay is
#: ``archived_at - timestamp``.
ARCHIVED_AT: Final = "archived_at"
#: Read with an explicit schema: no inference pass over the files, an empty archive reads as
#: no rows instead of failing, and older files lacking a column read it as null.
ARCHIVE_SCHEMA: Final = (
    "id string, body binary, timestamp timestamp, attempts int, channel string, nsqd string, "
    "archived_at timestamp, topic string, date date, hour int"
)
#: Written for readers outside Spark too: timestamps as INT64 microseconds with the logical type
#: TIMESTAMP(isAdjustedToUTC=true, MICROS), which Parquet readers take as UTC instants (tested
#: with pyarrow and pandas). Spark's default, the legacy INT96, reads there as naive times.
#: Spark reads both, so archives written before (or mixing both) still replay and report.
PARQUET_WRITE_OPTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
)
#: Options of the archive's own Parquet writer (not session settings: they are Hadoop keys).
#: ``id`` and ``body`` are unique per message, so Parquet's dictionary encoding filled a
#: dictionary, gave up on it and wrote them plain after all (18% of the write tasks' samples
#: in a profile); they are written plain from the start. The other columns keep their
#: dictionaries, which suit them (``timestamp`` repeats within an MPUB; the rest are nearly
#: constant).
ARCHIVE_WRITER_OPTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {"parquet.enable.dictionary#id": "false", "parquet.enable.dictionary#body": "false"}
)
#: A file sink's log of committed files; readers that honour it never see orphaned files.
SINK_METADATA: Final = "_spark_metadata"
_SECONDS_PER_DAY: Final = 86_400
_SECONDS_PER_HOUR: Final = 3_600


def utc_date(ts: Column) -> Column:
    return F.date_from_unix_date(F.floor(F.unix_seconds(ts) / _SECONDS_PER_DAY).cast("int"))


def utc_hour(ts: Column) -> Column:
    """The hour of day, 0 to 23, as an integer."""
    return F.pmod(F.floor(F.unix_seconds(ts) / _SECONDS_PER_HOUR), F.lit(24)).cast("int")


def batch_time() -> Column:
    """``current_timestamp()``, which in a streaming query is the time of the micro-batch, in a
    form whose generated code is the same for every batch.

    Spark puts each batch's time into the plan as a constant, and the code it generates for the
    archive's projection inlined it: every batch compiled a new class (janino, then the JIT's
    C2 again), the largest item of the JIT's work in a profile of a 1M-message archive. Passed
    through ``reflect`` (evaluated, never compiled), the value stays the same and the code is
    compiled once; it costs a method call and a short string per row.
    """
    micros = F.unix_micros(F.current_timestamp())
    as_text = F.reflect(F.lit("java.lang.Long"), F.lit("toString"), micros)
    return F.timestamp_micros(as_text.cast("long"))


def with_archive_columns(df: DataFrame, archived_at: Column | None = None) -> DataFrame:
    """Source rows plus ``archived_at`` and the partition columns, ready for ``partitionBy``.

    ``archived_at`` defaults to the current time (``batch_time``), which in a streaming query
    is the time of the micro-batch.
    """
    ts = F.col("timestamp")
    return df.select(
        "id", "body", "timestamp", "attempts", "channel", "nsqd",
        (batch_time() if archived_at is None else archived_at).alias(ARCHIVED_AT),
        "topic",
        utc_date(ts).alias("date"),
        # Zero-padded so that directory listings sort by time.
        F.lpad(utc_hour(ts).cast("string"), 2, "0").alias("hour"),
    )  # fmt: skip


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists, on whatever file system Spark would use for it (local, HDFS, S3)."""
    hadoop_path, fs = _file_system(spark, path)
    return bool(fs.exists(hadoop_path))


def is_local(spark: SparkSession, path: str) -> bool:
    """Whether Spark would keep ``path`` on this machine's file system (``file:``)."""
    return str(_file_system(spark, path)[1].getScheme()) == "file"


def _file_system(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """``path`` as a Hadoop Path, and the Hadoop FileSystem it is on (py4j objects)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (non-Connect) session always has one
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path, hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def read_archive(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """All rows of one or more archives.

    Each path is read on its own: Spark honours a file sink's ``_spark_metadata`` only for a
    single-path read, and a multi-path read would also pick up files of crashed batches.
    """
    if not paths:
        raise JobError("no input archive given")
    frames = []
    for path in paths:
        if not path_exists(spark, path):
            raise JobError(f"input path does not exist: {path}")
        frames.append(spark.read.schema(ARCHIVE_SCHEMA).parquet(path))
    return reduce(DataFrame.unionByName, frames)

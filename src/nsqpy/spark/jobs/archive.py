"""nsqpy-archive: NSQ topics to Parquet, partitioned by topic/date/hour ("scalable nsq_to_file").

One streaming query per run, reading every topic (a union of one ``nsq`` source per topic) into
one file sink. One query rather than one per topic because:

- a file sink owns its output directory through ``_spark_metadata``; two queries writing into
  one directory would corrupt that log, and one directory per topic would make every reader
  do a multi-path read, which ignores the log and sees files of crashed batches;
- each ``nsq`` source still runs in its own driver-side process, so topics do not share an
  ingest process; only triggers are shared, which suits an archive;
- one checkpoint, one progress stream and one thing to stop.

The price: the topic set belongs to the checkpoint. Archiving another topic means another
checkpoint and another output directory (``check_output`` refuses to mix them).

Messages are FINished only after the file sink and Spark's commit log hold the batch. Reading
through leases (nsqpy's nsqd) that makes the archive exactly-once: a crash between the two is
made good by the restart, within the leases' TTL. Driver-side (Go nsqd) it is at-least-once: a
crash between the two leaves duplicates, which replay and report remove by (nsqd, id).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from nsqpy.protocol.names import is_valid_name
from nsqpy.spark.jobs import preflight
from nsqpy.spark.jobs.errors import JobError, spark_failure
from nsqpy.spark.jobs.layout import (
    ARCHIVE_WRITER_OPTIONS,
    PARQUET_WRITE_OPTIONS,
    PARTITION_COLUMNS,
    SINK_METADATA,
    is_local,
    path_exists,
    with_archive_columns,
)
from nsqpy.spark.jobs.progress import BatchLog, Emit, Totals
from nsqpy.spark.jobs.stopping import StopRequest, stop_cleanly
from nsqpy.spark.options import parse_read_options

DEFAULT_CHANNEL: Final = "nsqpy_archive"
COMPRESSIONS: Final = ("snappy", "zstd", "gzip", "lz4", "none")
QUERY_NAME: Final = "nsqpy_archive"
#: Up to this many Parquet files open at once per task, one per topic/date/hour of its rows:
#: Spark then writes the rows as they come instead of sorting each batch by those columns first
#: (a task whose rows span more partitions sorts the rest, as before). The files are the same.
CONCURRENT_WRITERS: Final = 8
#: Writes the checkpoint's and the file sink's logs with Hadoop's FileSystem instead of its
#: FileContext, whose local implementation runs ``readlink`` as a process eight times per log
#: file (24 processes a batch, about 50 ms of each batch's critical path). Only for local paths,
#: where a rename is atomic (the condition for this manager); Spark picks it itself on file
#: systems without FileContext.
LOCAL_CHECKPOINT_MANAGER: Final = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
#: How often the driver looks at the query's progress and at stop requests.
_POLL_SECONDS: Final = 1


@dataclass(frozen=True)
class ArchiveConfig:
    topics: tuple[str, ...]
    output: str
    checkpoint: str
    nsqd_tcp_addresses: tuple[str, ...] = ()
    lookupd_http_addresses: tuple[str, ...] = ()
    channel: str = DEFAULT_CHANNEL
    trigger_seconds: float = 10.0
    available_now: bool = False
    max_in_flight: int | None = None
    max_records_per_batch: int | None = None
    compression: str = "snappy"
    #: Further options of the ``nsq`` source (``msgTimeout``, ``nsq.<go-nsq option>``, ...).
    source_options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    stop_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.topics:
            raise JobError("at least one --topic is required")
        for name in (*self.topics, self.channel):
            if not is_valid_name(name):
                raise JobError(f"invalid topic or channel name {name!r}")
        if bool(self.nsqd_tcp_addresses) == bool(self.lookupd_http_addresses):
            raise JobError("give --nsqd-tcp-address or --lookupd-http-address (one of them)")
        if self.compression not in COMPRESSIONS:
            raise JobError(f"unknown compression {self.compression!r}: one of {COMPRESSIONS}")
        if self.trigger_seconds <= 0:
            raise JobError("--trigger must be positive")
        try:  # the source's own check, before Spark wraps its message in a traceback
            parse_read_options(source_options(self, self.topics[0]))
        except ValueError as exc:
            raise JobError(str(exc)) from None


def source_options(cfg: ArchiveConfig, topic: str) -> dict[str, str]:
    """The ``nsq`` source's options for ``topic``; ``cfg.source_options`` come last and win."""
    options = {"topic": topic, "channel": cfg.channel}
    if cfg.nsqd_tcp_addresses:
        options["nsqd"] = ",".join(cfg.nsqd_tcp_addresses)
    else:
        options["lookupd"] = ",".join(cfg.lookupd_http_addresses)
    if cfg.max_in_flight is not None:
        options["maxInFlight"] = str(cfg.max_in_flight)
    if cfg.max_records_per_batch is not None:
        options["maxRecordsPerBatch"] = str(cfg.max_records_per_batch)
    options.update(cfg.source_options)
    return options


def source_frame(spark: SparkSession, cfg: ArchiveConfig, topic: str) -> DataFrame:
    return spark.readStream.format("nsq").options(**source_options(cfg, topic)).load()


def archive_frame(spark: SparkSession, cfg: ArchiveConfig) -> DataFrame:
    # Sorted: Spark matches a checkpoint's sources by position.
    frames = [source_frame(spark, cfg, topic) for topic in sorted(set(cfg.topics))]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return with_archive_columns(union)


def check_output(spark: SparkSession, cfg: ArchiveConfig) -> None:
    """Refuse a new checkpoint on an output that another checkpoint's query wrote.

    The file sink skips batch ids its ``_spark_metadata`` already lists. A fresh checkpoint
    starts again at batch 0, so its batches would be skipped while the source FINs their
    messages: silent loss.
    """
    has_log = path_exists(spark, f"{cfg.output.rstrip('/')}/{SINK_METADATA}")
    has_checkpoint = path_exists(spark, f"{cfg.checkpoint.rstrip('/')}/offsets")
    if has_log and not has_checkpoint:
        raise JobError(
            f"output {cfg.output} was written by a query with another checkpoint; pass that "
            "--checkpoint, or archive into a new --output"
        )


def query_settings(spark: SparkSession, cfg: ArchiveConfig) -> dict[str, str]:
    """Session settings for the archive's query alone (see ``run_archive``)."""
    settings = {"spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS)}
    if is_local(spark, cfg.checkpoint) and is_local(spark, cfg.output):
        settings["spark.sql.streaming.checkpointFileManagerClass"] = LOCAL_CHECKPOINT_MANAGER
    return settings


@contextlib.contextmanager
def _session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in the session while the block runs; the earlier values afterwards."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def start_archive(spark: SparkSession, cfg: ArchiveConfig) -> StreamingQuery:
    """Start the archive's query, with the session's settings as they are (``run_archive``
    adds ``query_settings`` for the query's lifetime)."""
    writer = (
        archive_frame(spark, cfg)
        .writeStream.format("parquet")
        .queryName(QUERY_NAME)
        .option("path", cfg.output)
        .option("checkpointLocation", cfg.checkpoint)
        .option("compression", cfg.compression)
        .options(**PARQUET_WRITE_OPTIONS, **ARCHIVE_WRITER_OPTIONS)
        .partitionBy(*PARTITION_COLUMNS)
        .outputMode("append")
    )
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{round(cfg.trigger_seconds * 1000)} milliseconds")
    return writer.start()


def run_archive(
    spark: SparkSession,
    cfg: ArchiveConfig,
    emit: Emit,
    stop: StopRequest | None = None,
) -> Totals:
    """Archive until the queue is drained (``available_now``) or ``stop`` is requested.

    ``query_settings`` are in the session while the query runs, and as they were afterwards:
    the query's stream takes its copy of the session once it has started, not in ``start()``.
    """
    preflight.check_nsqd(cfg.nsqd_tcp_addresses)
    preflight.check_lookupd(cfg.lookupd_http_addresses)
    check_output(spark, cfg)
    with _session_settings(spark, query_settings(spark, cfg)):
        return _run(spark, cfg, emit, stop or StopRequest())


def _run(spark: SparkSession, cfg: ArchiveConfig, emit: Emit, stop: StopRequest) -> Totals:
    try:
        query = start_archive(spark, cfg)
    except PySparkException as exc:  # e.g. an output path Spark cannot write
        raise spark_failure("archive query did not start", exc) from exc
    log = BatchLog(emit)
    try:
        _watch(query, cfg, log, stop, emit)
    except PySparkException as exc:
        raise spark_failure("archive query failed", exc) from exc
    finally:
        if query.isActive:
            query.stop()
    log.update(query.recentProgress)
    return log.totals


def _watch(
    query: StreamingQuery, cfg: ArchiveConfig, log: BatchLog, stop: StopRequest, emit: Emit
) -> None:
    """Print progress until the query ends by itself or a stop request has been served."""
    while not query.awaitTermination(_POLL_SECONDS):
        log.update(query.recentProgress)
        if stop.requested.is_set():
            emit("stopping: waiting for the last batch to be committed (signal again to force)")
            if not stop_cleanly(query, stop, cfg.stop_timeout):
                emit("stopped before the query was idle: its last batch may be archived twice")
            return
    # awaitTermination does not raise for a failure that ended the query between polls.
    failure = query.exception()
    if failure is not None:
        raise failure

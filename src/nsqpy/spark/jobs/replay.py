"""nsqpy-replay: archived messages back into a topic ("how a channel is rewound").

NSQ forgets a message once it is FINished, so a consumer that needs to see messages again (a
bug fixed, a new service) gets them from the archive: select by source topic and time range,
drop duplicates, publish to a topic. Publishing to the original topic reaches every channel
on it; to rewind one consumer, replay into a topic of its own and point it there.

Duplicates are dropped by (nsqd, id): the archive is at-least-once, and NSQ message ids are
unique only per nsqd, so two different messages from two nsqd can share an id.

Rate limit: the selection is repartitioned into N tasks (by default one per executor core,
so they all run at once) and each task's writer is paced at R/N messages per second
(``paced_sink.py``, ``pacing.py``). At any moment the published count is at most
``R * elapsed + N * 2 * chunk`` with chunks of 100 ms; fewer cores than tasks only slows it.
Messages are published in no particular order, as NSQ delivers them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from nsqpy.protocol.names import is_valid_name
from nsqpy.spark.jobs import preflight
from nsqpy.spark.jobs.errors import JobError, spark_failure
from nsqpy.spark.jobs.layout import read_archive
from nsqpy.spark.jobs.paced_sink import PACED_FORMAT, paced_source
from nsqpy.spark.jobs.pacing import chunk_size
from nsqpy.spark.jobs.progress import Emit, TaskProgress
from nsqpy.spark.jobs.selection import Selection
from nsqpy.spark.source import NsqDataSource

DEDUPE_KEY: Final = ("nsqd", "id")
#: The sink's MPUB size when not rate limited (its own default).
_MPUB_BATCH: Final = 500


@dataclass(frozen=True)
class ReplayConfig:
    inputs: tuple[str, ...]
    destination_topic: str
    nsqd_tcp_addresses: tuple[str, ...]
    selection: Selection = field(default_factory=Selection)
    rate: float | None = None
    tasks: int | None = None
    progress_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not self.inputs:
            raise JobError("at least one --input is required")
        if not is_valid_name(self.destination_topic):
            raise JobError(f"invalid destination topic {self.destination_topic!r}")
        if not self.nsqd_tcp_addresses:
            raise JobError("at least one --nsqd-tcp-address is required")
        if self.rate is not None and self.rate <= 0:
            raise JobError("--rate must be positive")
        if self.tasks is not None and self.tasks < 1:
            raise JobError("--tasks must be at least 1")


@dataclass(frozen=True)
class ReplayResult:
    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def replay_frame(spark: SparkSession, cfg: ReplayConfig) -> DataFrame:
    """The bodies to publish: selected, each message once."""
    archive = read_archive(spark, cfg.inputs)
    return cfg.selection.apply(archive).dropDuplicates(list(DEDUPE_KEY)).select("body")


def run_replay(spark: SparkSession, cfg: ReplayConfig, emit: Emit) -> ReplayResult:
    """Publish the selection to ``cfg.destination_topic``, pacing and counting as it goes."""
    preflight.check_nsqd(cfg.nsqd_tcp_addresses)
    frame = replay_frame(spark, cfg)
    tasks = cfg.tasks or spark.sparkContext.defaultParallelism
    rate_per_task = None if cfg.rate is None else cfg.rate / tasks
    counter = spark.sparkContext.accumulator(0)
    spark.dataSource.register(paced_source(NsqDataSource, rate_per_task, counter))
    if rate_per_task is not None or cfg.tasks is not None:
        frame = frame.repartition(tasks)
    writer = (
        frame.write.format(PACED_FORMAT)
        .mode("append")
        .option("nsqd", ",".join(cfg.nsqd_tcp_addresses))
        .option("topic", cfg.destination_topic)
        .option("mpubBatch", str(_mpub_batch(rate_per_task)))
    )
    started = time.monotonic()
    with TaskProgress(spark.sparkContext, counter, emit, cfg.progress_seconds, started):
        try:
            writer.save()
        except PySparkException as exc:
            raise spark_failure("replay failed", exc) from exc
    return ReplayResult(counter.value, time.monotonic() - started)


def _mpub_batch(rate_per_task: float | None) -> int:
    """One chunk per MPUB when paced, so the writer never holds more than the pacer released."""
    if rate_per_task is None:
        return _MPUB_BATCH
    return min(_MPUB_BATCH, chunk_size(rate_per_task))

"""nsqpy-report: what an archive holds, per topic and hour, and how late it was archived.

Numbers are over distinct messages: the archive is at-least-once, and a message archived twice
was still published once. A duplicate's copies carry the same topic, timestamp and body; the
report keeps the lowest attempts count and the earliest ``archived_at`` (the first copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from nsqpy.spark.jobs.layout import ARCHIVED_AT, read_archive
from nsqpy.spark.jobs.selection import Selection

PERCENTILES: Final = (0.5, 0.9, 0.99)
#: percentile_approx's accuracy: exact (nearest rank) up to this many values per group, then
#: within 1/ACCURACY of the rank; an exact percentile would hold every value in memory.
ACCURACY: Final = 10_000
ALL_TOPICS: Final = "(all)"


@dataclass(frozen=True)
class HourRow:
    topic: str
    hour: datetime
    messages: int
    bytes: int


@dataclass(frozen=True)
class DelayRow:
    """Publish-to-archive delay in milliseconds over messages that have ``archived_at``."""

    topic: str
    messages: int
    percentiles: tuple[float, ...]
    max: float


@dataclass(frozen=True)
class Report:
    rows: int
    messages: int
    hourly: list[HourRow]
    attempts: list[tuple[int, int]]
    delays: list[DelayRow]


def messages_frame(archive: DataFrame) -> DataFrame:
    """One row per distinct (nsqd, id), with how many copies the archive holds."""
    return archive.groupBy("nsqd", "id").agg(
        F.count(F.lit(1)).alias("copies"),
        F.first("topic").alias("topic"),
        F.first("timestamp").alias("timestamp"),
        F.min("attempts").alias("attempts"),
        F.min(ARCHIVED_AT).alias(ARCHIVED_AT),
        F.first(F.length("body")).alias("bytes"),
    )


def hourly(messages: DataFrame) -> list[HourRow]:
    hour = (F.floor(F.unix_seconds(F.col("timestamp")) / 3600) * 3600).alias("hour")
    rows = (
        messages.groupBy("topic", hour)
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("topic", "hour")
        .collect()
    )
    return [
        HourRow(r["topic"], datetime.fromtimestamp(r["hour"], UTC), r["messages"], r["bytes"])
        for r in rows
    ]


def attempts(messages: DataFrame) -> list[tuple[int, int]]:
    rows = messages.groupBy("attempts").count().orderBy("attempts").collect()
    return [(r["attempts"], r["count"]) for r in rows]


def _delay_aggregates() -> list[Column]:
    delay = (F.unix_micros(F.col(ARCHIVED_AT)) - F.unix_micros(F.col("timestamp"))) / 1000.0
    return [
        F.count(delay).alias("n"),
        F.percentile_approx(delay, list(PERCENTILES), ACCURACY).alias("p"),
        F.max(delay).alias("max"),
    ]


def delays(messages: DataFrame) -> list[DelayRow]:
    """Per topic, then over all topics; topics without any ``archived_at`` are left out."""
    per_topic = messages.groupBy("topic").agg(*_delay_aggregates()).orderBy("topic").collect()
    overall = messages.agg(*_delay_aggregates()).collect()
    out = []
    for row, topic in [*((r, r["topic"]) for r in per_topic), (overall[0], ALL_TOPICS)]:
        if row["n"]:
            out.append(DelayRow(topic, row["n"], tuple(row["p"]), row["max"]))
    return out


def build_report(archive: DataFrame) -> Report:
    messages = messages_frame(archive).cache()
    try:
        totals = messages.agg(F.sum("copies").alias("rows"), F.count(F.lit(1)).alias("n"))
        total = totals.collect()[0]
        return Report(
            rows=total["rows"] or 0,
            messages=total["n"],
            hourly=hourly(messages),
            attempts=attempts(messages),
            delays=delays(messages),
        )
    finally:
        messages.unpersist()


def run_report(spark: SparkSession, inputs: Sequence[str], selection: Selection) -> Report:
    return build_report(selection.apply(read_archive(spark, inputs)))

"""readStream.format("nsq") on a real local Spark into Parquet."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .conftest import NsqdFactory, numbered, publish, read_options
from .daemons import Nsqd, wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def stream(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.readStream.format("nsq").options(**options).load()


def to_parquet(df: DataFrame, tmp_path: Path, **trigger: Any) -> StreamingQuery:
    return (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def parquet_rows(spark: SparkSession, tmp_path: Path) -> list[Any]:
    return spark.read.parquet(str(tmp_path / "out")).collect()


def settled(nsqd: Nsqd, topic: str, total: int, channel: str = "spark") -> bool:
    """All ``total`` messages reached the channel and were FINished."""
    stats = nsqd.channel(topic, channel)
    return (
        stats.get("message_count") == total
        and stats["depth"] == 0
        and stats["in_flight_count"] == 0
    )


@pytest.mark.parametrize("mode", ["lease", "driver"])
def test_available_now_drains_into_parquet_and_fins_the_last_batch(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path, mode: str
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(3000)
    publish(nsqd.tcp_address, "an", bodies)
    began = time.time()
    query = to_parquet(
        stream(spark, read_options(nsqd, "an", mode=mode, maxInFlight=5000,
                                   maxRecordsPerBatch=700)),
        tmp_path, availableNow=True,
    )
    assert query.awaitTermination(120), "AvailableNow did not finish"
    assert query.exception() is None

    rows = parquet_rows(spark, tmp_path)
    assert Counter(bytes(r.body) for r in rows) == Counter(bodies)  # each exactly once
    assert len({r.id for r in rows}) == 3000
    assert {(r.topic, r.channel, r.nsqd, r.attempts) for r in rows} == {
        ("an", "spark", nsqd.tcp_address, 1)
    }
    assert all(len(r.id) == 16 for r in rows)
    assert all(began - 60 < r.timestamp.timestamp() < time.time() + 1 for r in rows)
    # the last data batch was FINished (lease: by the last trigger; driver: by the tick
    # batch), not returned on stop or timed out
    wait_until(lambda: settled(nsqd, "an", 3000), 20, "every message FINished")
    stats = nsqd.channel("an", "spark")
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)
    rows_per_batch = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert len(rows_per_batch) == 5 and max(rows_per_batch) <= 700  # maxRecordsPerBatch


def test_processing_time_trigger_takes_messages_as_they_come(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    first, second = numbered(1000, "a"), numbered(1000, "b")
    publish(nsqd.tcp_address, "pt", first)
    query = to_parquet(
        stream(spark, read_options(nsqd, "pt", maxInFlight=3000, pollTimeout="200ms")),
        tmp_path, processingTime="500 milliseconds",
    )
    try:
        wait_until(lambda: nsqd.channel("pt", "spark").get("depth") == 0, 60, "first wave taken")
        publish(nsqd.tcp_address, "pt", second)
        # FIN comes after the sink's commit: once all are FINished, all are in Parquet
        wait_until(lambda: settled(nsqd, "pt", 2000), 60,
                   "both waves FINished")
    finally:
        query.stop()
    assert query.exception() is None
    rows = parquet_rows(spark, tmp_path)
    assert Counter(bytes(r.body) for r in rows) == Counter(first + second)


def test_source_holds_more_than_nsqds_default_rdy_and_requeues_on_stop(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=20000")
    publish(nsqd.tcp_address, "rdy", numbered(8000))
    query = to_parquet(
        stream(spark, read_options(nsqd, "rdy", mode="driver", maxInFlight=8000,
                                   maxRecordsPerBatch=500)),
        tmp_path, processingTime="10 minutes",
    )
    try:
        # batch 0 (500, waiting for a commit that only the next trigger brings) + the inbox
        wait_until(lambda: nsqd.channel("rdy", "spark").get("in_flight_count") == 8000, 60,
                   "8000 in flight")
        wait_until(lambda: query.lastProgress is not None, 60, "batch 0 done")
    finally:
        query.stop()
    # the runner's SIGTERM handler sent RDY 0 and REQ: all back at once, not after msgTimeout
    wait_until(lambda: nsqd.channel("rdy", "spark")["depth"] == 8000, 15, "REQ on stop")
    stats = nsqd.channel("rdy", "spark")
    assert stats["in_flight_count"] == 0
    assert stats["requeue_count"] == 8000
    assert stats["timeout_count"] == 0
    assert len(parquet_rows(spark, tmp_path)) == 500  # batch 0, committed, not yet FINished

"""spark.read.format("nsq"): a bounded drain, FINished when Spark plans the DataFrame."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .conftest import NsqdFactory, numbered, publish, read_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_bounded_drain_then_the_rest(spark: SparkSession, nsqd_proc: NsqdFactory) -> None:
    nsqd = nsqd_proc()
    bodies = numbered(500)
    publish(nsqd.tcp_address, "batch", bodies)
    first = spark.read.format("nsq").options(**read_options(nsqd, "batch", maxRecords=200)).load()
    rows = first.collect()
    assert len(rows) == 200
    # planned once: every further action sees the same rows, nothing more is taken
    assert first.count() == 200
    assert {r.id for r in first.collect()} == {r.id for r in rows}
    stats = nsqd.channel("batch", "spark")
    assert (stats["depth"], stats["in_flight_count"]) == (300, 0)  # the 200 are FINished
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)

    rest = spark.read.format("nsq").options(
        **read_options(nsqd, "batch", idleTimeout="300ms")
    ).load().collect()
    assert sorted(bytes(r.body) for r in rows + rest) == bodies  # together: each once
    assert nsqd.channel("batch", "spark")["depth"] == 0


def test_empty_channel_gives_an_empty_dataframe(
    spark: SparkSession, nsqd_proc: NsqdFactory
) -> None:
    nsqd = nsqd_proc()
    nsqd.create_channel("none", "spark")
    df = spark.read.format("nsq").options(
        **read_options(nsqd, "none", idleTimeout="200ms")
    ).load()
    assert df.count() == 0
    assert df.columns == ["id", "body", "timestamp", "attempts", "topic", "channel", "nsqd"]

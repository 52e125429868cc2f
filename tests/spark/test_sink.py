"""df.write / df.writeStream .format("nsq"): what lands in nsqd is what the DataFrame held."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import NsqdFactory, consume, numbered, publish
from .daemons import Nsqd, wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def write(df: DataFrame, nsqd: Nsqd, **options: str) -> None:
    df.write.format("nsq").option("nsqd", nsqd.tcp_address).options(**options).mode(
        "append"
    ).save()


def test_batch_write_binary_bodies_in_mpub_frames(
    spark: SparkSession, nsqd_proc: NsqdFactory
) -> None:
    nsqd = nsqd_proc()
    nsqd.create_channel("out", "check")
    bodies = numbered(3000, size=64)
    df = spark.createDataFrame([(b, i) for i, b in enumerate(bodies)], "body binary, n long")
    # frames of at most 7 messages or 300 bytes: many MPUBs per task
    write(df.repartition(3), nsqd, topic="out", mpubBatch="7", mpubMaxBytes="300")
    assert Counter(consume(nsqd.tcp_address, "out", "check", 3000)) == Counter(bodies)


def test_topic_column_and_the_option_that_overrides_it(
    spark: SparkSession, nsqd_proc: NsqdFactory
) -> None:
    nsqd = nsqd_proc()
    for topic in ("ta", "tb", "tc"):
        nsqd.create_channel(topic, "check")
    rows = [(f"text {i}", "ta" if i % 3 else "tb") for i in range(300)]
    df = spark.createDataFrame(rows, "body string, topic string")
    write(df, nsqd)
    expect_a = [b.encode() for b, t in rows if t == "ta"]
    expect_b = [b.encode() for b, t in rows if t == "tb"]
    assert Counter(consume(nsqd.tcp_address, "ta", "check", len(expect_a))) == Counter(expect_a)
    assert Counter(consume(nsqd.tcp_address, "tb", "check", len(expect_b))) == Counter(expect_b)

    write(df, nsqd, topic="tc")  # the option wins over the column
    assert sorted(consume(nsqd.tcp_address, "tc", "check", 300)) == sorted(
        b.encode() for b, _ in rows
    )
    assert nsqd.channel("ta", "check")["message_count"] == len(expect_a)  # nothing more


def test_defer_column_publishes_with_dpub(spark: SparkSession, nsqd_proc: NsqdFactory) -> None:
    nsqd = nsqd_proc()
    nsqd.create_channel("later", "check")
    rows = [(f"now {i}".encode(), 0) for i in range(20)]
    rows += [(f"later {i}".encode(), 3_600_000) for i in range(5)]
    rows += [(b"null defer", None)]
    df = spark.createDataFrame(rows, "body binary, defer long")
    write(df, nsqd, topic="later")
    wait_until(lambda: nsqd.channel("later", "check")["deferred_count"] == 5, 10, "5 deferred")
    now = consume(nsqd.tcp_address, "later", "check", 21)
    assert sorted(now) == sorted([f"now {i}".encode() for i in range(20)] + [b"null defer"])
    assert nsqd.channel("later", "check")["deferred_count"] == 5


def test_stream_nsq_to_nsq(spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    nsqd.create_channel("copy", "check")
    bodies = numbered(2000, "s")
    publish(nsqd.tcp_address, "orig", bodies)
    query = (
        spark.readStream.format("nsq")
        .options(nsqd=nsqd.tcp_address, topic="orig", channel="to-copy", maxRecordsPerBatch="600")
        .load()
        .select("body")
        .writeStream.format("nsq")
        .options(nsqd=nsqd.tcp_address, topic="copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(consume(nsqd.tcp_address, "copy", "check", 2000)) == Counter(bodies)
    assert nsqd.channel("orig", "to-copy")["in_flight_count"] == 0


def test_write_errors_are_readable(spark: SparkSession, nsqd_proc: NsqdFactory) -> None:
    nsqd = nsqd_proc()
    no_body = spark.createDataFrame([("x",)], "text string")
    with pytest.raises(Exception, match="needs a 'body' column"):
        write(no_body, nsqd, topic="t")
    no_topic = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception, match="set the 'topic' option or give the DataFrame"):
        write(no_topic, nsqd)
    dead = Nsqd.__new__(Nsqd)
    dead.ports = {"TCP": 1, "HTTP": 1}  # nothing listens on port 1
    with pytest.raises(Exception, match="cannot connect to any nsqd"):
        write(no_topic, dead, topic="t")

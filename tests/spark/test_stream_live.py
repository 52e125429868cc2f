"""A live stream on a real local Spark: the first batch of a trickle, and a clean stop."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nsqpy.spark import stop_when_idle

from .conftest import NsqdFactory, numbered, publish, read_options
from .daemons import Nsqd, wait_until
from .trickle import Trickle

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def settled(nsqd: Nsqd, topic: str, total: int) -> bool:
    """All ``total`` messages reached the channel and were FINished."""
    stats = nsqd.channel(topic, "spark")
    return (stats.get("message_count"), stats.get("depth"), stats.get("in_flight_count")) == (
        total, 0, 0,
    )


def holders(nsqd: Nsqd) -> list[tuple[object, ...]]:
    """The channel's clients (id, user agent, address, in flight) and the source runners alive."""
    clients = [
        (c.get("client_id"), c.get("user_agent"), c.get("remote_address"), c.get("in_flight_count"))
        for c in nsqd.channel("busy", "spark").get("clients", [])
    ]
    runners = subprocess.run(
        ["pgrep", "-af", "python_streaming_source_runner|pyspark.daemon"],
        capture_output=True, text=True, check=False,
    ).stdout.splitlines()  # fmt: skip
    return [*clients, tuple(runners)]


def first_batch(query: StreamingQuery) -> tuple[float, int]:
    """When the source handed Spark its first rows (epoch seconds), and how many rows.

    The end of ``latestOffset`` is the source's part; running the first batch also starts
    Spark's Python workers, which takes seconds on a busy machine and says nothing about it.
    """
    for progress in query.recentProgress:
        if progress.numInputRows > 0:
            began = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00"))
            planned = began.timestamp() + progress.durationMs["latestOffset"] / 1000
            return planned, progress.numInputRows
    raise AssertionError("no batch with rows")


def test_a_trickle_gets_its_first_batch_within_a_couple_of_triggers(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    """Single PUBs 5 ms apart into a window of 3000: the first batch once took 1000 rows, 5 s."""
    nsqd = nsqd_proc("--max-rdy-count=10000")
    nsqd.create_channel("live", "spark")
    query = (
        spark.readStream.format("nsq")
        .options(**read_options(nsqd, "live", maxInFlight=3000))
        .load()
        .writeStream.format("memory")
        .queryName("live_trickle")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_until(lambda: bool(nsqd.channel("live", "spark").get("clients")), 60,
                   "the source to subscribe")
        with Trickle(nsqd.tcp_address, "live", rate=200, count=1600) as trickle:
            assert trickle.done.wait(60), "the publisher did not finish"
        assert trickle.error is None
        assert trickle.first_at is not None
        assert stop_when_idle(query, timeout=60)
    finally:
        query.stop()
    assert query.exception() is None
    planned, first_rows = first_batch(query)
    waited = planned - trickle.first_at
    # a trigger (1 s) plus the settle (0.25 s), with room for a busy machine
    assert waited < 3.0, f"the first batch was planned {waited:.1f} s after the first message"
    assert first_rows < 500  # before: a full maxRecordsPerBatch (1000)
    rows = spark.sql("SELECT body FROM live_trickle").collect()
    assert Counter(bytes(r.body) for r in rows) == Counter(trickle.bodies())
    wait_until(lambda: settled(nsqd, "live", 1600), 10, "every message FINished")


def test_stop_when_idle_stops_once_every_row_is_written_and_finished(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(2500)
    publish(nsqd.tcp_address, "idle", bodies)
    query = (
        spark.readStream.format("nsq")
        .options(**read_options(nsqd, "idle", maxInFlight=5000, maxRecordsPerBatch=1000))
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        # called at once: the query has not even run its first trigger
        assert stop_when_idle(query, timeout=120) is True
    finally:
        query.stop()
    assert not query.isActive
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(bytes(r.body) for r in rows) == Counter(bodies)
    # the last batch was FINished before the stop: nothing went back to nsqd or timed out
    wait_until(lambda: settled(nsqd, "idle", 2500), 10, "every message FINished")
    stats = nsqd.channel("idle", "spark")
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)


def test_stop_when_idle_gives_up_when_forced_and_loses_nothing(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    """A query that keeps getting messages never catches up: ``force`` stops it anyway.

    Driver-side: what it holds goes back at once. (Through leases, the last batch's leases
    wait for the next run until their TTL: test_lease_crash.py.)"""
    nsqd = nsqd_proc("--max-rdy-count=10000")
    nsqd.create_channel("busy", "spark")
    query = (
        spark.readStream.format("nsq")
        .options(**read_options(nsqd, "busy", mode="driver", maxInFlight=3000))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    force = threading.Event()
    try:
        with Trickle(nsqd.tcp_address, "busy", rate=200) as trickle:
            wait_until(lambda: nsqd.channel("busy", "spark").get("in_flight_count", 0) > 0, 60,
                       "the source to hold messages")
            force.set()
            began = time.monotonic()
            assert stop_when_idle(query, timeout=120, force=force) is False
            took = time.monotonic() - began
        assert trickle.error is None
    finally:
        query.stop()
    assert not query.isActive
    assert took < 30, f"a forced stop took {took:.1f} s"
    # what the source held went back to nsqd at once (REQ), none of it waits for a timeout
    try:
        wait_until(lambda: nsqd.channel("busy", "spark")["in_flight_count"] == 0, 15,
                   "held messages back in nsqd")
    except AssertionError as exc:  # say who still holds them (found the SIGTERM deadlock)
        raise AssertionError(f"{exc}; still connected: {holders(nsqd)}") from exc
    stats = nsqd.channel("busy", "spark")
    assert stats["timeout_count"] == 0
    assert stats["message_count"] == trickle.sent

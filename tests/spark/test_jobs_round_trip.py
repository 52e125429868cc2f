"""nsqpy-archive then nsqpy-replay against a real nsqd: the bodies come back, each message once."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

from nsqpy.client import sync
from nsqpy.spark.jobs.archive import ArchiveConfig, run_archive
from nsqpy.spark.jobs.errors import JobError
from nsqpy.spark.jobs.layout import PARTITION_COLUMNS, read_archive, with_archive_columns
from nsqpy.spark.jobs.replay import ReplayConfig, run_replay
from nsqpy.spark.jobs.selection import Selection
from nsqpy.spark.jobs.stopping import StopRequest

from .conftest import NsqdFactory, numbered, publish
from .daemons import Nsqd, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

CHANNEL = "nsqpy_archive"
LAYOUT = re.compile(r"archive/topic=rt_a/date=\d{4}-\d\d-\d\d/hour=\d\d")


def consume(nsqd: Nsqd, topic: str, count: int, timeout: float = 60) -> list[sync.Message]:
    """``count`` messages from a fresh channel (FINished), or fail after ``timeout``."""
    got: list[sync.Message] = []
    deadline = time.monotonic() + timeout
    with sync.Consumer(
        topic, "check", nsqd_tcp_addresses=nsqd.tcp_address, max_in_flight=500
    ) as consumer:
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages arrived"
            msg = consumer.get(timeout=1.0)
            if msg is not None:
                msg.finish()
                got.append(msg)
    return got


def settled(nsqd: Nsqd, topic: str) -> bool:
    stats = nsqd.channel(topic, CHANNEL)
    return bool(stats) and stats["depth"] == 0 and stats["in_flight_count"] == 0


def archive_config(nsqd: Nsqd, tmp_path: Path, *topics: str, **extra: object) -> ArchiveConfig:
    return ArchiveConfig(
        topics=topics,
        output=str(tmp_path / "archive"),
        checkpoint=str(tmp_path / "checkpoint"),
        nsqd_tcp_addresses=(nsqd.tcp_address,),
        max_in_flight=2000,
        **extra,  # type: ignore[arg-type]
    )


def add_duplicates(spark: SparkSession, archive: str, extra: str) -> None:
    """A second archive: 20 copies of archived messages, and one message that shares an id
    with an archived one but comes from another nsqd (so it is a different message)."""
    rows = read_archive(spark, [archive]).where("topic = 'rt_a'").orderBy("id")
    base = rows.select("id", "body", "timestamp", "attempts", "channel", "nsqd", "topic")
    copies = base.limit(20)
    twin = base.limit(1).selectExpr(
        "id", "cast('from another nsqd' as binary) as body", "timestamp", "attempts", "channel",
        "'10.0.0.9:4150' as nsqd", "topic",
    )  # fmt: skip
    with_archive_columns(copies.unionByName(twin)).write.partitionBy(*PARTITION_COLUMNS).parquet(
        extra
    )


def test_archive_then_replay_gives_back_every_body_once(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = [*numbered(300), *[b"same body"] * 5]  # equal bodies are still distinct messages
    publish(nsqd.tcp_address, "rt_a", bodies)
    publish(nsqd.tcp_address, "rt_b", numbered(40, prefix="b"))
    lines: list[str] = []
    settings = ("spark.sql.maxConcurrentOutputFileWriters",
                "spark.sql.streaming.checkpointFileManagerClass")  # fmt: skip
    session_before = [spark.conf.get(key, None) for key in settings]

    totals = run_archive(
        spark, archive_config(nsqd, tmp_path, "rt_a", "rt_b", available_now=True), lines.append
    )

    assert totals.rows == 345, lines
    # the archive's own settings were the query's only: the caller's session is as it was
    assert [spark.conf.get(key, None) for key in settings] == session_before
    assert any(line.startswith("batch ") for line in lines), lines
    wait_until(lambda: settled(nsqd, "rt_a") and settled(nsqd, "rt_b"), 30, "all FINished")
    archive = str(tmp_path / "archive")
    files = list((tmp_path / "archive" / "topic=rt_a").glob("date=*/hour=*/*.parquet"))
    assert files
    assert all(LAYOUT.fullmatch(f.parent.relative_to(tmp_path).as_posix()) for f in files), files
    stored = read_archive(spark, [archive])
    assert stored.count() == 345
    assert stored.where("archived_at >= timestamp").count() == 345

    extra = str(tmp_path / "extra")
    add_duplicates(spark, archive, extra)
    result = run_replay(
        spark,
        ReplayConfig(
            inputs=(archive, extra),
            destination_topic="rt_a_replay",
            nsqd_tcp_addresses=(nsqd.tcp_address,),
            selection=Selection(topics=("rt_a",)),
        ),
        lines.append,
    )

    expected = Counter([*bodies, b"from another nsqd"])
    assert result.messages == 306
    assert nsqd.topic_depth("rt_a_replay") == 306  # message_count: nothing else was published
    got = consume(nsqd, "rt_a_replay", 306)
    assert Counter(m.body for m in got) == expected


def archived_rows(lines: list[str]) -> int:
    """Rows of the batches printed so far (``batch 3: 120 rows in ...``)."""
    return sum(int(line.split()[2]) for line in lines if line.startswith("batch "))


@pytest.mark.parametrize("mode", ["lease", "driver"])
def test_a_stop_request_waits_until_the_last_batch_is_finished(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path, mode: str
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    # The next trigger, which FINs the last batch, comes up to 6 s after it: a stop that did not
    # wait for it would leave that batch in flight (and the source would requeue it, or its
    # leases would wait for the next run).
    cfg = archive_config(nsqd, tmp_path, "rt_live", trigger_seconds=6.0, stop_timeout=60.0,
                         source_options={"mode": mode})  # fmt: skip
    stop = StopRequest()
    lines: list[str] = []
    outcome: dict[str, object] = {}

    def archive() -> None:
        try:
            outcome["totals"] = run_archive(spark, cfg, lines.append, stop)
        except JobError as exc:  # reported below rather than lost in the thread
            outcome["error"] = exc

    worker = threading.Thread(target=archive)
    worker.start()
    try:
        publish(nsqd.tcp_address, "rt_live", numbered(200))
        wait_until(lambda: archived_rows(lines) == 200, 120, "the first 200 rows")
        publish(nsqd.tcp_address, "rt_live", numbered(100, prefix="late"))
        wait_until(lambda: archived_rows(lines) == 300, 60, "the late 100 rows")
    finally:
        stop.request()
        worker.join(150)
    assert not worker.is_alive()
    assert "error" not in outcome, outcome
    assert settled(nsqd, "rt_live"), (nsqd.channel("rt_live", CHANNEL), lines)
    rows = read_archive(spark, [cfg.output]).select("nsqd", "id").collect()
    assert len(rows) == 300
    assert len(set(rows)) == 300
    assert not any("twice" in line for line in lines), lines


def test_a_bad_source_option_fails_the_job_before_spark_with_the_sources_message(
    nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc()
    with pytest.raises(JobError) as failure:
        archive_config(
            nsqd, tmp_path, "rt_bad", available_now=True, source_options={"maxRecordPerBatch": "9"}
        )
    assert str(failure.value).startswith(
        "nsq source: unknown option 'maxrecordperbatch'; did you mean 'maxRecordsPerBatch'?"
    )

"""nsqpy-replay on hand-built archives: filters, the rate limit, and its errors."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

from nsqpy.cli import nsqpy_archive, nsqpy_replay
from nsqpy.client import sync
from nsqpy.spark.jobs import cli
from nsqpy.spark.jobs.archive import ArchiveConfig, check_output
from nsqpy.spark.jobs.errors import JobError
from nsqpy.spark.jobs.layout import PARTITION_COLUMNS, with_archive_columns
from nsqpy.spark.jobs.replay import ReplayConfig, run_replay

from .conftest import NsqdFactory
from .daemons import Nsqd

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T0 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
#: (topic, body, publish time): only the middle three are in topic f1 and in [03:00, 04:00).
FILTER_ROWS = [
    ("f1", b"too early", T0 - MICROSECOND),
    ("f1", b"first", T0),
    ("f1", b"middle", T0 + timedelta(minutes=30)),
    ("f1", b"last", T0 + timedelta(hours=1) - MICROSECOND),
    ("f1", b"too late", T0 + timedelta(hours=1)),
    ("f1", b"next day", T0 + timedelta(days=1, minutes=30)),
    ("f2", b"other topic", T0 + timedelta(minutes=30)),
]


def write_archive(
    spark: SparkSession, path: Path, rows: Sequence[tuple[str, bytes, datetime]]
) -> str:
    """An archive as nsqpy-archive lays it out, from (topic, body, timestamp) rows."""
    data = [
        (f"{i:016x}", body, ts, 1, "nsqpy_archive", "127.0.0.1:4150", topic)
        for i, (topic, body, ts) in enumerate(rows)
    ]
    df = spark.createDataFrame(
        data,
        "id string, body binary, timestamp timestamp, attempts int, channel string, "
        "nsqd string, topic string",
    )
    with_archive_columns(df).write.partitionBy(*PARTITION_COLUMNS).parquet(str(path))
    return str(path)


def consume(nsqd: Nsqd, topic: str, count: int, timeout: float = 60) -> list[sync.Message]:
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


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def shared_session(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """Make the commands use the test run's session (a second one would cost a JVM)."""

    @contextmanager
    def session(master: str, app: str) -> Iterator[SparkSession]:
        yield spark

    monkeypatch.setattr(cli, "session", session)
    return spark


def test_topic_and_half_open_time_range_select_what_is_replayed(
    shared_session: SparkSession,
    nsqd_proc: NsqdFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nsqd = nsqd_proc()
    archive = write_archive(shared_session, tmp_path / "archive", FILTER_ROWS)

    code = nsqpy_replay.main([
        "--input", archive, "--destination-topic", "f_out", "--topic", "f1",
        "--nsqd-tcp-address", nsqd.tcp_address,
        "--from", "2026-11-22T03:00:00Z", "--to", "2026-11-22T05:00:00+01:00",
    ])  # fmt: skip

    assert code == 0
    assert "replayed 3 messages to f_out" in capsys.readouterr().out
    assert nsqd.topic_depth("f_out") == 3
    assert sorted(m.body for m in consume(nsqd, "f_out", 3)) == [b"first", b"last", b"middle"]


def test_times_relative_to_now_select_the_recent_messages(
    shared_session: SparkSession,
    nsqd_proc: NsqdFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nsqd = nsqd_proc()
    now = datetime.now(UTC)
    rows = [
        ("n1", b"three hours ago", now - timedelta(hours=3)),
        ("n1", b"half an hour ago", now - timedelta(minutes=30)),
        ("n1", b"a minute ago", now - timedelta(minutes=1)),
    ]
    archive = write_archive(shared_session, tmp_path / "archive", rows)

    code = nsqpy_replay.main([
        "--input", archive, "--destination-topic", "n_out", "--nsqd-tcp-address",
        nsqd.tcp_address, "--from=-1h", "--to", "now-10m",
    ])  # fmt: skip

    assert code == 0
    assert "replayed 1 messages to n_out" in capsys.readouterr().out
    assert nsqd.topic_depth("n_out") == 1  # nothing else was published
    assert [m.body for m in consume(nsqd, "n_out", 1)] == [b"half an hour ago"]


def test_a_range_that_selects_nothing_says_so_with_exit_status_3(
    shared_session: SparkSession,
    nsqd_proc: NsqdFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The usual cause: an example's fixed dates copied on another day."""
    nsqd = nsqd_proc()
    archive = write_archive(shared_session, tmp_path / "archive", FILTER_ROWS)

    code = nsqpy_replay.main([
        "--input", archive, "--destination-topic", "e_out", "--topic", "f1",
        "--nsqd-tcp-address", nsqd.tcp_address,
        "--from", "2026-11-21T03:00Z", "--to", "2026-11-21T04:00Z",
    ])  # fmt: skip

    assert code == 3
    assert cli.EXIT_NOTHING_SELECTED == 3
    captured = capsys.readouterr()
    assert captured.err == (
        "nsqpy-replay: nothing to replay: no archived message of topic f1 published in "
        "[2026-11-21T03:00:00Z, 2026-11-21T04:00:00Z); it holds messages published from "
        "2026-11-22T02:59:59.999999Z to 2026-11-23T03:30:00Z\n"
    )
    assert "replayed" not in captured.out
    topics = nsqd.get("/stats?format=json").get("topics") or []
    assert [t["topic_name"] for t in topics] == []  # nothing was published

    code = nsqpy_replay.main([
        "--input", archive, "--destination-topic", "e_out", "--topic", "nosuch",
        "--nsqd-tcp-address", nsqd.tcp_address,
    ])  # fmt: skip
    assert code == 3
    assert capsys.readouterr().err == (
        "nsqpy-replay: nothing to replay: no archived message of topic nosuch; "
        "it holds none of those topics\n"
    )


def test_rate_limit_bounds_the_publish_rate(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc()
    count, rate, tasks = 240, 80.0, 2
    rows = [("r1", f"m{i:04d}".encode(), T0 + timedelta(seconds=i)) for i in range(count)]
    archive = write_archive(spark, tmp_path / "archive", rows)

    result = run_replay(
        spark,
        ReplayConfig(inputs=(archive,), destination_topic="r_out",
                     nsqd_tcp_addresses=(nsqd.tcp_address,), rate=rate, tasks=tasks),
        lambda line: None,
    )  # fmt: skip

    assert result.messages == count
    stamps = sorted(m.timestamp for m in consume(nsqd, "r_out", count))
    span = (stamps[-1] - stamps[0]) / 1e9  # nsqd's publish times, nanoseconds
    # Each task may run ahead by one chunk released plus one being published (2 x 4 rows).
    burst = tasks * 2 * 4
    # Unpaced, 240 messages take a few milliseconds; paced, at least (240 - 16) / 80 = 2.8 s.
    assert count - burst <= rate * 1.25 * span, f"{count} messages in {span:.2f} s"


def test_an_unreachable_nsqd_is_a_job_error_before_any_spark_work(
    spark: SparkSession, tmp_path: Path
) -> None:
    archive = write_archive(spark, tmp_path / "archive", FILTER_ROWS[:1])
    cfg = ReplayConfig(
        inputs=(archive,), destination_topic="x", nsqd_tcp_addresses=(f"127.0.0.1:{closed_port()}",)
    )
    with pytest.raises(JobError, match=r"nsqd 127\.0\.0\.1:\d+ is unreachable"):
        run_replay(spark, cfg, print)


def test_archive_command_names_an_unreachable_nsqd(
    shared_session: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "install_stop_handlers", lambda stop: None)  # keep pytest's
    address = f"127.0.0.1:{closed_port()}"
    code = nsqpy_archive.main([
        "--topic", "t", "--output", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"),
        "--nsqd-tcp-address", address, "--available-now",
    ])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"nsqpy-archive: error: nsqd {address} is unreachable: ")
    assert err.count("\n") == 1


def test_archive_refuses_a_new_checkpoint_on_an_output_another_query_wrote(
    spark: SparkSession, tmp_path: Path
) -> None:
    (tmp_path / "out" / "_spark_metadata").mkdir(parents=True)
    cfg = ArchiveConfig(
        topics=("a",),
        output=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "new-checkpoint"),
        nsqd_tcp_addresses=("127.0.0.1:4150",),
    )
    with pytest.raises(JobError, match="another checkpoint"):
        check_output(spark, cfg)
    (tmp_path / "new-checkpoint" / "offsets").mkdir(parents=True)
    check_output(spark, cfg)  # its own checkpoint: fine

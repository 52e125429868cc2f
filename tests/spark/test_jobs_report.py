"""nsqpy-report on a hand-built archive whose every number is known."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

from nsqpy.cli import nsqpy_report
from nsqpy.spark.jobs import cli
from nsqpy.spark.jobs.layout import PARTITION_COLUMNS, with_archive_columns
from nsqpy.spark.jobs.report import ALL_TOPICS, DelayRow, HourRow, run_report
from nsqpy.spark.jobs.selection import Selection

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

T3 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
T4 = T3 + timedelta(hours=1)
MINUTE = timedelta(minutes=1)
#: (nsqd, id, topic, body, published, attempts, delay to archiving in ms)
MESSAGES = [
    ("n1:4150", "a1", "r1", b"x" * 10, T3 + 5 * MINUTE, 1, 100),
    ("n1:4150", "a2", "r1", b"x" * 20, T3 + 15 * MINUTE, 1, 200),
    ("n1:4150", "a3", "r1", b"x" * 30, T3 + 59 * MINUTE, 2, 300),
    ("n1:4150", "a4", "r1", b"x" * 40, T4, 1, 400),
    ("n2:4150", "a1", "r1", b"x" * 50, T4 + 30 * MINUTE, 3, 1000),  # same id, other nsqd
    ("n1:4150", "b1", "r2", b"y" * 7, T3 + 30 * MINUTE, 1, 50),
]
#: Archived a second time, later and after another delivery: the report counts the first copy.
DUPLICATE = ("n1:4150", "a1", "r1", b"x" * 10, T3 + 5 * MINUTE, 2, 5000)


def write_archive(spark: SparkSession, path: Path) -> str:
    rows = [
        (msg_id, body, ts, attempts, "nsqpy_archive", nsqd, topic, ts + timedelta(milliseconds=ms))
        for nsqd, msg_id, topic, body, ts, attempts, ms in [*MESSAGES, DUPLICATE]
    ]
    df = spark.createDataFrame(
        rows,
        "id string, body binary, timestamp timestamp, attempts int, channel string, "
        "nsqd string, topic string, archived timestamp",
    )
    archive = with_archive_columns(df, archived_at=df["archived"])
    archive.write.partitionBy(*PARTITION_COLUMNS).parquet(str(path))
    return str(path)


@pytest.fixture
def archive(spark: SparkSession, tmp_path: Path) -> str:
    return write_archive(spark, tmp_path / "archive")


def test_counts_per_hour_attempts_and_delay_percentiles(spark: SparkSession, archive: str) -> None:
    report = run_report(spark, [archive], Selection())

    assert (report.rows, report.messages) == (7, 6)
    assert report.hourly == [
        HourRow("r1", T3, 3, 60),
        HourRow("r1", T4, 2, 90),
        HourRow("r2", T3, 1, 7),
    ]
    assert report.attempts == [(1, 4), (2, 1), (3, 1)]
    # Nearest rank: r1's delays are 100, 200, 300, 400, 1000 (the duplicate's 5000 is not).
    assert report.delays == [
        DelayRow("r1", 5, (300.0, 1000.0, 1000.0), 1000.0),
        DelayRow("r2", 1, (50.0, 50.0, 50.0), 50.0),
        DelayRow(ALL_TOPICS, 6, (200.0, 1000.0, 1000.0), 1000.0),
    ]


def test_selection_narrows_the_report(spark: SparkSession, archive: str) -> None:
    report = run_report(spark, [archive], Selection(topics=("r1",), start=T4))
    assert report.hourly == [HourRow("r1", T4, 2, 90)]
    assert report.attempts == [(1, 1), (3, 1)]


@pytest.fixture
def shared_session(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """The commands use the test run's session (a second one would cost another JVM)."""

    @contextmanager
    def session(master: str, app: str) -> Iterator[SparkSession]:
        yield spark

    monkeypatch.setattr(cli, "session", session)
    return spark


def test_command_prints_the_table_and_writes_the_chart(
    shared_session: SparkSession,
    archive: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    chart = tmp_path / "charts" / "report.png"

    code = nsqpy_report.main(["--input", archive, "--chart", str(chart)])

    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("6 messages (7 archived rows, 1 duplicates)")
    assert re.search(r"^r1 +2026-11-22 04:00 +2 +90$", out, re.MULTILINE), out
    assert re.search(r"^r1 +5 +300\.0 +1000\.0 +1000\.0 +1000\.0$", out, re.MULTILINE), out
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert chart.stat().st_size > 10_000  # three panels drawn, not an empty canvas


def test_a_missing_input_is_one_error_line_and_exit_1(
    shared_session: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    code = nsqpy_report.main(["--input", str(missing), "--chart", str(tmp_path / "c.png")])
    assert code == 1
    assert capsys.readouterr().err == f"nsqpy-report: error: input path does not exist: {missing}\n"
    assert not (tmp_path / "c.png").exists()


def test_a_range_that_selects_nothing_is_exit_3_without_a_chart(
    shared_session: SparkSession, archive: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "c.png"
    code = nsqpy_report.main(
        ["--input", archive, "--chart", str(chart), "--from=-1h", "--topic", "r2"]
    )
    assert code == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.fullmatch(
        r"nsqpy-report: nothing to report: no archived message of topic r2 published at or "
        r"after \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z; it holds messages published "
        r"from 2026-11-22T03:30:00Z to 2026-11-22T03:30:00Z\n",
        captured.err,
    ), captured.err
    assert not chart.exists()


def test_an_empty_archive_is_nothing_to_report(
    shared_session: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code = nsqpy_report.main(["--input", str(empty), "--chart", str(tmp_path / "c.png")])
    assert code == 3
    assert capsys.readouterr().err == (
        "nsqpy-report: nothing to report: no archived message of any topic; it is empty\n"
    )

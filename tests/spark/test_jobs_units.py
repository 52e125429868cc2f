"""The jobs' pure parts: pacing on a fake clock, report text, option checks, reachability."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

from nsqpy.spark.jobs.errors import JobError, spark_failure
from nsqpy.spark.jobs.pacing import Pacer, chunk_size, pace_batches
from nsqpy.spark.jobs.preflight import check_lookupd, check_nsqd
from nsqpy.spark.jobs.progress import BatchLog
from nsqpy.spark.jobs.report import DelayRow, HourRow, Report
from nsqpy.spark.jobs.report_output import format_report
from nsqpy.spark.jobs.selection import Selection, epoch_micros, parse_utc


class FakeTime:
    """A clock that only moves when the code under test sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


class Rows:
    """A list that slices like a pyarrow RecordBatch."""

    def __init__(self, items: list[int]) -> None:
        self.items = items

    @property
    def num_rows(self) -> int:
        return len(self.items)

    def slice(self, offset: int, length: int) -> Rows:
        return Rows(self.items[offset : offset + length])


def release_times(batches: list[Rows], rate: float) -> list[tuple[float, int]]:
    fake = FakeTime()
    pacer = Pacer(rate, fake.clock, fake.sleep)
    return [(fake.now, part.num_rows) for part in pace_batches(batches, pacer, chunk_size(rate))]


def test_batches_are_cut_into_chunks_released_on_schedule() -> None:
    times = release_times([Rows(list(range(25))), Rows(list(range(30)))], rate=100.0)
    # 100/s: chunks of 10 rows (100 ms); a batch's short tail is its own chunk.
    assert [n for _, n in times] == [10, 10, 5, 10, 10, 10]
    assert [round(t, 6) for t, _ in times] == [0.0, 0.1, 0.2, 0.25, 0.35, 0.45]


def test_released_rows_never_exceed_rate_times_elapsed_plus_one_chunk() -> None:
    rate = 40.0
    released = 0
    for at, rows in release_times([Rows(list(range(1000)))], rate):
        released += rows
        assert released <= rate * at + chunk_size(rate) + 1e-9


def test_a_stall_earns_no_credit() -> None:
    fake = FakeTime()
    pacer = Pacer(10.0, fake.clock, fake.sleep)
    pacer.admit(1)
    fake.now += 5.0  # the consumer stalled for 5 s
    pacer.admit(1)
    start = fake.now
    pacer.admit(1)  # must still wait a full interval: no burst to "catch up"
    assert fake.now - start == pytest.approx(0.1)


def test_pacer_rejects_a_non_positive_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        Pacer(0)


def test_times_are_utc_unless_an_offset_is_given() -> None:
    assert parse_utc("2026-11-22T03:00:00") == datetime(2026, 11, 22, 3, tzinfo=UTC)
    assert parse_utc("2026-11-22T05:00:00+02:00") == datetime(2026, 11, 22, 3, tzinfo=UTC)
    assert parse_utc("2026-11-22T03:00:00Z") == datetime(2026, 11, 22, 3, tzinfo=UTC)
    assert epoch_micros(datetime(1970, 1, 1, 0, 0, 1, 7, tzinfo=UTC)) == 1_000_007
    with pytest.raises(JobError, match="ISO 8601"):
        parse_utc("yesterday")


def test_times_relative_to_now() -> None:
    now = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
    assert parse_utc("now", now) == now
    assert parse_utc("now-1h", now) == datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
    assert parse_utc("-90m", now) == datetime(2026, 11, 22, 1, 30, tzinfo=UTC)
    assert parse_utc("now-1h30m", now) == parse_utc("-1.5h", now)
    assert parse_utc("-250ms", now) == now - timedelta(milliseconds=250)
    # Without a given "now", the current time (an absolute time ignores it).
    assert abs(parse_utc("-1h") - (datetime.now(UTC) - timedelta(hours=1))) < timedelta(minutes=1)
    assert parse_utc("2026-11-22T03:00Z", now - timedelta(days=9)) == now
    for bad in ("-1d", "now-", "now--1h", "now-+1h", "-", "now -1h"):
        with pytest.raises(JobError, match="relative to now"):
            parse_utc(bad, now)
    with pytest.raises(JobError, match=r"invalid time 'now\+1h'"):
        parse_utc("now+1h", now)


def test_a_selection_says_what_it_selects() -> None:
    start = datetime(2026, 11, 22, 3, tzinfo=UTC)
    end = start + timedelta(hours=1, microseconds=5)
    assert Selection(topics=("a", "b"), start=start, end=end).describe() == (
        "topic a, b published in [2026-11-22T03:00:00Z, 2026-11-22T04:00:00.000005Z)"
    )
    assert (
        Selection(start=start).describe() == "any topic published at or after 2026-11-22T03:00:00Z"
    )
    assert Selection(end=start).describe() == "any topic published before 2026-11-22T03:00:00Z"
    assert Selection(topics=("a",)).describe() == "topic a"


def test_selection_rejects_an_empty_range_and_bad_topics() -> None:
    start = datetime(2026, 11, 22, tzinfo=UTC)
    with pytest.raises(JobError, match="empty time range"):
        Selection(start=start, end=start)
    with pytest.raises(JobError, match="invalid topic"):
        Selection(topics=("no spaces",))


def test_report_text() -> None:
    hour = datetime(2026, 11, 22, 3, tzinfo=UTC)
    report = Report(
        rows=12,
        messages=10,
        hourly=[HourRow("events", hour, 10, 1234)],
        attempts=[(1, 9), (2, 1)],
        delays=[DelayRow("events", 10, (5.0, 9.0, 10.0), 10.0)],
    )
    text = format_report(report)
    assert text.startswith("10 messages (12 archived rows, 2 duplicates)")
    assert "events  2026-11-22 03:00        10   1234" in text
    assert "attempts  messages\n1                9\n2                1" in text
    assert "events        10  5.0  9.0  10.0  10.0" in text


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_addresses_are_named() -> None:
    port = _closed_port()
    with pytest.raises(JobError, match=f"nsqd 127.0.0.1:{port} is unreachable"):
        check_nsqd([f"127.0.0.1:{port}"], timeout=2)
    with pytest.raises(JobError, match=f"nsqlookupd 127.0.0.1:{port} is unreachable"):
        check_lookupd([f"127.0.0.1:{port}"], timeout=2)
    with pytest.raises(JobError, match="want host:port"):
        check_nsqd(["localhost"])


@dataclass
class FakeProgress:
    batchId: int
    numInputRows: int
    processedRowsPerSecond: float = 100.0
    durationMs: dict[str, int] = field(default_factory=lambda: {"triggerExecution": 1500})


def test_batch_log_prints_each_batch_with_rows_once() -> None:
    lines: list[str] = []
    log = BatchLog(lines.append, clock=lambda: 10.0)
    log.update([FakeProgress(0, 150), FakeProgress(1, 0)])  # batch 1: the commit tick
    # An idle query reports the batch id it has not run yet, with no rows; the real batch 2
    # arrives later and must still be printed.
    log.update([FakeProgress(0, 150), FakeProgress(1, 0), FakeProgress(2, 0)])
    log.update([FakeProgress(1, 0), FakeProgress(2, 0), FakeProgress(2, 50)])
    assert lines == [
        "batch 0: 150 rows in 1.50 s, 100 rows/s",
        "batch 2: 50 rows in 1.50 s, 100 rows/s",
    ]
    assert (log.totals.batches, log.totals.rows) == (2, 200)


def test_a_spark_failure_is_summed_up_by_its_root_exception_line() -> None:
    text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_DATA_SOURCE_ERROR] "
        "Failed to plan: Traceback (most recent call last):\n"
        '  File "options.py", line 206, in _reject_unknown\n'
        "    raise ValueError(\n"
        "ValueError: nsq: unknown option 'x' for reading\n\n"
        "During handling of the above exception, another exception occurred:\n"
        "UnboundLocalError: cannot access local variable 'reader'\n"
    )
    error = spark_failure("archive query failed", RuntimeError(text))
    assert str(error) == "archive query failed: ValueError: nsq: unknown option 'x' for reading"
    plain = spark_failure("replay failed", RuntimeError("[PATH_NOT_FOUND] Path does not exist"))
    assert str(plain) == "replay failed: [PATH_NOT_FOUND] Path does not exist"

"""Relay status lines (nsqpy.tools.timer_metrics), as bitly/timer_metrics prints them."""

from __future__ import annotations

from nsqpy.tools.timer_metrics import TimerMetrics, format_status, percentile

MS = 1_000_000


def test_percentile_index_rule() -> None:
    ordered = list(range(100))
    assert percentile(95.0, ordered) == 96  # ceil(95 + 0.5)
    assert percentile(99.0, ordered) == 99  # clamped to the last
    assert percentile(50.0, [7]) == 7
    assert percentile(99.0, []) == 0


def test_format_status() -> None:
    line = format_status("[aggregate]:", [3 * MS, 1 * MS, 2 * MS, 2 * MS + 500_000])
    assert line == "[aggregate]: finished 4 - 99th: 3.00ms - 95th: 3.00ms - avg: 2.12ms"


def test_logs_when_the_window_wraps() -> None:
    logged: list[str] = []
    metrics = TimerMetrics(100, "[x]:", logged.append)
    for _ in range(100):
        metrics.record(1 * MS)
    assert logged == []  # a full window, not yet wrapped
    metrics.record(5 * MS)  # sample 101 overwrites slot 1 and reports
    assert logged == ["[x]: finished 100 - 99th: 5.00ms - 95th: 1.00ms - avg: 1.04ms"]
    for _ in range(99):
        metrics.record(1 * MS)
    assert len(logged) == 1
    metrics.record(1 * MS)
    assert len(logged) == 2


def test_small_windows_warn_and_zero_disables() -> None:
    logged: list[str] = []
    TimerMetrics(10, "", logged.append)
    assert logged == [
        "Warning: use more than 100 status values for accurate percentiles (configured with 10)"
    ]
    disabled = TimerMetrics(0, "", logged.append)
    for _ in range(1000):
        disabled.record(MS)
    assert len(logged) == 1

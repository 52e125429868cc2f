"""Request-latency status lines, as NSQ's relays log them (bitly/timer_metrics semantics).

A window of the last ``status_every`` durations; each time the window wraps (on sample
``status_every + 1``, ``2 * status_every + 1``, ...) one line reports it:
``<prefix> finished <n> - 99th: 1.23ms - 95th: 1.01ms - avg: 0.50ms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

#: Where status lines go (a utility passes its Go-style logger).
Log = Callable[[str], None]


def percentile(perc: float, ordered: Sequence[int]) -> int:
    """The sample timer_metrics reports as ``perc``: index ceil(perc% * n + 0.5), clamped."""
    if not ordered:
        return 0
    index = math.ceil(perc / 100.0 * len(ordered) + 0.5)
    return ordered[min(index, len(ordered) - 1)]


def format_status(prefix: str, durations_ns: Sequence[int]) -> str:
    """The status line for a window of durations (nanoseconds)."""
    ordered = sorted(durations_ns)
    count = len(ordered)
    avg = sum(ordered) // count if count else 0  # Go divides Durations: whole nanoseconds
    p95, p99 = percentile(95.0, ordered), percentile(99.0, ordered)
    return (
        f"{prefix} finished {count} - 99th: {p99 / 1e6:.2f}ms"
        f" - 95th: {p95 / 1e6:.2f}ms - avg: {avg / 1e6:.2f}ms"
    )


class TimerMetrics:
    """Collects durations and logs a status line every ``status_every`` (0 disables it)."""

    def __init__(self, status_every: int, prefix: str, log: Log) -> None:
        self.status_every = status_every
        self.prefix = prefix
        self._log = log
        self._timings: list[int] = []
        self._position = 0
        if 0 < status_every < 100:
            log(
                "Warning: use more than 100 status values for accurate percentiles"
                f" (configured with {status_every})"
            )

    def record(self, duration_ns: int) -> None:
        if self.status_every == 0:
            return
        self._position += 1
        wrapped = self._position > self.status_every
        if wrapped:
            self._position = 1
        if self._position > len(self._timings):
            self._timings.append(duration_ns)
        else:
            self._timings[self._position - 1] = duration_ns
        if wrapped:
            self._log(format_status(self.prefix, self._timings))

"""``nsqpy.nsqd.core.quantile``: CKMS targeted streams and NSQ's two-stream sliding window.

Time is injected (``now_ns``), so window rotation is tested without waiting. The optimised
stream is checked entry for entry against a plain transcription of perks' algorithm.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable

import pytest

from nsqpy.nsqd.core.quantile import (
    BUFFER_SIZE,
    EPSILON,
    NOT_TRACKED,
    LatencySummary,
    TargetedStream,
    WindowedQuantile,
    aggregate,
)

SECOND = 1_000_000_000
WINDOW = 600 * SECOND  # nsqd's default --e2e-processing-latency-window-time (10m)
HALF = WINDOW // 2


class PerksReference:
    """bmizerany/perks' targeted stream, step by step as the Go code does it (slow)."""

    def __init__(self, quantiles: tuple[float, ...]) -> None:
        self.quantiles = quantiles
        self.buffer: list[float] = []
        self.summary: list[list[float]] = []  # [value, width, delta]
        self.n = 0.0

    def allowed(self, r: float) -> float:
        best = math.inf
        for q in self.quantiles:
            if q * self.n <= r:
                f = (2 * EPSILON * r) / q
            else:
                f = (2 * EPSILON * (self.n - r)) / (1 - q) if q != 1 else math.inf
            best = min(best, f)
        return best

    def insert(self, value: float) -> None:
        self.buffer.append(value)
        if len(self.buffer) == BUFFER_SIZE:
            self.flush()
            self.compress()

    def flush(self) -> None:
        self.buffer.sort()
        self.merge([(v, 1.0) for v in self.buffer])
        self.buffer = []

    def merge(self, samples: list[tuple[float, float]]) -> None:
        r, i = 0.0, 0
        for value, width in sorted(samples):
            while i < len(self.summary):
                entry = self.summary[i]
                if entry[0] > value:
                    f = self.allowed(r)
                    delta = (f if f == math.inf else math.floor(f)) - 1
                    self.summary.insert(i, [value, width, delta])
                    i += 1
                    break
                r += entry[1]
                i += 1
            else:
                self.summary.append([value, width, 0.0])
                i += 1
            self.n += width

    def compress(self) -> None:
        if len(self.summary) < 2:
            return
        x = self.summary[-1]
        xi = len(self.summary) - 1
        r = self.n - 1 - x[1]
        for i in range(len(self.summary) - 2, -1, -1):
            c = self.summary[i]
            if c[1] + x[1] + x[2] <= self.allowed(r):
                x[1] += c[1]
                del self.summary[i]
                xi -= 1
            else:
                x, xi = c, i
            r -= c[1]

    def query(self, q: float) -> float:
        if not self.summary:
            if not self.buffer:
                return 0.0
            index = int(len(self.buffer) * q)
            self.buffer.sort()
            return self.buffer[index - 1 if index > 0 else 0]
        self.flush()
        t = math.ceil(q * self.n)
        t += math.ceil(self.allowed(t) / 2)
        prev, r = self.summary[0], 0.0
        for entry in self.summary[1:]:
            if r + entry[1] + entry[2] > t:
                return prev[0]
            r += prev[1]
            prev = entry
        return prev[0]


def rank_error(data: list[float], value: float, q: float) -> float:
    """How far (as a fraction of n) ``value``'s rank range is from rank q*n."""
    ordered = sorted(data)
    low = bisect.bisect_left(ordered, value)
    high = bisect.bisect_right(ordered, value)
    target = q * len(ordered)
    if low <= target <= high:
        return 0.0
    return min(abs(low - target), abs(high - target)) / len(ordered)


# -- the stream ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantiles", "count"),
    [
        ((0.5,), 12_345),
        ((0.99, 0.5), 12_345),
        ((1.0, 0.99, 0.5), 12_345),
        ((1.0, 0.99, 0.95, 0.75, 0.5, 0.25), 12_345),
        ((1.0,), 12_345),
        # long runs: the summary's entries grow wide and whole gaps fold in one step
        ((1.0, 0.99, 0.5), 150_000),
        ((0.999, 0.98, 0.1), 150_000),
    ],
)
def test_stream_is_perks_entry_for_entry(quantiles: tuple[float, ...], count: int) -> None:
    rng = random.Random(quantiles[0] * 1000 + len(quantiles) + count)
    ours, reference = TargetedStream(quantiles), PerksReference(quantiles)
    for step in range(count):
        # integers with repeats too: ties are where insertion order matters
        value = float(rng.randrange(1000)) if step % 3 else rng.expovariate(1e-6)
        ours.insert(value)
        reference.insert(value)
        if step % 7777 == 7776:  # a query merges the buffer without compressing it
            assert ours.query(quantiles[-1]) == reference.query(quantiles[-1])
        if step % 2000 == 1999:
            assert [list(e) for e in ours._summary] == reference.summary
    assert ours.count == len(reference.buffer) + reference.n == count
    for q in quantiles:
        assert ours.query(q) == reference.query(q)
    assert [list(e) for e in ours._summary] == reference.summary


@pytest.mark.parametrize("order", ["rising", "falling", "constant"])
def test_ordered_input_is_perks_too(order: str) -> None:
    """A growing backlog (rising latencies), a draining one, a steady one."""
    quantiles = (1.0, 0.99, 0.5)
    data = {
        "rising": [float(i) for i in range(20_000)],
        "falling": [float(20_000 - i) for i in range(20_000)],
        "constant": [7.0] * 20_000,
    }[order]
    ours, reference = TargetedStream(quantiles), PerksReference(quantiles)
    for value in data:
        ours.insert(value)
        reference.insert(value)
    assert [list(e) for e in ours._summary] == reference.summary
    assert [ours.query(q) for q in quantiles] == [reference.query(q) for q in quantiles]


def test_merge_is_perks_merge() -> None:
    quantiles = (0.99, 0.9, 0.5)
    rng = random.Random(7)
    left, right = TargetedStream(quantiles), TargetedStream(quantiles)
    reference = PerksReference(quantiles)
    for _ in range(3000):
        left.insert(rng.gauss(100, 10))
        right.insert(rng.gauss(130, 20))
    reference.merge(left.samples())
    reference.merge(right.samples())
    merged = TargetedStream(quantiles)
    merged.merge(left.samples())
    merged.merge(right.samples())
    assert [list(e) for e in merged._summary] == reference.summary
    assert merged.count == 6000
    assert [merged.query(q) for q in quantiles] == [reference.query(q) for q in quantiles]


@pytest.mark.parametrize(
    ("name", "draw"),
    [
        ("uniform", lambda rng: rng.uniform(0, 1e9)),
        ("exponential", lambda rng: rng.expovariate(1 / 5e6)),
        ("lognormal", lambda rng: rng.lognormvariate(15, 1.5)),
    ],
)
def test_percentiles_within_ckms_bounds(name: str, draw: Callable[[random.Random], float]) -> None:
    rng = random.Random(name)
    data = [draw(rng) for _ in range(50_000)]
    quantiles = (0.99, 0.95, 0.5)
    stream = TargetedStream(quantiles)
    for value in data:
        stream.insert(value)
    for q in quantiles:
        # The paper bounds the rank error by epsilon * n; perks' query is looser (it reads
        # up to f(q*n)/2 ranks past q*n, past entries each uncertain by up to f): over 360
        # seeded runs the worst was 3.1 epsilon at q=0.95, 1 epsilon at q=0.99. perks' own
        # tests allow 3% of the value on uniform data. Go's stream gives these same answers
        # (test_stream_is_perks_entry_for_entry), so this is the bound NSQ users get.
        assert rank_error(data, stream.query(q), q) <= 4 * EPSILON, (name, q)
    assert rank_error(data, stream.query(0.99), 0.99) <= EPSILON
    assert len(stream._summary) < 200  # a summary, not a copy of the data


def test_small_sets_are_exact() -> None:
    stream = TargetedStream((1.0, 0.5))
    for value in (7.0, 3.0, 9.0, 1.0, 5.0, 2.0, 8.0, 4.0, 6.0, 10.0):
        stream.insert(value)
    # perks' buffer path: sorted[int(n*q) - 1]
    assert (stream.query(1.0), stream.query(0.5)) == (10.0, 5.0)
    assert stream.count == 10
    assert TargetedStream((0.5,)).query(0.5) == 0.0


def test_reset_forgets_everything() -> None:
    stream = TargetedStream((0.5,))
    for value in range(BUFFER_SIZE * 3):
        stream.insert(float(value))
    stream.reset()
    assert (stream.count, stream.query(0.5), stream.samples()) == (0, 0.0, [])


# -- the window ----------------------------------------------------------------------------


def test_window_percentiles_of_a_known_distribution() -> None:
    window = WindowedQuantile(WINDOW, (1.0, 0.99, 0.5), now_ns=0)
    values = list(range(1, 20_001))
    random.Random(3).shuffle(values)
    for i, value in enumerate(values):
        window.insert(value * 1000, now_ns=i * 1000)  # 20ms of inserts, well inside a half
    summary = window.summary(now_ns=SECOND)
    assert summary.count == 20_000
    assert [q for q, _ in summary.percentiles or []] == [1.0, 0.99, 0.5]
    results = dict(summary.percentiles or [])
    assert results[1.0] == 20_000_000  # the maximum survives compression
    bound = 4 * EPSILON * 20_000 * 1000  # perks' looseness: see test_percentiles_within_...
    assert abs(results[0.99] - 19_800_000) <= bound
    assert abs(results[0.5] - 10_000_000) <= bound


def test_window_rotation_drops_data_older_than_the_window() -> None:
    window = WindowedQuantile(WINDOW, (0.5,), now_ns=0)
    for _ in range(100):
        window.insert(1000, now_ns=10)
    assert window.summary(now_ns=HALF).count == 100  # not stale until past half a window
    assert window.summary(now_ns=HALF + 1).count == 100  # moved once: kept in the older half
    for _ in range(50):
        window.insert(9000, now_ns=HALF + 2)
    both = window.summary(now_ns=HALF + 3)
    assert both.count == 150
    assert both.percentiles == [(0.5, 1000.0)]
    later = window.summary(now_ns=WINDOW + 1)  # the first 100 are a whole window old
    assert later.count == 50
    assert later.percentiles == [(0.5, 9000.0)]
    assert window.summary(now_ns=10 * WINDOW).count == 0  # long idle: both halves empty


def test_window_inserts_after_a_long_idle_start_afresh() -> None:
    window = WindowedQuantile(WINDOW, (0.5,), now_ns=0)
    window.insert(5, now_ns=1)
    window.insert(7, now_ns=7 * WINDOW + 3)
    summary = window.summary(now_ns=7 * WINDOW + 4)
    assert (summary.count, summary.percentiles) == (1, [(0.5, 7.0)])


def test_merge_and_topic_aggregate() -> None:
    fast = WindowedQuantile(WINDOW, (0.99, 0.5), now_ns=0)
    slow = WindowedQuantile(WINDOW, (0.99, 0.5), now_ns=0)
    for i in range(1000):
        fast.insert(1_000 + i, now_ns=i)
        slow.insert(1_000_000 + i, now_ns=i)
    slow.insert(5, now_ns=HALF + 10)  # slow has data in both halves
    total = aggregate([fast, None, slow], now_ns=HALF + 20)
    assert total.count == 2001
    values = dict(total.percentiles or [])
    assert values[0.99] >= 1_000_000  # the slow channel's tail
    assert 1_000 <= values[0.5] <= 1_000_000 + 999
    # the channels themselves are unchanged by being aggregated
    assert fast.summary(now_ns=HALF + 20).count == 1000
    assert slow.summary(now_ns=HALF + 20).count == 1001
    assert aggregate([None, None], now_ns=0) is NOT_TRACKED
    assert aggregate([], now_ns=0) == LatencySummary(0, None)


def test_tracked_but_empty_reports_every_percentile_as_zero() -> None:
    window = WindowedQuantile(WINDOW, (1.0, 0.5), now_ns=0)
    assert window.summary(now_ns=5) == LatencySummary(0, [(1.0, 0.0), (0.5, 0.0)])


def test_the_100th_percentile_alone_keeps_perks_quirk() -> None:
    """nsqd's numbers, not the right ones: alone, 1.0 goes wrong across a window move."""
    window = WindowedQuantile(WINDOW, (1.0,), now_ns=0)
    for value in random.Random(5).sample(range(1, 101), 100):
        window.insert(value, now_ns=1)
    for value in [50.5, *range(101, 151)]:  # newer latencies, one below the older maximum
        window.insert(value, now_ns=HALF + 1)
    [(_, value)] = window.summary(now_ns=HALF + 2).percentiles or []
    assert value < 150  # perks gives a low sample here, and so does nsqd
    paired = WindowedQuantile(WINDOW, (1.0, 0.99), now_ns=0)
    for value in random.Random(5).sample(range(1, 101), 100):
        paired.insert(value, now_ns=1)
    for value in [50.5, *range(101, 151)]:
        paired.insert(value, now_ns=HALF + 1)
    assert dict(paired.summary(now_ns=HALF + 2).percentiles or [])[1.0] == 150

"""End-to-end latency percentiles: targeted quantile streams over a sliding window.

``TargetedStream`` is the CKMS "targeted quantiles" summary (Cormode, Korn, Muthukrishnan,
Srivastava: *Effective Computation of Biased Quantiles over Data Streams*) with the behaviour
of the ``bmizerany/perks`` stream NSQ uses: epsilon 0.01, inserts buffered 500 at a time and
merged into the summary (then compressed) in one batch, exact answers from the buffer while
nothing has been merged yet. ``WindowedQuantile`` is NSQ's ``internal/quantile``: two such
streams, the older one reset every ``window / 2``, both merged to answer a query.

Pure: every call that depends on time takes ``now_ns``; nothing here reads a clock.

perks' quirks are kept, since they decide the numbers nsqd reports. The one users can see: a
stream targeting only the 100th percentile gives an infinite error allowance to every entry
below the top, so once both halves of a window hold data, the merged query can answer with a
low sample. nsqd does the same; any second percentile (``1.0,0.99``) avoids it.

Cost: an insert is a comparison and a list append; every 500th pays for the batch: a sort
(in C) and one downward pass that merges and compresses at once, visiting the summary's
entries (a few dozen) and the values it keeps, and stepping over runs of values that fold
into one entry. ``python -m nsqpy.nsqd.core.quantile`` prints the amortised cost per insert.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

#: The stream's error bound (perks' default, which NSQ keeps).
EPSILON: Final = 0.01
#: Inserts held before a batch is merged into the summary (perks' buffer capacity).
BUFFER_SIZE: Final = 500

_INF: Final = math.inf
_EPS2: Final = 2 * EPSILON

#: One summary entry: value, width (values it stands for), delta (its rank uncertainty).
Sample = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """What ``/stats``, statsd and ``/metrics`` report for a topic or a channel.

    ``percentiles`` is ``[(quantile, value_ns), ...]`` in the configured order (descending),
    or None when percentiles are not tracked (nsqd's ``"percentiles": null``).
    """

    count: int
    percentiles: list[tuple[float, float]] | None


NOT_TRACKED: Final = LatencySummary(0, None)


def _ceil(value: float) -> float:
    return value if value == _INF else float(math.ceil(value))


class TargetedStream:
    """Approximate quantiles of a stream, accurate around the targeted ones.

    A query for a quantile that was not targeted gives an unspecified (but valid) sample.
    """

    __slots__ = ("_buffer", "_highs", "_n", "_qs", "_summary", "quantiles")

    def __init__(self, quantiles: Sequence[float]) -> None:
        self.quantiles = tuple(quantiles)
        self._qs = sorted(set(self.quantiles))
        # Per target, ascending: the r-branch's divisor (q) and the (n - r)-branch's (1 - q),
        # None for the 100th percentile, whose (n - r)-branch is infinite (Go divides by 0).
        self._highs = [1.0 - q if q < 1.0 else None for q in self._qs]
        self._buffer: list[float] = []
        self._summary: list[Sample] = []
        self._n = 0.0

    # -- the invariant ------------------------------------------------------------------
    # f(r, n), how much rank error an entry at rank r may carry, is perks' minimum over the
    # targets of 2*eps*r/q (targets with q*n <= r) or 2*eps*(n-r)/(1-q) (the others). The
    # first falls as q grows and the second rises, so with the targets sorted the minimum is
    # one of the two either side of the split: ``_allowed`` needs the split ``j`` (how many
    # targets have q*n <= r) and evaluates two terms, in Go's order of operations so floors
    # land where perks' do. The batch loop tracks j as r falls (``_Fold``) and inlines this.
    def _allowed(self, n: float, r: float, j: int) -> float:
        best = (_EPS2 * r) / self._qs[j - 1] if j else _INF
        if j < len(self._qs):
            rest = self._highs[j]
            if rest is not None:  # None: the 100th percentile, whose term is +Inf in Go
                high = (_EPS2 * (n - r)) / rest
                if high < best:
                    best = high
        return best

    def _split(self, n: float, r: float) -> int:
        qs = self._qs
        j = 0
        while j < len(qs) and qs[j] * n <= r:
            j += 1
        return j

    # -- writing ------------------------------------------------------------------------
    def insert(self, value: float) -> None:
        buffer = self._buffer
        buffer.append(value)
        if len(buffer) >= BUFFER_SIZE:
            self._flush_and_compress()

    def merge(self, samples: Iterable[tuple[float, float]]) -> None:
        """Merge another stream's ``samples()`` (value, width) into this one's summary."""
        self._merge_sorted(sorted(samples))

    def reset(self) -> None:
        self._buffer.clear()
        self._summary = []
        self._n = 0.0

    def _flush(self) -> None:
        """Merge the buffered inserts into the summary without compressing (perks' flush).

        Only a query of a stream with inserts pending needs this; NSQ's window queries a
        merged copy instead, so this is not the hot path ``_flush_and_compress`` is.
        """
        buffer = self._buffer
        if buffer:
            buffer.sort()
            self._merge_sorted([(value, 1.0) for value in buffer])
            buffer.clear()

    def _merge_sorted(self, samples: Sequence[tuple[float, float]]) -> None:
        # perks inserts each sample before the first entry with a greater value; its delta
        # comes from the rank r of the entries already there (earlier samples of this batch
        # are not counted in r) and the running count n. One pass builds the same list.
        old = self._summary
        size = len(old)
        new: list[Sample] = []
        i = 0
        r = 0.0
        n = self._n
        for value, width in samples:
            while i < size and old[i][0] <= value:
                new.append(old[i])
                r += old[i][1]
                i += 1
            new.append((value, width, self._insert_delta(n, r) if i < size else 0.0))
            n += width
        new.extend(old[i:])
        self._summary = new
        self._n = n

    def _flush_and_compress(self) -> None:
        """``_flush`` then perks' compress, in one pass from the top (the same result).

        Compress walks the merged list downwards and folds an entry into the one above it
        while their combined width and uncertainty stay within what the invariant allows at
        that rank r. Most of a batch is folded away, and a folded entry's delta is never
        read, so a new sample's delta is only worked out (as ``_flush`` would) when it is
        kept; and the samples between two old entries fold many at a time while the room
        left under the invariant provably covers them. Checked entry for entry against a
        transcription of perks in the tests.
        """
        values = self._buffer
        values.sort()
        old = self._summary
        n0 = self._n
        n = n0 + len(values)
        top = len(old) - 1
        i, t = top, len(values) - 1  # next old entry and next sample, downwards
        if t < 0 and i < 0:
            return
        kept: list[Sample] = []
        above = 0.0  # width of the old entries passed: those above the next sample
        if t >= 0 and (i < 0 or values[t] >= old[i][0]):
            x_value, x_width, x_delta = values[t], 1.0, 0.0  # above every old entry
            t -= 1
        else:
            x_value, x_width, x_delta = old[i]
            above += x_width
            i -= 1
        r = n - 1.0 - x_width
        fold = _Fold(self, n, r)
        eps2, inf = _EPS2, _INF
        drop = 1.0 + eps2 / self._qs[0]  # the most need - f can grow by per sample
        while True:
            # the samples above old[i] (all that are left once the old entries are done)
            low = bisect_left(values, old[i][0], 0, t + 1) if i >= 0 else 0
            bound, low_q, rest = fold.bound, fold.low_q, fold.high_rest
            while t >= low:
                if r < bound:
                    fold.move_down(r)
                    bound, low_q, rest = fold.bound, fold.low_q, fold.high_rest
                f = (eps2 * r) / low_q if low_q else inf  # _allowed, inlined
                if rest is not None:
                    high = (eps2 * (n - r)) / rest
                    if high < f:
                        f = high
                need = 1.0 + x_width + x_delta
                if need <= f:
                    # Folded; and while the room left (f - need) lasts, so are the next ones:
                    # per sample need grows by 1 and f falls by at most eps2/q_min, so
                    # (f - need) / drop samples fold for sure (the floor is the float slack).
                    step = t - low + 1 if f == inf else max(int((f - need) / drop), 1)
                    step = min(step, t - low + 1)
                    x_width += step
                else:
                    step = 1
                    kept.append((x_value, x_width, x_delta))
                    x_value, x_width = values[t], 1.0
                    x_delta = self._insert_delta(n0 + t, n0 - above) if i < top else 0.0
                r -= step
                t -= step
            if i < 0:
                break
            entry = old[i]
            if entry[1] + x_width + x_delta <= fold.allowed(r):
                x_width += entry[1]
            else:
                kept.append((x_value, x_width, x_delta))
                x_value, x_width, x_delta = entry
            r -= entry[1]
            above += entry[1]
            i -= 1
        kept.append((x_value, x_width, x_delta))
        kept.reverse()
        self._summary = kept
        self._n = n
        values.clear()

    def _insert_delta(self, n: float, r: float) -> float:
        """The delta perks gives a sample merged in at count n, below an entry, at rank r."""
        f = self._allowed(n, r, self._split(n, r))
        return (f if f == _INF else math.floor(f)) - 1.0

    # -- reading ------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Values inserted (and merged in) since creation or the last reset."""
        return len(self._buffer) + int(self._n)

    def samples(self) -> list[tuple[float, float]]:
        """(value, width) pairs to ``merge`` elsewhere; compresses first, as perks does."""
        if not self._summary:
            return [(v, 1.0) for v in self._buffer]
        self._flush_and_compress()
        return [(value, width) for value, width, _ in self._summary]

    def query(self, q: float) -> float:
        if not self._summary:
            # Nothing merged yet: an exact answer from the buffer (perks' fast path).
            buffer = self._buffer
            if not buffer:
                return 0.0
            index = int(len(buffer) * q)
            if index > 0:
                index -= 1
            buffer.sort()
            return float(buffer[index])
        self._flush()
        summary = self._summary
        n = self._n
        t = _ceil(q * n)
        t += _ceil(self._allowed(n, t, self._split(n, t)) / 2)
        prev = summary[0]
        r = 0.0
        for entry in summary[1:]:
            if r + entry[1] + entry[2] > t:
                return float(prev[0])
            r += prev[1]
            prev = entry
        return float(prev[0])


class _Fold:
    """The invariant's two candidate terms for a compress pass (fixed n, falling r).

    ``bound`` is q*n of the largest target still on the r-side; once r drops below it that
    target crosses over and ``move_down`` shifts the split (at most once per target).
    """

    __slots__ = ("bound", "high_rest", "j", "low_q", "n", "stream")

    def __init__(self, stream: TargetedStream, n: float, r: float) -> None:
        self.stream = stream
        self.n = n
        self.j = stream._split(n, r)
        self._load()

    def move_down(self, r: float) -> None:
        qs, n, j = self.stream._qs, self.n, self.j
        while j and qs[j - 1] * n > r:
            j -= 1
        self.j = j
        self._load()

    def _load(self) -> None:
        qs, j = self.stream._qs, self.j
        self.low_q = qs[j - 1] if j else 0.0
        self.bound = qs[j - 1] * self.n if j else -_INF
        self.high_rest = self.stream._highs[j] if j < len(qs) else None

    def allowed(self, r: float) -> float:
        if r < self.bound:
            self.move_down(r)
        return self.stream._allowed(self.n, r, self.j)


class WindowedQuantile:
    """NSQ's ``quantile.Quantile``: percentiles over roughly the last ``window_ns``.

    Two streams take turns: inserts go to the current one, and every ``window_ns / 2`` the
    other one is emptied and becomes current. A query merges both, so it covers between half
    a window and a whole one of data.
    """

    __slots__ = ("_current", "_last_move", "_next_move", "_streams", "move_every", "percentiles")

    def __init__(self, window_ns: int, percentiles: Sequence[float], now_ns: int) -> None:
        self.percentiles = tuple(percentiles)
        # Go loops forever on a zero window (every instant is stale); one ns is the least.
        self.move_every = max(window_ns // 2, 1)
        self._streams = (TargetedStream(self.percentiles), TargetedStream(self.percentiles))
        self._current = self._streams[0]
        self._last_move = now_ns
        self._next_move = now_ns + self.move_every

    def empty_like(self, now_ns: int) -> WindowedQuantile:
        """A new, empty window with the same settings (a topic's aggregate starts as one)."""
        return WindowedQuantile(self.move_every * 2, self.percentiles, now_ns)

    def insert(self, value: float, now_ns: int) -> None:
        """Record one latency (ns) observed at ``now_ns``: the FIN hot path."""
        if now_ns > self._next_move:
            self._advance(now_ns)
        current = self._current
        buffer = current._buffer  # TargetedStream.insert, inlined: it runs on every FIN
        buffer.append(value)
        if len(buffer) >= BUFFER_SIZE:
            current._flush_and_compress()

    def _advance(self, now_ns: int) -> None:
        # NSQ moves one half-window at a time while now is past the current half's end;
        # count the moves instead of looping (after two, both streams are empty anyway).
        if now_ns <= self._next_move:
            return
        moves = (now_ns - self._last_move - 1) // self.move_every
        first, second = self._streams
        index = 0 if self._current is first else 1
        if moves >= 2:
            first.reset()
            second.reset()
        index ^= moves & 1
        self._current = self._streams[index]
        if moves == 1:
            self._current.reset()
        self._last_move += moves * self.move_every
        self._next_move = self._last_move + self.move_every

    def merge(self, other: WindowedQuantile, now_ns: int) -> None:
        """Add ``other``'s data, current stream into current, older into older (NSQ's Merge)."""
        self._advance(now_ns)
        other._advance(now_ns)
        mine = 0 if self._current is self._streams[0] else 1
        theirs = 0 if other._current is other._streams[0] else 1
        self._streams[mine].merge(other._streams[theirs].samples())
        self._streams[mine ^ 1].merge(other._streams[theirs ^ 1].samples())
        if self._last_move < other._last_move:
            self._last_move = other._last_move
            self._next_move = self._last_move + self.move_every

    def summary(self, now_ns: int) -> LatencySummary:
        """Count and percentile values over the window, as NSQ's ``Result()``."""
        self._advance(now_ns)
        merged = TargetedStream(self.percentiles)
        merged.merge(self._streams[0].samples())
        merged.merge(self._streams[1].samples())
        return LatencySummary(merged.count, [(q, merged.query(q)) for q in self.percentiles])


def aggregate(windows: Iterable[WindowedQuantile | None], now_ns: int) -> LatencySummary:
    """A topic's figure: its channels' windows merged (NSQ's AggregateChannelE2e...)."""
    total: WindowedQuantile | None = None
    for window in windows:
        if window is None:
            continue
        if total is None:
            total = window.empty_like(now_ns)
        total.merge(window, now_ns)
    return NOT_TRACKED if total is None else total.summary(now_ns)


def _measure() -> None:
    """Print the amortised cost of ``WindowedQuantile.insert`` (best of 7 runs, CPU time)."""
    import random
    import time

    values = [int(random.expovariate(1e-6)) for _ in range(50_000)]

    def run(percentiles: tuple[float, ...]) -> float:
        insert = WindowedQuantile(600 * 10**9, percentiles, 0).insert
        started = time.process_time()
        for value in values:
            insert(value, 1)
        return (time.process_time() - started) / len(values) * 1e9

    for percentiles in ((0.99,), (1.0, 0.99, 0.5), (1.0, 0.99, 0.95, 0.75, 0.5)):
        best = min(run(percentiles) for _ in range(7))
        print(f"{len(percentiles)} percentiles: {best:.0f} ns per insert")


if __name__ == "__main__":
    _measure()

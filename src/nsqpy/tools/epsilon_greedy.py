"""nsq_to_http's ``--mode=epsilon-greedy``: bitly/go-hostpool's epsilon-greedy pool.

The standard pool (:class:`nsqpy.tools.hostpool.HostPool`: round robin, dead hosts skipped) plus
learning which hosts answer fastest:

- with probability epsilon (0.3 at first, times 0.9 at each use, never below 0.01) it explores:
  the standard round-robin choice;
- otherwise it exploits: every usable host that has response times gets a score of
  1 / (weighted average response time in ms), and a host is drawn with probability proportional
  to its score; with no scores yet it falls back to round robin;
- response times of successful requests go into 120 buckets spanning 5 minutes; older buckets
  weigh less (bucket i of 120, oldest first, has weight i/120) and are cleared as time moves on.

go-hostpool rotates the buckets with a ticker goroutine; here they rotate lazily, by the time
elapsed, when the pool is used, which gives the same averages without a task to stop. Responses
faster than 1 ms count as 0 ms, as in go-hostpool, so very fast hosts look unmeasured.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Final

from nsqpy.tools.hostpool import MAX_RETRY_DELAY, HostPool

BUCKETS: Final = 120
INITIAL_EPSILON: Final = 0.3
EPSILON_DECAY: Final = 0.90
MIN_EPSILON: Final = 0.01
DECAY_DURATION: Final = 300.0

log = logging.getLogger("nsqpy.tools.epsilon_greedy")


class _Timings:
    """One host's response times: a ring of per-bucket (count, total ms)."""

    __slots__ = ("counts", "totals")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.totals = [0] * BUCKETS

    def weighted_average(self, index: int) -> float:
        value = last = 0.0
        for i in range(1, BUCKETS + 1):  # oldest bucket first, newest (index) last
            pos = (index + i) % BUCKETS
            if self.counts[pos] > 0:
                last = self.totals[pos] / self.counts[pos]
            value += last * (i / BUCKETS)  # an empty bucket repeats the previous average
        return value


class EpsilonGreedyPool(HostPool):
    """See the module doc. ``rand`` returns floats in [0, 1), ``clock`` monotonic seconds."""

    def __init__(
        self,
        addresses: Sequence[str],
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        decay_duration: float = DECAY_DURATION,
    ) -> None:
        super().__init__(addresses, clock)
        self.epsilon = INITIAL_EPSILON
        self._random = rand
        self._bucket_span = decay_duration / BUCKETS
        self._index = 0
        self._rotated_at = clock()
        self._timings = {address: _Timings() for address in addresses}

    def get(self) -> str:
        self._rotate()
        if self._random() < self.epsilon:
            self.epsilon = max(self.epsilon * EPSILON_DECAY, MIN_EPSILON)
            return super().get()
        choice = self._weighted_choice()
        return choice if choice is not None else super().get()

    def mark_timed(self, address: str, ok: bool, elapsed: float) -> None:
        """``mark`` plus, for a success, the response time that steers later choices."""
        self.mark(address, ok)
        if ok:
            self._rotate()
            timings = self._timings[address]
            timings.counts[self._index] += 1
            timings.totals[self._index] += int(elapsed * 1000)

    def _weighted_choice(self) -> str | None:
        now = self._clock()
        scores: list[tuple[str, float]] = []
        for address, timings in self._timings.items():
            host = self._by_address[address]
            if host.dead and host.next_retry >= now:
                continue
            average = timings.weighted_average(self._index)
            if average > 0:
                scores.append((address, 1.0 / average))
        if not scores:
            return None
        total = sum(score for _, score in scores)
        pick, ceiling = self._random(), 0.0
        for address, score in scores:
            ceiling += score / total
            if pick <= ceiling:
                self._retrying(address, now)
                return address
        log.info("Failed to randomly choose a host, Dan loses")  # go-hostpool's words
        return None

    def _retrying(self, address: str, now: float) -> None:
        # A dead host due for a retry gets its next retry pushed back, as in round robin.
        host = self._by_address[address]
        if host.dead:
            host.retry_delay = min(host.retry_delay * 2, MAX_RETRY_DELAY)
            host.next_retry = now + host.retry_delay

    def _rotate(self) -> None:
        """Move to a fresh bucket for every bucket span that has passed."""
        steps = int((self._clock() - self._rotated_at) / self._bucket_span)
        if steps <= 0:
            return
        self._rotated_at += steps * self._bucket_span
        for _ in range(min(steps, BUCKETS)):
            self._index = (self._index + 1) % BUCKETS
            for timings in self._timings.values():
                timings.counts[self._index] = 0
                timings.totals[self._index] = 0

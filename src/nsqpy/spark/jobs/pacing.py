"""Rate limiting inside a Spark task: hand items on no faster than a given rate.

A replay's overall limit R is split over the N writer tasks, each paced at R/N (see
``replay.py``). Within a task the pacer releases chunks of about 100 ms worth of items on a
schedule; a chunk that is late restarts the schedule instead of earning credit, so a stall
(a slow nsqd, GC) is never followed by a burst above the rate. Hence at any moment a task has
released at most ``rate * elapsed + chunk`` items.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Protocol, Self

#: How much of a task's budget one chunk holds: small enough to be smooth, large enough that
#: sleeping (about 0.1 ms of jitter) and per-chunk overhead stay negligible.
CHUNK_SECONDS: Final = 0.1


class Batch(Protocol):
    """What pacing needs from a ``pyarrow.RecordBatch``."""

    @property
    def num_rows(self) -> int: ...

    def slice(self, offset: int, length: int) -> Self: ...


class Pacer:
    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, not {rate}")
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._next_due: float | None = None

    def admit(self, count: int) -> None:
        """Block until ``count`` more items fit the rate."""
        now = self._clock()
        if self._next_due is None or self._next_due < now:
            self._next_due = now  # late or first: no credit carried over
        elif self._next_due > now:
            self._sleep(self._next_due - now)
        self._next_due += count / self.rate


def chunk_size(rate: float) -> int:
    """Items per chunk for a task paced at ``rate`` items per second."""
    return max(1, math.ceil(rate * CHUNK_SECONDS))


def pace_batches(batches: Iterable[Batch], pacer: Pacer, chunk: int) -> Iterator[Batch]:
    """Arrow batches re-cut into chunks of at most ``chunk`` rows, each released on time."""
    for batch in batches:
        for offset in range(0, batch.num_rows, chunk):
            part = batch.slice(offset, chunk)
            pacer.admit(part.num_rows)
            yield part

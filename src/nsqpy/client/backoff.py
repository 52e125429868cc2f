"""Pure backoff policies: a consumer's processing backoff and reconnect delays.

Processing backoff follows go-nsq: each failure raises a counter and pauses the consumer
(RDY 0 everywhere) for ``multiplier * 2**counter`` seconds (capped); after the pause one
connection gets RDY 1 to test the water. Each success lowers the counter; back at zero, full
RDY is restored. Results that arrive while a pause is running are ignored.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum


class Step(Enum):
    """What the consumer must do after a result."""

    NOTHING = "nothing"
    PAUSE = "pause"  # RDY 0 everywhere, then test with RDY 1 after ``Backoff.delay``
    RESUME = "resume"  # the counter is back to zero: full RDY again


@dataclass(slots=True)
class Backoff:
    multiplier: float = 1.0
    max_duration: float = 120.0
    counter: int = 0
    paused: bool = False
    delay: float = 0.0

    def record(self, success: bool, *, backoff: bool = True) -> Step:
        """Account for one handled message; ``backoff=False`` failures do not count."""
        if self.paused or self.multiplier <= 0:
            return Step.NOTHING
        if success:
            if self.counter == 0:
                return Step.NOTHING
            self.counter -= 1
            return Step.RESUME if self.counter == 0 else self._pause()
        if not backoff:
            return Step.NOTHING
        # stop counting once the pause is at its cap, so recovery takes few successes
        if self.counter == 0 or self.multiplier * 2.0**self.counter < self.max_duration:
            self.counter += 1
        return self._pause()

    def duration(self, counter: int) -> float:
        return min(self.max_duration, self.multiplier * float(2 ** min(counter, 62)))

    def pause_over(self) -> None:
        """The pause has elapsed; the consumer tests one connection with RDY 1."""
        self.paused = False

    def _pause(self) -> Step:
        self.paused = True
        self.delay = self.duration(self.counter)
        return Step.PAUSE


@dataclass(slots=True)
class ReconnectPolicy:
    """Exponential delay with full jitter between dial attempts, reset on success."""

    base: float = 0.1
    cap: float = 15.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def failure(self) -> float:
        """Seconds to wait before the next attempt."""
        self.failures += 1
        ceiling = min(self.cap, self.base * float(2 ** min(self.failures, 30)))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def success(self) -> None:
        self.failures = 0

"""Progress lines: per batch of a streaming job, and over time for a batch job's tasks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pyspark import Accumulator, SparkContext

Emit = Callable[[str], None]


class Progress(Protocol):
    """What is used of pyspark's ``StreamingQueryProgress``."""

    @property
    def batchId(self) -> int: ...

    @property
    def numInputRows(self) -> int: ...

    @property
    def processedRowsPerSecond(self) -> float: ...

    @property
    def durationMs(self) -> dict[str, int]: ...


@dataclass
class Totals:
    batches: int = 0
    rows: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def batch_line(progress: Progress) -> str:
    seconds = progress.durationMs.get("triggerExecution", 0) / 1000
    return (
        f"batch {progress.batchId}: {progress.numInputRows} rows in {seconds:.2f} s, "
        f"{progress.processedRowsPerSecond:.0f} rows/s"
    )


class BatchLog:
    """Emits one line per new batch with rows; keeps run totals.

    Batches without rows are not printed: reading driver-side, the source runs one after each
    data batch so that the previous batch's messages are FINished (the commit tick), and idle
    queries report their state every few seconds; neither says anything about the data.
    """

    def __init__(self, emit: Emit, clock: Callable[[], float] = time.monotonic) -> None:
        self._emit = emit
        self._clock = clock
        self._started = clock()
        self._last_batch = -1
        self.totals = Totals()

    def update(self, progresses: Iterable[Progress]) -> None:
        for progress in progresses:
            # An idle query reports the id of the batch it has not run yet, with no rows: only
            # reports with rows identify a batch that ran.
            if progress.numInputRows == 0 or progress.batchId <= self._last_batch:
                continue
            self._last_batch = progress.batchId
            self.totals.batches += 1
            self.totals.rows += progress.numInputRows
            self._emit(batch_line(progress))
        self.totals.seconds = self._clock() - self._started


class TaskProgress:
    """A driver thread printing published counts and task progress while the write runs.

    The count grows as tasks finish (accumulators travel with task results), the task counts
    show the progress inside the stage.
    """

    def __init__(
        self,
        sc: SparkContext,
        counter: Accumulator[int],
        emit: Emit,
        interval: float,
        started: float,
    ) -> None:
        self._sc = sc
        self._counter = counter
        self._emit = emit
        self._interval = interval
        self._started = started
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nsqpy-replay-progress", daemon=True)

    def __enter__(self) -> TaskProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            self._emit(self.line())

    def line(self) -> str:
        tracker = self._sc.statusTracker()
        infos = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
        done = sum(info.numCompletedTasks for info in infos if info is not None)
        total = sum(info.numTasks for info in infos if info is not None)
        elapsed = time.monotonic() - self._started
        tasks = f", tasks {done}/{total} of the running stages" if total else ""
        return f"{elapsed:.0f} s: {self._counter.value} messages published by finished tasks{tasks}"

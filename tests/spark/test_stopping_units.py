"""``stop_when_idle`` without draining, on a scripted query: which moments count as idle.

The statuses are the ones Spark 4.3 shows (read from its MicroBatchExecution): every trigger
that follows a batch starts with a new status whose ``isDataAvailable`` is false until its
``latestOffset``, the offset log and the commit of the batch before it are done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsqpy.spark import stop_when_idle


@dataclass(frozen=True)
class Progress:
    batchId: int
    timestamp: str
    numInputRows: int


def moment(message: str, data: bool, progress: Progress | None) -> tuple[dict[str, Any], Any]:
    return {"message": message, "isDataAvailable": data, "isTriggerActive": True}, progress


class ScriptedQuery:
    """Each look at ``status`` moves the query on to its next moment (the last one stays)."""

    def __init__(self, moments: list[tuple[dict[str, Any], Progress | None]]) -> None:
        self.moments = moments
        self.at = 0
        self.stopped_at: int | None = None

    def _now(self) -> tuple[dict[str, Any], Progress | None]:
        return self.moments[min(self.at, len(self.moments) - 1)]

    @property
    def isActive(self) -> bool:
        return self.stopped_at is None

    @property
    def status(self) -> dict[str, Any]:
        shown = self._now()[0]
        self.at += 1
        return shown

    @property
    def lastProgress(self) -> Progress | None:
        return self._now()[1]

    def stop(self) -> None:
        self.stopped_at = self.at

    def exception(self) -> None:
        return None


def stop(query: ScriptedQuery, timeout: float = 60) -> bool:
    return stop_when_idle(query, timeout, drain=False, clock=lambda: 0.0)  # type: ignore[arg-type]


WITH_ROWS = Progress(4, "2026-11-25T21:00:00.000Z", 100)
TICK = Progress(5, "2026-11-25T21:00:06.000Z", 0)
NEXT_ROWS = Progress(6, "2026-11-25T21:00:12.000Z", 50)


def test_a_new_batch_status_after_a_batch_with_rows_is_not_taken_for_idle() -> None:
    query = ScriptedQuery([
        moment("Waiting for next trigger", True, WITH_ROWS),  # ran; its FIN comes with the next
        moment("Initializing StreamExecution", False, WITH_ROWS),  # the next trigger's new status
        moment("Writing offsets to log", False, WITH_ROWS),
        moment("Processing new data", True, WITH_ROWS),  # the tick's batch: the FIN was sent
        moment("Waiting for next trigger", True, TICK),
        moment("Getting offsets from nsq", False, TICK),  # idle from here on
    ])  # fmt: skip
    assert stop(query) is True
    # looks 1-5 are one each; the idle moment is looked at twice
    assert query.stopped_at == 7


def test_a_batch_that_ran_between_two_looks_is_seen() -> None:
    query = ScriptedQuery([
        moment("Getting offsets from nsq", False, TICK),
        moment("Getting offsets from nsq", False, TICK),
        moment("Getting offsets from nsq", False, NEXT_ROWS),  # a whole batch since
        moment("Processing new data", True, NEXT_ROWS),
        moment("Getting offsets from nsq", False, Progress(7, "2026-11-25T21:00:18.000Z", 0)),
    ])  # fmt: skip
    assert stop(query) is True
    assert query.stopped_at == 6


def test_a_trigger_that_found_nothing_after_a_batch_is_idle_without_a_tick() -> None:
    # through leases the next trigger's latestOffset FINishes the last batch itself, and
    # Spark reports a trigger without data only every 10 s: the status must be enough
    query = ScriptedQuery([
        moment("Processing new data", True, None),
        moment("Getting offsets from nsq", False, WITH_ROWS),  # a new status, not filled in
        moment("Waiting for data to arrive", False, WITH_ROWS),  # filled in: nothing found
    ])  # fmt: skip
    assert stop(query) is True
    assert query.stopped_at == 3


def test_before_the_first_batch_the_query_is_idle_at_once() -> None:
    query = ScriptedQuery([moment("Initializing StreamExecution", False, None)])
    assert stop(query) is True
    assert query.stopped_at == 2


def test_a_query_that_never_settles_is_stopped_at_the_deadline() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    query = ScriptedQuery([moment("Writing offsets to log", False, WITH_ROWS)])
    assert stop_when_idle(query, 5, drain=False, clock=clock) is False  # type: ignore[arg-type]
    assert query.stopped_at is not None

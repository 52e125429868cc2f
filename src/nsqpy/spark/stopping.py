"""Stopping a streaming query on the ``nsq`` source without leaving its last batch unFINished.

The source FINs batch N's messages only while Spark plans the batch after it: ``commit(end_N)``
comes with batch N+1. A ``query.stop()`` at an arbitrary moment therefore leaves the last batch
written but in flight; the source hands it back to nsqd on stop and the next run writes it
again. ``isTriggerActive`` does not show a good moment: an idle query spends most of its time
inside a trigger, waiting in ``latestOffset`` for ``pollTimeout``.

What does: while a batch waits for its FIN, the source reports new data (its commit tick, on
by default), so a trigger that finds no new data means that every batch written has been
FINished. Spark shows it two ways:

* ``status["isDataAvailable"]`` is false after such a trigger. It may describe a trigger that
  ran before the caller's messages arrived, and it is also false before the first trigger.
  In Spark 4 it is also false, for nothing, early in every trigger that follows a batch: each
  batch gets a new status, filled in only after its ``latestOffset``, the offset log and the
  commit of the batch before it. So it counts only with a message that Spark sets once a
  trigger has found no data ("Waiting for data to arrive", "Waiting for next trigger"), or
  when the last progress shows that the batch which ran last carried no rows: a commit tick's
  batch, whose planning FINished the one before it.
* ``processAllAvailable()`` returns once a trigger that began after the call found nothing.
  It has no timeout and blocks for as long as data keeps coming, so it runs on a helper thread.

pyspark is not imported: the query is only called, so ``import nsqpy.spark`` still works without
pyspark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

#: How often the caller's deadline and ``force`` are looked at.
POLL_SECONDS: Final = 0.1
#: Status messages Spark sets only after a trigger's status is filled in (Spark 4.3's words).
_SETTLED: Final = frozenset({"Waiting for data to arrive", "Waiting for next trigger"})
#: After ``stop()``, how long to wait for the helper thread (Spark wakes it when the query ends,
#: and looks again every 10 s anyway).
_JOIN_SECONDS: Final = 15.0


def stop_when_idle(
    query: StreamingQuery,
    timeout: float = 60.0,
    *,
    drain: bool = True,
    force: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Stop ``query`` once nothing it wrote waits for its FIN; True if so, False if stopped early.

    With ``drain`` (the default) the query first catches up: a trigger that started after this
    call must find neither new messages nor a batch waiting for its FIN, so what nsqd had
    delivered by then is written and FINished. This takes up to one trigger interval plus
    ``pollTimeout``. Without ``drain`` the query stops as soon as its last trigger found
    nothing to do (``isDataAvailable`` is false), which is usually at once. That is what a job
    wants on a signal; messages that only arrived since wait in nsqd for the next run.

    ``timeout`` seconds, or ``force`` being set (from a signal handler, say), stop the query at
    once. That is still at-least-once: the source hands every message it holds back to nsqd,
    and the last batch may be written again by the next run. A query that keeps getting
    messages never becomes idle: stop the producers first, or accept the timeout.

    A query that has already ended (AvailableNow) counts as idle. If the query failed, its
    ``StreamingQueryException`` is raised after the stop.
    """
    deadline = clock() + timeout

    def give_up() -> bool:
        return clock() >= deadline or (force is not None and force.is_set())

    if drain:
        waiter = _CaughtUp(query)
        idle = waiter.wait(give_up)
        query.stop()
        waiter.join(_JOIN_SECONDS)
        if waiter.error is not None:
            raise waiter.error
        return idle
    idle = _nothing_pending(query, give_up, force)
    query.stop()
    failure = query.exception()
    if failure is not None:
        raise failure
    return idle


def _nothing_pending(
    query: StreamingQuery, give_up: Callable[[], bool], force: threading.Event | None
) -> bool:
    """Poll the query's status until its last trigger found nothing to do (True)."""
    nap = force if force is not None else threading.Event()  # set: wakes the poll at once
    while query.isActive:
        if _found_nothing(query):
            return True
        if give_up():
            return False
        nap.wait(POLL_SECONDS)
    return True  # ended by itself: AvailableNow FINishes its last batch before it ends


def _found_nothing(query: StreamingQuery) -> bool:
    """No batch with rows is running, or has run since the last commit: all are FINished.

    A status whose trigger has not filled it in yet is judged by the last progress. Status and
    progress are then read twice, in turn: a batch that ran between two reads shows as a true
    ``isDataAvailable`` (set before the batch runs, until the next trigger starts) or as a
    progress that changed.
    """
    status = query.status
    if status["isDataAvailable"]:
        return False
    if status["message"] in _SETTLED:  # its trigger ran to its end and found nothing
        return True
    before = _last_batch(query)
    if before is not None and before[2] > 0:
        return False
    return not query.status["isDataAvailable"] and _last_batch(query) == before


def _last_batch(query: StreamingQuery) -> tuple[int, str, int] | None:
    """(batch id, timestamp, input rows) of the query's last progress; None before any."""
    progress = query.lastProgress
    if progress is None:
        return None
    return (progress.batchId, progress.timestamp, progress.numInputRows)


class _CaughtUp:
    """``query.processAllAvailable()`` on a daemon thread; its outcome for the caller."""

    def __init__(self, query: StreamingQuery) -> None:
        self.done = threading.Event()
        self.caught_up = False
        self.error: Exception | None = None
        self._thread = threading.Thread(
            target=self._run, args=(query,), name="nsqpy-await-idle", daemon=True
        )
        self._thread.start()

    def _run(self, query: StreamingQuery) -> None:
        try:
            query.processAllAvailable()
            self.caught_up = True
        except Exception as exc:  # noqa: BLE001 - the query's failure, raised on the caller's thread
            self.error = exc
        finally:
            self.done.set()

    def wait(self, give_up: Callable[[], bool]) -> bool:
        """True once the query caught up, False when ``give_up`` said so (or it failed)."""
        while not self.done.wait(POLL_SECONDS):
            if give_up():
                return False
        return self.caught_up

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

"""Stopping a streaming archive without turning its last batch into duplicates.

The source FINs a batch's messages only while Spark plans the next batch (the commit tick).
Stopping a query straight away therefore leaves the last written batch un-FINished: nsqd
redelivers it after msg_timeout and the archive holds it twice. A clean stop waits until the
query is idle (see ``is_idle``); a second request, or the deadline, stops at once, which is
still at-least-once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming.query import StreamingQuery

_POLL_SECONDS = 0.2


class StopRequest:
    """Set from a signal handler or another thread: the first request is clean, a second forced."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.forced = threading.Event()

    def request(self) -> None:
        if self.requested.is_set():
            self.forced.set()
        self.requested.set()


def is_idle(query: StreamingQuery) -> bool:
    """The last trigger found neither new messages nor a batch waiting for its FIN.

    The source asks for an extra (empty) batch while a written batch awaits its commit, so
    "no data" means every written batch has been FINished. A trigger may be running (the
    source waits a moment for messages): stopping then only sends back what it has taken and
    not yet planned into a batch, which nothing has written.
    """
    return not query.status["isDataAvailable"]


def stop_cleanly(
    query: StreamingQuery,
    stop: StopRequest,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Stop ``query`` once idle (or forced, or after ``timeout``); True when it was idle."""
    deadline = clock() + timeout
    idle = False
    while query.isActive and clock() < deadline and not stop.forced.is_set():
        if is_idle(query):
            idle = True
            break
        stop.forced.wait(_POLL_SECONDS)
    query.stop()
    return idle

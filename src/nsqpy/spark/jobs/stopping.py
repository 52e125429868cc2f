"""Stopping a streaming archive on a signal without turning its last batch into duplicates.

The waiting itself is ``nsqpy.spark.stop_when_idle`` (see nsqpy/spark/stopping.py), which users
of the ``nsq`` source call too; this adds the signal side: the first request stops cleanly, a
second one forces the stop.
"""

from __future__ import annotations

import threading

from pyspark.sql.streaming.query import StreamingQuery

from nsqpy.spark.stopping import stop_when_idle


class StopRequest:
    """Set from a signal handler or another thread: the first request is clean, a second forced."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.forced = threading.Event()

    def request(self) -> None:
        if self.requested.is_set():
            self.forced.set()
        self.requested.set()


def stop_cleanly(query: StreamingQuery, stop: StopRequest, timeout: float) -> bool:
    """Stop ``query`` once nothing it wrote waits for its FIN (or forced, or after ``timeout``).

    True when it was idle. Without draining: on a signal the job stops as soon as its last
    trigger found nothing to do, usually at once, rather than after one more trigger interval;
    messages that arrived since then wait in nsqd for the next run.
    """
    return stop_when_idle(query, timeout, drain=False, force=stop.forced)

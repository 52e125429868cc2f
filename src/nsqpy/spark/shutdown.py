"""Stopping the driver-side source runner cleanly, within a hard deadline.

Spark 4.x ends a streaming source's runner process with SIGTERM and never calls the reader's
``stop()``. Python's default SIGTERM action skips every cleanup, so held messages would only
come back after their msg_timeout. The handler here hands them back at once (RDY 0, REQ, CLS).

It must never hang: a handler that did the network I/O itself, sharing locks with the I/O
thread, once deadlocked and left an orphaned runner holding RDY and TOUCHing its messages for
up to --max-msg-timeout. So the work runs on a helper thread, the main thread waits for it at
most ``deadline`` seconds and then ``os._exit``s, and ``signal.alarm`` is armed first: SIGALRM's
default action kills the process even if the handler itself gets stuck.

Spark sends SIGTERM twice, microseconds apart (``PythonWorkerFactory.stopWorker`` destroys the
process, then ``stop`` destroys every simple worker again), and the second one runs the
handler again inside the first, on the same thread. The guard against that must not take a
lock: it was an ``Event``, whose ``set`` holds a plain lock, and a second SIGTERM arriving
inside it waited for that lock forever, before the alarm was armed: an orphaned runner,
holding its messages in flight until their timeout. It is now a non-blocking acquire, which
never waits, and nothing comes before the alarm but that.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Final

log = logging.getLogger("nsqpy.spark")

DEADLINE: Final = 2.5


def install_sigterm(stop: Callable[[], None], deadline: float = DEADLINE) -> bool:
    """Run ``stop`` (bounded by ``deadline``) on SIGTERM, then exit. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return False
    stopping = threading.Lock()

    def handler(signum: int, frame: FrameType | None) -> None:
        if not stopping.acquire(blocking=False):
            return  # a second SIGTERM while the first one is being handled (never waits)
        signal.alarm(math.ceil(deadline) + 1)
        worker = threading.Thread(target=_run_logged, args=(stop,), name="nsqpy-sigterm",
                                  daemon=True)
        worker.start()
        worker.join(deadline)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    return True


def _run_logged(stop: Callable[[], None]) -> None:
    try:
        stop()
    except Exception:  # last line of defence: the process _exits right after this
        log.exception("nsq source: clean stop failed; held messages will time out in nsqd")

"""The driver-side runner's SIGTERM handler (``nsqpy.spark.shutdown``), in real processes.

Spark sends the runner SIGTERM twice, microseconds apart. A runner whose handler deadlocked
on the second one stayed alive with its nsqd connection open (CI, 2026-11-25: py-spy showed
two nested handlers, both in ``Event.set``). These run the handler in a child process and
signal it the way Spark does; they need no Spark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import nsqpy

SRC = str(Path(nsqpy.__file__).resolve().parents[1])

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from nsqpy.spark import shutdown

    mode = sys.argv[1]

    def block_forever(*args, **kwargs):
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # never returns

    if mode == "event-set-blocks":  # what the old guard waited on, forever
        threading.Event.set = block_forever
    elif mode == "thread-start-blocks":  # a lock the interrupted main thread may hold
        threading.Thread.start = block_forever
    elif mode == "sigterm-inside-handler":  # the second SIGTERM lands inside the first handler
        real_alarm = signal.alarm

        def alarm(seconds):
            os.kill(os.getpid(), signal.SIGTERM)
            return real_alarm(seconds)

        signal.alarm = alarm

    def stop():
        os.write(1, b"stopped\\n")

    assert shutdown.install_sigterm(stop, deadline=1.0)
    os.write(1, b"ready\\n")
    sys.stdin.buffer.read()  # blocked in a read, as the runner is in read_int
    """
)


def start(mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    return child


def finish(child: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    try:
        rc = child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        pytest.fail("the runner outlived its SIGTERM: the handler hung")
    assert child.stdout is not None
    return rc, child.stdout.read()


def test_two_sigterms_back_to_back_stop_once_and_exit() -> None:
    """Spark's pair: ``stopWorker`` destroys the worker, then ``stop`` destroys it again."""
    child = start("plain")
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGTERM)
    rc, out = finish(child)
    assert rc == 128 + signal.SIGTERM
    assert out == b"stopped\n"


def test_a_sigterm_inside_the_handler_returns_at_once() -> None:
    child = start("sigterm-inside-handler")
    child.send_signal(signal.SIGTERM)
    rc, out = finish(child)
    assert rc == 128 + signal.SIGTERM
    assert out == b"stopped\n"


@pytest.mark.parametrize("mode", ["event-set-blocks", "thread-start-blocks"])
def test_a_handler_that_blocks_is_still_ended_by_its_alarm(mode: str) -> None:
    """Whatever the handler waits on, the alarm armed before it ends the process: the old
    guard's ``Event.set`` waited for its lock before the alarm was armed, and hung."""
    child = start(mode)
    child.send_signal(signal.SIGTERM)
    rc, out = finish(child)
    assert rc in (-signal.SIGALRM, 128 + signal.SIGTERM)
    assert out == b""  # the stop never ran: only the alarm ended it

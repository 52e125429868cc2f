"""Running a daemon from its console script: one event loop, clean stop on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Protocol


class Daemon(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def new_loop_runner() -> asyncio.Runner:
    """A runner on uvloop when it is installed, plain asyncio otherwise."""
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio still works
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run(
    make: Callable[[], Daemon],
    startup_error: type[Exception],
    report: Callable[[Exception], None],
) -> int:
    """Build the daemon inside the loop, start it, serve until a signal; the exit status.

    A ``startup_error`` raised by ``start()`` is passed to ``report`` and exits 1.
    """
    with new_loop_runner() as runner:
        return runner.run(_serve(make, startup_error, report))


async def _serve(
    make: Callable[[], Daemon],
    startup_error: type[Exception],
    report: Callable[[Exception], None],
) -> int:
    # Handlers first: a signal that arrives while listeners are coming up still stops cleanly.
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    daemon = make()
    try:
        await daemon.start()
    except startup_error as err:
        report(err)
        await daemon.stop()
        return 1
    await stop_requested.wait()
    await daemon.stop()
    return 0

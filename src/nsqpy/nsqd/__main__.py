"""``nsqd`` / ``python -m nsqpy.nsqd``: parse NSQ's flags and run the daemon."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys

from nsqpy._internal import logs
from nsqpy.nsqd.app import NSQD, StartupError
from nsqpy.nsqd.options import NsqdOptions, parse_nsqd_args


async def _serve(opts: NsqdOptions) -> int:
    log = logs.setup("nsqpy.nsqd", opts.log_prefix, opts.log_level)
    # Handlers first: a signal that arrives while listeners are coming up still stops cleanly.
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    nsqd = NSQD(opts)
    try:
        await nsqd.start()
    except StartupError as err:
        log.critical("%s", err)
        await nsqd.stop()
        return 1
    await stop_requested.wait()
    await nsqd.stop()
    return 0


def _new_loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio still works
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def tune_gc() -> None:
    """Make the cyclic GC cheap for a process that holds millions of queued messages.

    Messages are small tracked objects that live until they are finished; with CPython's
    default thresholds the collector keeps rescanning them, which tripled the cost of a
    publish (1.3 us vs 0.42 us per message, measured creating 2M queued messages). Cycles are
    still collected, only in larger batches: the hot path creates none.
    """
    gc.set_threshold(100_000, 50, 1000)
    gc.freeze()  # what start-up imported lives forever: never rescan it


def main(argv: list[str] | None = None) -> int:
    opts = parse_nsqd_args(sys.argv[1:] if argv is None else argv)
    tune_gc()
    with _new_loop_runner() as runner:
        return runner.run(_serve(opts))


if __name__ == "__main__":
    sys.exit(main())

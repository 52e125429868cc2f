"""``nsqlookupd`` / ``python -m nsqpy.nsqlookupd``: parse NSQ's flags and run the daemon."""

from __future__ import annotations

import asyncio
import signal
import sys

from nsqpy._internal import logs
from nsqpy._internal.goflag import go_log_line
from nsqpy.nsqlookupd.app import NSQLookupd, StartupError
from nsqpy.nsqlookupd.options import FATAL_PREFIX, NsqlookupdOptions, parse_nsqlookupd_args


def _startup_failure(err: StartupError) -> str:
    # apps/nsqlookupd calls logFatal("failed to instantiate nsqlookupd", err): the error is an
    # extra argument to a format without verbs, so Go prints it as %!(EXTRA ...).
    return f"FATAL: failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={err})"


async def _serve(opts: NsqlookupdOptions) -> int:
    logs.setup("nsqpy.nsqlookupd", opts.log_prefix, opts.log_level)
    # Handlers first: a signal that arrives while listeners are coming up still stops cleanly.
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_requested.set)
    lookupd = NSQLookupd(opts)
    try:
        await lookupd.start()
    except StartupError as err:
        await lookupd.stop()
        print(go_log_line(_startup_failure(err), prefix=FATAL_PREFIX, micros=True), file=sys.stderr)
        return 1
    await stop_requested.wait()
    await lookupd.stop()
    return 0


def _new_loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio still works
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def main(argv: list[str] | None = None) -> int:
    opts = parse_nsqlookupd_args(sys.argv[1:] if argv is None else argv)
    with _new_loop_runner() as runner:
        return runner.run(_serve(opts))


if __name__ == "__main__":
    sys.exit(main())

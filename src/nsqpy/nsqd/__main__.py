"""``nsqd`` / ``python -m nsqpy.nsqd``: parse NSQ's flags and run the daemon."""

from __future__ import annotations

import asyncio
import signal
import sys

from nsqpy._internal import logs
from nsqpy.nsqd.app import NSQD, StartupError
from nsqpy.nsqd.options import NsqdOptions, parse_nsqd_args


async def _serve(opts: NsqdOptions) -> int:
    log = logs.setup("nsqpy.nsqd", opts.log_prefix, opts.log_level)
    nsqd = NSQD(opts)
    try:
        await nsqd.start()
    except StartupError as err:
        log.critical("%s", err)
        await nsqd.stop()
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: loop.create_task(nsqd.stop()))
    await nsqd.wait_stopped()
    return 0


def _new_loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio still works
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def main(argv: list[str] | None = None) -> int:
    opts = parse_nsqd_args(sys.argv[1:] if argv is None else argv)
    with _new_loop_runner() as runner:
        return runner.run(_serve(opts))


if __name__ == "__main__":
    sys.exit(main())

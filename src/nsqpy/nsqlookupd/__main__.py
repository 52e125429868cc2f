"""``nsqlookupd`` / ``python -m nsqpy.nsqlookupd``: parse NSQ's flags and run the daemon."""

from __future__ import annotations

import sys

from nsqpy._internal.goflag import go_log_line
from nsqpy.nsqlookupd.options import FATAL_PREFIX, parse_nsqlookupd_args


def _startup_failure(err: Exception) -> str:
    # apps/nsqlookupd calls logFatal("failed to instantiate nsqlookupd", err): the error is an
    # extra argument to a format without verbs, so Go prints it as %!(EXTRA ...).
    return f"FATAL: failed to instantiate nsqlookupd%!(EXTRA *errors.errorString={err})"


def _report(err: Exception) -> None:
    print(go_log_line(_startup_failure(err), prefix=FATAL_PREFIX, micros=True), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    opts = parse_nsqlookupd_args(sys.argv[1:] if argv is None else argv)  # exits on --version
    # the daemon only now, and of aiohttp only its server: imports are most of the start-up
    from nsqpy._internal import aioweb, daemon, logs

    aioweb.import_web()
    from nsqpy.nsqlookupd.app import NSQLookupd, StartupError

    logs.setup("nsqpy.nsqlookupd", opts.log_prefix, opts.log_level)
    return daemon.run(lambda: NSQLookupd(opts), StartupError, _report)


if __name__ == "__main__":
    sys.exit(main())

"""``nsqadmin`` / ``python -m nsqpy.nsqadmin``: parse NSQ's flags and run the daemon."""

from __future__ import annotations

import sys

from nsqpy._internal import daemon, logs
from nsqpy._internal.goflag import go_log_line
from nsqpy.nsqadmin.app import NSQAdmin, StartupError
from nsqpy.nsqadmin.options import FATAL_PREFIX, parse_nsqadmin_args


def _report(err: Exception) -> None:
    # apps/nsqadmin: logFatal("failed to instantiate nsqadmin - %s", err), exit status 1
    line = go_log_line(
        f"FATAL: failed to instantiate nsqadmin - {err}", prefix=FATAL_PREFIX, micros=True
    )
    print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    opts = parse_nsqadmin_args(sys.argv[1:] if argv is None else argv)
    logs.setup("nsqpy.nsqadmin", opts.log_prefix, opts.log_level)
    return daemon.run(lambda: NSQAdmin(opts), StartupError, _report)


if __name__ == "__main__":
    sys.exit(main())

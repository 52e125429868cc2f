"""``nsq_stat``: poll ``/stats`` of every nsqd with a topic and print the channel's totals.

NSQ v1.3.0's ``apps/nsq_stat``: same flags, checks, messages and output; the polling and
formatting live in :mod:`nsqpy.tools.stat_loop` and :mod:`nsqpy.tools.stat`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Final

from nsqpy._internal.duration import SECOND
from nsqpy._internal.goflag import FlagKind, FlagSet, ParsedFlags
from nsqpy._internal.gostrconv import RANGE, GoNumError, parse_go_int
from nsqpy.cli import common
from nsqpy.tools.stat_loop import StatError, StatOptions, stat_loop

APP: Final = "nsq_stat"
_INT32_END: Final = 1 << 31


def _count(text: str, _current: object) -> object:
    """``--count``: Go's ``strconv.ParseInt(s, 10, 32)``, its error text as the reason."""
    value = parse_go_int(text, 10)
    if not -_INT32_END <= value < _INT32_END:
        raise GoNumError("ParseInt", text, RANGE)
    return value


def flag_set(argv: Sequence[str] | None = None) -> FlagSet:
    fs = common.new_flag_set(APP, argv)
    common.add_version_flag(fs, "print version")
    fs.add_string("topic", "", "NSQ topic")
    fs.add_string("channel", "", "NSQ channel")
    fs.add_duration("interval", 2 * SECOND, "duration of time between polling/printing output")
    fs.add_duration("http-client-connect-timeout", 2 * SECOND, "timeout for HTTP connect")
    fs.add_duration("http-client-request-timeout", 5 * SECOND, "timeout for HTTP request")
    fs.add_string_array("nsqd-http-address", "nsqd HTTP address (may be given multiple times)")
    fs.add_string_array("lookupd-http-address", common.LOOKUPD_HTTP_ADDRESS_USAGE)
    # Go's numValue: unset means "forever", which a plain int flag cannot express.
    fs.add_value("count", None, "number of reports", parser=_count, coerce_as=FlagKind.INT)
    return fs


def _seconds(parsed: ParsedFlags, name: str) -> float:
    value = parsed[name]
    return value / SECOND if isinstance(value, int) else 0.0


def options(parsed: ParsedFlags) -> StatOptions:
    """The checks of NSQ's nsq_stat ``main()``, in its order; each failure is fatal."""
    topic, channel = str(parsed["topic"]), str(parsed["channel"])
    if not topic or not channel:
        common.fatal("--topic and --channel are required")
    interval = _seconds(parsed, "interval")
    for name, value in [
        ("interval", interval),
        ("http-client-connect-timeout", _seconds(parsed, "http-client-connect-timeout")),
        ("http-client-request-timeout", _seconds(parsed, "http-client-request-timeout")),
    ]:
        if value <= 0:
            common.fatal(f"--{name} should be positive")
    count = parsed["count"]
    if isinstance(count, int) and count <= 0:
        common.fatal("--count should be positive")
    nsqd = common.strings(parsed, "nsqd-http-address")
    lookupd = common.strings(parsed, "lookupd-http-address")
    error = common.source_error(nsqd, lookupd, nsqd_flag="--nsqd-http-address")
    if error is not None:
        common.fatal(error)
    for flag, addresses in [("--nsqd-http-address", nsqd), ("--lookupd-http-address", lookupd)]:
        if any(a.startswith("http") for a in addresses):
            common.fatal(f"{flag} error - address should not contain scheme")
    return StatOptions(
        topic=topic,
        channel=channel,
        interval=interval,
        connect_timeout=_seconds(parsed, "http-client-connect-timeout"),
        request_timeout=_seconds(parsed, "http-client-request-timeout"),
        count=count if isinstance(count, int) else None,
        nsqd_http_addresses=nsqd,
        lookupd_http_addresses=lookupd,
    )


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()  # Go's fmt.Printf is unbuffered: rows appear as they are computed


def main(argv: Sequence[str] | None = None) -> int:
    parsed = common.parse(flag_set(argv), argv)
    if common.handle_version(parsed, APP):
        return 0
    opts = options(parsed)
    # nsq_stat also quits on SIGHUP.
    return common.run(
        common.until_done(lambda: stat_loop(opts, _write), StatError),
        signals=(*common.STOP_SIGNALS, signal.SIGHUP),
    )


if __name__ == "__main__":
    raise SystemExit(main())

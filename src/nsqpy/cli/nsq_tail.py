"""``nsq_tail``: print the messages of one or more topics to stdout.

NSQ v1.3.0's ``apps/nsq_tail``: same flags, checks, messages and output; the work is
:func:`nsqpy.tools.tail.tail`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy.cli import common
from nsqpy.tools.tail import TailError, TailOptions, random_channel, tail

APP: Final = "nsq_tail"


def flag_set(argv: Sequence[str] | None = None) -> FlagSet:
    fs = common.new_flag_set(APP, argv)
    common.add_version_flag(fs)
    fs.add_string("channel", "", "NSQ channel")
    fs.add_int("max-in-flight", 200, "max number of messages to allow in flight")
    fs.add_int("n", 0, "total messages to show (will wait if starved)")
    fs.add_bool("print-topic", False, "print topic name where message was received")
    common.add_source_flags(fs)
    fs.add_string_array("topic", "NSQ topic (may be given multiple times)")
    common.add_config_opt(fs, "consumer-opt", common.CONSUMER_OPT_USAGE)
    return fs


def _int(parsed: ParsedFlags, name: str) -> int:
    value = parsed[name]
    return value if isinstance(value, int) else 0


def options(parsed: ParsedFlags) -> TailOptions:
    """The checks of NSQ's nsq_tail ``main()``, in its order; each failure is fatal."""
    channel = str(parsed["channel"]) or random_channel()
    nsqd = common.strings(parsed, "nsqd-tcp-address")
    lookupd = common.strings(parsed, "lookupd-http-address")
    error = common.source_error(nsqd, lookupd)
    if error is not None:
        common.fatal(error)
    topics = common.strings(parsed, "topic")
    if not topics:
        common.fatal("--topic required")
    total, max_in_flight = _int(parsed, "n"), _int(parsed, "max-in-flight")
    if 0 < total < max_in_flight:
        max_in_flight = total  # don't ask for more messages than we want
    return TailOptions(
        topics=topics,
        channel=channel,
        config=common.client_config(
            APP, common.strings(parsed, "consumer-opt"), max_in_flight=max_in_flight
        ),
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        total=total,
        print_topic=bool(parsed["print-topic"]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    started = common.begin(flag_set(argv), argv, APP, options)
    if started is None:
        return 0
    _, opts = started
    return common.run(
        common.until_done(lambda: tail(opts, sys.stdout.buffer, common.logf), TailError)
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""``to_nsq``: publish stdin, split on a delimiter, to a topic on every nsqd given.

NSQ v1.3.0's ``apps/to_nsq``: same flags (it has no ``--version``), checks, messages and exit
codes; the work is :func:`nsqpy.tools.to_nsq.to_nsq`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy.cli import common
from nsqpy.tools.stdin import read_chunks
from nsqpy.tools.to_nsq import PublishFailed, ToNsqOptions, to_nsq

APP: Final = "to_nsq"


def flag_set(argv: Sequence[str] | None = None) -> FlagSet:
    fs = common.new_flag_set(APP, argv)
    fs.add_string("topic", "", "NSQ topic to publish to")
    fs.add_string("delimiter", "\n", "character to split input from stdin")
    fs.add_string_array(
        "nsqd-tcp-address", "destination nsqd TCP address (may be given multiple times)"
    )
    common.add_config_opt(fs, "producer-opt", common.PRODUCER_OPT_USAGE)
    fs.add_int("rate", 0, "Throttle messages to n/second. 0 to disable")
    return fs


def options(parsed: ParsedFlags) -> ToNsqOptions:
    """The checks of NSQ's to_nsq ``main()``, in its order; each failure is fatal."""
    topic = str(parsed["topic"])
    if not topic:
        common.fatal("--topic required")
    delimiter = os.fsencode(str(parsed["delimiter"]))  # Go counts bytes, not characters
    if len(delimiter) != 1:
        common.fatal("--delimiter must be a single byte")
    addresses = common.strings(parsed, "nsqd-tcp-address")
    if not addresses:
        common.fatal("--nsqd-tcp-address required")
    rate = parsed["rate"]
    return ToNsqOptions(
        topic=topic,
        delimiter=delimiter,
        nsqd_tcp_addresses=addresses,
        config=common.client_config(APP, common.strings(parsed, "producer-opt")),
        rate=rate if isinstance(rate, int) else 0,
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts = options(common.parse(flag_set(argv), argv))
    common.setup_logging()

    async def serve(shutdown: common.Shutdown) -> int:
        try:
            await common.until_shutdown(shutdown, to_nsq(opts, read_chunks(0), common.logf))
        except (PublishFailed, OSError) as err:
            raise common.Fatal(str(err)) from None
        return 0

    return common.run(serve)


if __name__ == "__main__":
    raise SystemExit(main())

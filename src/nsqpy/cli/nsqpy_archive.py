"""``nsqpy-archive``: archive NSQ topics to Parquet on Spark (see nsqpy.spark.jobs.archive)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from nsqpy.spark.jobs import cli
from nsqpy.spark.jobs.archive import COMPRESSIONS, DEFAULT_CHANNEL, ArchiveConfig, run_archive
from nsqpy.spark.jobs.stopping import StopRequest

PROG: Final = "nsqpy-archive"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Archive NSQ topics to Parquet partitioned by topic/date/hour (UTC), "
        "at least once: messages are FINished only after Spark has committed the files.",
    )
    p.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    p.add_argument("--output", required=True, metavar="PATH", help="archive directory")
    p.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="Spark checkpoint directory (keep it: it belongs to --output)",
    )
    p.add_argument(
        "--channel",
        default=DEFAULT_CHANNEL,
        help=f"channel to consume (default: {DEFAULT_CHANNEL})",
    )
    p.add_argument(
        "--nsqd-tcp-address",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="nsqd TCP address (repeatable)",
    )
    p.add_argument(
        "--lookupd-http-address",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="nsqlookupd HTTP address (repeatable)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--trigger",
        type=cli.duration,
        default=10.0,
        metavar="DURATION",
        help="micro-batch interval when running until stopped (default: 10s)",
    )
    mode.add_argument(
        "--available-now",
        action="store_true",
        help="archive what is queued now, then exit (default: run until SIGINT/SIGTERM)",
    )
    p.add_argument(
        "--max-in-flight",
        type=cli.positive_int,
        metavar="N",
        help="messages in flight over all nsqd connections (the source's default)",
    )
    p.add_argument("--max-records-per-batch", type=cli.positive_int, metavar="N")
    p.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default="snappy",
        help="Parquet compression (default: snappy)",
    )
    p.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another option of the nsq source, e.g. msgTimeout=2m (repeatable)",
    )
    p.add_argument(
        "--stop-timeout",
        type=cli.duration,
        default=30.0,
        metavar="DURATION",
        help="on a signal, how long to wait for the last batch's commit (default: 30s)",
    )
    cli.add_master(p)
    return p


def _source_options(p: argparse.ArgumentParser, pairs: Sequence[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            p.error(f"--source-option wants KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


def config(p: argparse.ArgumentParser, args: argparse.Namespace) -> ArchiveConfig:
    def make() -> ArchiveConfig:
        return ArchiveConfig(
            topics=tuple(args.topic),
            output=args.output,
            checkpoint=args.checkpoint,
            nsqd_tcp_addresses=tuple(args.nsqd_tcp_address),
            lookupd_http_addresses=tuple(args.lookupd_http_address),
            channel=args.channel,
            trigger_seconds=args.trigger,
            available_now=args.available_now,
            max_in_flight=args.max_in_flight,
            max_records_per_batch=args.max_records_per_batch,
            compression=args.compression,
            source_options=_source_options(p, args.source_option),
            stop_timeout=args.stop_timeout,
        )

    return cli.build(p, make)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    cfg = config(p, args)

    def job() -> None:
        stop = StopRequest()
        with cli.session(args.master, PROG) as spark:
            # After the session: pyspark installs its own SIGINT handler when it starts.
            cli.install_stop_handlers(stop)
            totals = run_archive(spark, cfg, cli.say, stop)
        cli.say(
            f"archived {totals.rows} messages in {totals.batches} batches, "
            f"{totals.seconds:.1f} s ({totals.rate:.0f} msg/s)"
        )

    return cli.run(PROG, job)


if __name__ == "__main__":
    sys.exit(main())

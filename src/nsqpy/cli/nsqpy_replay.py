"""``nsqpy-replay``: publish archived messages to a topic (see nsqpy.spark.jobs.replay)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Final

from nsqpy.spark.jobs import cli
from nsqpy.spark.jobs.replay import ReplayConfig, run_replay
from nsqpy.spark.jobs.selection import nothing_selected

PROG: Final = "nsqpy-replay"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Publish messages from an nsqpy archive to a topic, each (nsqd, id) once, "
        "optionally filtered by source topic and publish time and limited in rate.",
    )
    cli.add_inputs(p)
    p.add_argument("--destination-topic", required=True, help="topic to publish to")
    p.add_argument(
        "--nsqd-tcp-address",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="nsqd TCP address to publish to (repeatable; round robin)",
    )
    cli.add_selection(p)
    p.add_argument(
        "--rate",
        type=cli.positive_float,
        metavar="MSGS_PER_SECOND",
        help="overall publish rate limit (default: unlimited)",
    )
    p.add_argument(
        "--tasks",
        type=cli.positive_int,
        metavar="N",
        help="parallel writer tasks sharing --rate (default: Spark's parallelism)",
    )
    cli.add_master(p)
    return p


def config(p: argparse.ArgumentParser, args: argparse.Namespace) -> ReplayConfig:
    def make() -> ReplayConfig:
        return ReplayConfig(
            inputs=tuple(args.input),
            destination_topic=args.destination_topic,
            nsqd_tcp_addresses=tuple(args.nsqd_tcp_address),
            selection=cli.selection(args),
            rate=args.rate,
            tasks=args.tasks,
        )

    return cli.build(p, make)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    cfg = config(p, args)

    def job() -> None:
        with cli.session(args.master, PROG) as spark:
            result = run_replay(spark, cfg, cli.say)
            if result.messages == 0:
                raise nothing_selected(spark, cfg.inputs, cfg.selection, "nothing to replay")
        cli.say(
            f"replayed {result.messages} messages to {cfg.destination_topic} in "
            f"{result.seconds:.1f} s ({result.rate:.0f} msg/s)"
        )

    return cli.run(PROG, job)


if __name__ == "__main__":
    sys.exit(main())

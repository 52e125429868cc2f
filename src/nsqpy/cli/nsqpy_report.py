"""``nsqpy-report``: a table and a chart about an archive (see nsqpy.spark.jobs.report)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from nsqpy.spark.jobs import cli
from nsqpy.spark.jobs.report import run_report
from nsqpy.spark.jobs.report_output import format_report, write_chart
from nsqpy.spark.jobs.selection import nothing_selected

PROG: Final = "nsqpy-report"
DEFAULT_CHART: Final = "nsqpy-report.png"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Messages and bytes per topic per hour, attempts and publish-to-archive "
        "delay percentiles of an nsqpy archive; prints a table and writes a PNG chart.",
    )
    cli.add_inputs(p)
    cli.add_selection(p)
    p.add_argument(
        "--chart",
        type=Path,
        default=Path(DEFAULT_CHART),
        metavar="PNG",
        help=f"where to write the chart (default: {DEFAULT_CHART})",
    )
    cli.add_master(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    selection = cli.build(p, lambda: cli.selection(args))

    def job() -> None:
        with cli.session(args.master, PROG) as spark:
            report = run_report(spark, args.input, selection)
            if report.rows == 0:
                raise nothing_selected(spark, args.input, selection, "nothing to report")
        cli.say(format_report(report))
        write_chart(report, args.chart)
        cli.say(f"\nchart: {args.chart}")

    return cli.run(PROG, job)


if __name__ == "__main__":
    sys.exit(main())

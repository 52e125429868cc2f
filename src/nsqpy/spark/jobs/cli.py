"""What the three job commands share: argument types, common options, errors, signals.

The commands are nsqpy's own tools (argparse, ``--help``), not ports of NSQ's Go utilities.
Exit codes: 0 done, 1 the job failed (one ``<prog>: error: ...`` line), 2 bad usage, 3 the
selection matched no archived message (one ``<prog>: nothing to ...`` line).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Final, TypeVar

from pyspark.sql import SparkSession

from nsqpy._internal.duration import SECOND, parse_go_duration
from nsqpy.spark import SparkSetupError, build_session
from nsqpy.spark.jobs.errors import JobError, NothingSelected
from nsqpy.spark.jobs.layout import PARQUET_WRITE_OPTIONS
from nsqpy.spark.jobs.selection import Selection, parse_utc
from nsqpy.spark.jobs.stopping import StopRequest

DEFAULT_MASTER: Final = "local[*]"
#: Exit status when the selection matched no archived message: the run did no harm, but a
#: script replaying "the last hour" should be able to tell that nothing was there.
EXIT_NOTHING_SELECTED: Final = 3
T = TypeVar("T")


def duration(text: str) -> float:
    """A Go duration (``10s``, ``500ms``, ``1m``) in seconds."""
    try:
        return parse_go_duration(text) / SECOND
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def utc_time(text: str) -> str:
    """Checked while parsing so that a typo is a usage error; converted later."""
    try:
        parse_utc(text)
    except JobError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_master(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master", default=DEFAULT_MASTER,
        help=f"Spark master URL (default: {DEFAULT_MASTER}; e.g. spark://host:7077, yarn)",
    )  # fmt: skip


def add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", action="append", required=True, metavar="PATH",
        help="archive directory written by nsqpy-archive (repeatable)",
    )  # fmt: skip


def add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topic", action="append", default=[], metavar="TOPIC",
        help="only messages archived from this topic (repeatable; default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--from", dest="start", type=utc_time, metavar="TIME",
        help="only messages published at or after TIME: ISO 8601 (UTC unless an offset is "
        "given, e.g. 2026-11-22T03:00Z) or relative to now (now, now-2h, --from=-90m)",
    )  # fmt: skip
    parser.add_argument(
        "--to", dest="end", type=utc_time, metavar="TIME",
        help="only messages published before TIME (same forms as --from)",
    )  # fmt: skip


def selection(args: argparse.Namespace) -> Selection:
    now = datetime.now(UTC)  # one "now" for both ends: --from=-2h --to=-1h is exactly an hour
    return Selection(
        topics=tuple(args.topic),
        start=None if args.start is None else parse_utc(args.start, now),
        end=None if args.end is None else parse_utc(args.end, now),
    )


def build(parser: argparse.ArgumentParser, make: Callable[[], T]) -> T:
    """A config from the arguments; its validation failures are usage errors (exit 2)."""
    try:
        return make()
    except JobError as exc:
        parser.error(str(exc))


@contextlib.contextmanager
def session(master: str, app: str) -> Iterator[SparkSession]:
    """The job's SparkSession with the ``nsq`` data source registered; stopped afterwards."""
    try:
        # Spark's console progress bar would garble the job's own progress lines. The Parquet
        # setting is also passed to the archive's writer; here it covers any other write.
        conf = {"spark.ui.showConsoleProgress": "false", **PARQUET_WRITE_OPTIONS}
        spark = build_session(master, app, conf)
    except SparkSetupError as exc:
        raise JobError(str(exc)) from None
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def run(prog: str, job: Callable[[], None]) -> int:
    """Run ``job``; a JobError becomes one line on stderr and exit status 1 (3 when nothing
    was selected)."""
    try:
        job()
    except NothingSelected as exc:
        print(f"{prog}: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOTHING_SELECTED
    except JobError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:  # a signal before the job's own handlers were installed
        return 130
    return 0


def install_stop_handlers(stop: StopRequest) -> None:
    """SIGINT and SIGTERM ask for a clean stop; a second one forces it."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda _signum, _frame: stop.request())


def say(line: str) -> None:
    print(line, flush=True)

"""Which archived messages a replay or report looks at: topics and a time range.

Times are instants in UTC. The range is half-open, ``[start, end)``, so consecutive ranges
(hour by hour, day by day) never replay a message twice. A time is absolute (ISO 8601) or
relative to now (``now``, ``now-1h``, ``-1h``), so that a command line stays useful on another day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from nsqpy._internal.duration import MICROSECOND, parse_go_duration
from nsqpy.protocol.names import is_valid_name
from nsqpy.spark.jobs.errors import JobError, NothingSelected
from nsqpy.spark.jobs.layout import read_archive

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


NOW: Final = "now"
_TIME_FORMS: Final = (
    "expected ISO 8601 (2026-11-22T03:00:00Z) or a time relative to now "
    "(now, now-1h, -90m: a Go duration back from now)"
)


def parse_utc(text: str, now: datetime | None = None) -> datetime:
    """An instant in UTC from an ISO 8601 date or date-time (no offset means UTC: archives are
    partitioned in UTC) or from a time relative to ``now`` (default: the current time):
    ``now``, ``now-<duration>`` or ``-<duration>``, with a Go duration (``90m``, ``1h30m``).
    """
    back = _relative(text)
    if back is not None:
        return (now if now is not None else datetime.now(UTC)).astimezone(UTC) - back
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise JobError(f"invalid time {text!r}: {_TIME_FORMS}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _relative(text: str) -> timedelta | None:
    """How far before now a relative time is, or None for an absolute one."""
    if text == NOW:
        return timedelta(0)
    if text.startswith(f"{NOW}-"):
        duration = text.removeprefix(f"{NOW}-")
    elif text.startswith("-"):
        duration = text.removeprefix("-")
    else:
        return None
    invalid = JobError(f"invalid relative time {text!r}: {_TIME_FORMS}")
    if duration.startswith(("+", "-")):  # now--1h, now-+1h: a sign of its own is a typo
        raise invalid
    try:
        nanos = parse_go_duration(duration)
    except ValueError:
        raise invalid from None
    return timedelta(microseconds=nanos // MICROSECOND)


def format_utc(moment: datetime) -> str:
    """``2026-11-22T03:00:00Z`` (with microseconds when there are any)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def epoch_micros(moment: datetime) -> int:
    """Exact microseconds since the epoch (a float timestamp would round at this scale)."""
    return (moment - _EPOCH) // _MICROSECOND


@dataclass(frozen=True)
class Selection:
    topics: tuple[str, ...] = field(default=())
    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        for topic in self.topics:
            if not is_valid_name(topic):
                raise JobError(f"invalid topic name {topic!r}")
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise JobError(
                f"empty time range: --from {format_utc(self.start)} is not before "
                f"--to {format_utc(self.end)}"
            )

    def describe(self) -> str:
        """The selection in words: ``topic events published in [start, end)``."""
        topics = f"topic {', '.join(self.topics)}" if self.topics else "any topic"
        if self.start is not None and self.end is not None:
            return f"{topics} published in [{format_utc(self.start)}, {format_utc(self.end)})"
        if self.start is not None:
            return f"{topics} published at or after {format_utc(self.start)}"
        if self.end is not None:
            return f"{topics} published before {format_utc(self.end)}"
        return topics

    def apply(self, df: DataFrame) -> DataFrame:
        """Rows of ``df`` (an archive) inside this selection."""
        for condition in self._conditions():
            df = df.where(condition)
        return df

    def _conditions(self) -> list[Column]:
        conditions: list[Column] = []
        if self.topics:
            conditions.append(F.col("topic").isin(list(self.topics)))
        # Compare instants as integers: independent of the session time zone.
        micros = F.unix_micros(F.col("timestamp"))
        if self.start is not None:
            conditions.append(F.col("date") >= F.lit(_utc_date(self.start)))
            conditions.append(micros >= F.lit(epoch_micros(self.start)))
        if self.end is not None:
            conditions.append(F.col("date") <= F.lit(_utc_date(self.end)))
            conditions.append(micros < F.lit(epoch_micros(self.end)))
        return conditions


def _utc_date(moment: datetime) -> date:
    """The archive's ``date`` partition holding ``moment``; the filter on it prunes directories."""
    return moment.astimezone(UTC).date()


def nothing_selected(
    spark: SparkSession, inputs: Sequence[str], selection: Selection, what: str
) -> NothingSelected:
    """The error for a selection that matched no archived message, saying which times the
    archive does hold for the selected topics (the usual cause is a stale ``--from``/``--to``).

    This reads the archive's ``timestamp`` column once more; it runs only when nothing matched.
    """
    archive = read_archive(spark, inputs)
    if selection.topics:
        archive = archive.where(F.col("topic").isin(list(selection.topics)))
    micros = F.unix_micros(F.col("timestamp"))
    span = archive.agg(F.min(micros).alias("first"), F.max(micros).alias("last")).collect()[0]
    if span["first"] is None:
        holds = "it holds none of those topics" if selection.topics else "it is empty"
    else:
        first, last = (_EPOCH + timedelta(microseconds=span[key]) for key in ("first", "last"))
        holds = f"it holds messages published from {format_utc(first)} to {format_utc(last)}"
    return NothingSelected(f"{what}: no archived message of {selection.describe()}; {holds}")

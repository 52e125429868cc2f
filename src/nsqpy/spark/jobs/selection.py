"""Which archived messages a replay or report looks at: topics and a time range.

Times are instants in UTC. The range is half-open, ``[start, end)``, so consecutive ranges
(hour by hour, day by day) never replay a message twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from nsqpy.protocol.names import is_valid_name
from nsqpy.spark.jobs.errors import JobError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def parse_utc(text: str) -> datetime:
    """An ISO 8601 date or date-time; no offset means UTC (archives are partitioned in UTC)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise JobError(
            f"invalid time {text!r}: expected ISO 8601, e.g. 2026-11-22T03:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


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
            raise JobError(f"empty time range: --from {self.start} is not before --to {self.end}")

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

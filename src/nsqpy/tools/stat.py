"""nsq_stat's numbers: one channel's stats summed over every nsqd, and the report rows.

Pure: the HTTP side is in :mod:`nsqpy.tools.clusterinfo`, the polling loop in
:mod:`nsqpy.tools.stat_loop`. Matches NSQ v1.3.0's ``apps/nsq_stat``: a two-line header before
every 25th poll (the first poll only sets the baseline, so the first header stands alone), and
per-interval ingress/egress computed from message-count and depth deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Final

HEADER_EVERY: Final = 25
_COLUMNS: Final = ("ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o")
HEADER: Final = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n"
).format(*_COLUMNS, "msgs", "clients")
ROW_FORMAT: Final = "%7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d\n"


@dataclass(frozen=True, slots=True)
class ChannelTotals:
    """A channel's counters summed over nsqd nodes (NSQ's clusterinfo ChannelStats.Add)."""

    depth: int = 0
    memory_depth: int = 0
    backend_depth: int = 0
    in_flight_count: int = 0
    deferred_count: int = 0
    requeue_count: int = 0
    timeout_count: int = 0
    message_count: int = 0
    client_count: int = 0

    def __add__(self, other: ChannelTotals) -> ChannelTotals:
        return ChannelTotals(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(ChannelTotals))
        )


def _int(stats: Mapping[str, object], key: str) -> int:
    value = stats.get(key, 0)
    return value if isinstance(value, int) else 0


def channel_totals(channel: Mapping[str, object]) -> ChannelTotals:
    """One nsqd's channel stats object (``/stats?format=json``) as totals."""
    depth, backend = _int(channel, "depth"), _int(channel, "backend_depth")
    return ChannelTotals(
        depth=depth,
        memory_depth=depth - backend,  # nsqd does not report it; clusterinfo derives it
        backend_depth=backend,
        in_flight_count=_int(channel, "in_flight_count"),
        deferred_count=_int(channel, "deferred_count"),
        requeue_count=_int(channel, "requeue_count"),
        timeout_count=_int(channel, "timeout_count"),
        message_count=_int(channel, "message_count"),
        client_count=_int(channel, "client_count"),
    )


def _dicts(value: object) -> list[Mapping[str, object]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def aggregate_channel(
    stats_docs: Iterable[Mapping[str, object]], topic: str, channel: str
) -> ChannelTotals | None:
    """Sum ``topic``/``channel`` over each nsqd's ``/stats`` document; None if no node has it."""
    total: ChannelTotals | None = None
    for doc in stats_docs:
        for topic_stats in _dicts(doc.get("topics")):
            if topic_stats.get("topic_name") != topic:
                continue
            for channel_stats in _dicts(topic_stats.get("channels")):
                if channel_stats.get("channel_name") == channel:
                    part = channel_totals(channel_stats)
                    total = part if total is None else total + part
    return total


def rates(previous: ChannelTotals, current: ChannelTotals, interval: float) -> tuple[int, int]:
    """(ingress, egress) per second: new messages, and new messages minus depth growth.

    Truncated toward zero as Go's int64(float64(...)) conversion does.
    """
    published = current.message_count - previous.message_count
    drained = published - (current.depth - previous.depth)
    return int(published / interval), int(drained / interval)


def format_row(previous: ChannelTotals, current: ChannelTotals, interval: float) -> str:
    ingress, egress = rates(previous, current, interval)
    c = current
    return ROW_FORMAT % (
        ingress,
        egress,
        c.depth,
        c.memory_depth,
        c.backend_depth,
        c.in_flight_count,
        c.deferred_count,
        c.requeue_count,
        c.timeout_count,
        c.message_count,
        c.client_count,
    )


class StatReport:
    """Turns successive polls into nsq_stat's output text (header, then a row per interval)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.polls = 0
        self._previous: ChannelTotals | None = None

    def add(self, current: ChannelTotals) -> str:
        """The text to print for this poll: maybe the header, then a row unless it is the first."""
        text = HEADER if self.polls % HEADER_EVERY == 0 else ""
        if self._previous is not None:
            text += format_row(self._previous, current, self.interval)
        self._previous = current
        self.polls += 1
        return text

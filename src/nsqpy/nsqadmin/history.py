"""The sampled history behind nsqadmin's built-in charts: bounded rings, no I/O, no clock.

``History.record`` takes one sampling round (a timestamp and each node's ``/stats`` JSON, or
None for a node that did not answer) and appends one point per (node, topic) and per (node,
topic, channel). Each series is a ring of ``capacity`` points. Series of topics and channels
that a node no longer reports are dropped, and so are nodes that left the cluster; a node
that failed this round keeps its series (a blip loses no history; the round's sums
lack that node).

``History.points`` sums the series that match a topic / channel / node per round. ``rate`` is
each series' ``message_count`` delta over the seconds between its consecutive points, summed
over the series that have one: null for a first point, and a series whose counter went
backwards (an nsqd restarted, a topic re-created) adds nothing for that round.
``History.topic_summaries`` gives the same sums for every topic at once, cut to the last few
rounds (the topics list's numbers and sparklines in one pass instead of one query per topic).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, Final, NamedTuple

#: A series: (node, topic, channel); channel "" is the topic itself.
Key = tuple[str, str, str]


class Sample(NamedTuple):
    ts: float
    depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int


_FIELDS: Final = ("depth", "in_flight_count", "deferred_count", "message_count")


def _num(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def samples_of(ts: float, stats: Mapping[str, Any]) -> Iterable[tuple[str, str, Sample]]:
    """(topic, channel, sample) for every topic and channel in one node's /stats.

    A topic's in-flight and deferred counts are its channels' sums (a topic has neither).
    """
    for topic in _list(stats.get("topics")):
        if not isinstance(topic, Mapping):
            continue
        name = str(topic.get("topic_name", ""))
        in_flight = deferred = 0
        for channel in _list(topic.get("channels")):
            if not isinstance(channel, Mapping):
                continue
            sample = Sample(
                ts,
                _num(channel, "depth"),
                _num(channel, "in_flight_count"),
                _num(channel, "deferred_count"),
                _num(channel, "message_count"),
            )
            in_flight += sample.in_flight_count
            deferred += sample.deferred_count
            yield name, str(channel.get("channel_name", "")), sample
        yield (
            name,
            "",
            Sample(ts, _num(topic, "depth"), in_flight, deferred, _num(topic, "message_count")),
        )


class History:
    """Bounded per-series rings of samples; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._series: dict[Key, deque[Sample]] = {}

    def __len__(self) -> int:
        return len(self._series)

    def record(self, ts: float, nodes: Mapping[str, Mapping[str, Any] | None]) -> None:
        """One round: ``nodes`` maps every node of the cluster to its /stats (None: failed)."""
        seen: set[Key] = set()
        for node, stats in nodes.items():
            if stats is None:
                continue
            for topic, channel, sample in samples_of(ts, stats):
                key = (node, topic, channel)
                seen.add(key)
                ring = self._series.get(key)
                if ring is None:
                    ring = self._series[key] = deque(maxlen=self.capacity)
                elif ring[-1].ts >= ts:
                    ring.pop()  # a clock that stood still or stepped back: keep the newest
                ring.append(sample)
        for key in list(self._series):
            node = key[0]
            if key not in seen and (node not in nodes or nodes[node] is not None):
                del self._series[key]

    def points(
        self, topic: str | None = None, channel: str | None = None, node: str | None = None
    ) -> list[dict[str, object]]:
        """Summed points, oldest first: ``{"ts", "depth", "in_flight_count", "deferred_count",
        "message_count", "rate"}``. No topic: every topic (not channel) series, so with a
        node the node's totals. Channel ``*``: every channel series (of the topic, if given)."""
        return _summed(
            ring for key, ring in self._series.items() if _matches(key, topic, channel, node)
        )

    def topic_summaries(self, limit: int) -> dict[str, dict[str, object]]:
        """Every topic, summed over nodes: its newest point's ``ts``, ``depth``,
        ``message_count`` and ``rate``, and ``rates``, the rates of its last ``limit`` rounds
        (oldest first). Topics sorted by name. Rates are rounded to 0.001 msg/s: a sparkline
        needs no more, and the answer for many topics stays small."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        tails: dict[str, list[list[Sample]]] = {}
        for (_, topic, channel), ring in self._series.items():
            if channel == "":
                # one sample more than shown: the oldest shown point's rate needs its previous
                tails.setdefault(topic, []).append(_tail(ring, limit + 1))
        summaries: dict[str, dict[str, object]] = {}
        for topic in sorted(tails):
            points = _summed(tails[topic])[-limit:]
            last = points[-1]
            summaries[topic] = {
                "ts": last["ts"],
                "depth": last["depth"],
                "message_count": last["message_count"],
                "rate": _rounded(last["rate"]),
                "rates": [_rounded(p["rate"]) for p in points],
            }
        return summaries


def _rounded(rate: object) -> float | None:
    return round(rate, 3) if isinstance(rate, float) else None


def _tail(ring: deque[Sample], count: int) -> list[Sample]:
    """The last ``count`` samples of a ring, oldest first, without walking the rest."""
    tail = list(islice(reversed(ring), count))
    tail.reverse()
    return tail


def _summed(rings: Iterable[Iterable[Sample]]) -> list[dict[str, object]]:
    """Per timestamp, the sums of the fields and of each series' own rate (see the module
    docstring), oldest first.

    A series cut to its last samples gives the right rates for every timestamp of the union
    but the oldest ones: its first sample has no previous. ``topic_summaries`` cuts each series
    to one sample more than it keeps, and the union's last ``limit`` timestamps all come after
    every series' first kept sample (any series with ``limit + 1`` samples puts that many
    timestamps at or after its first one into the union).
    """
    totals: dict[float, list[int]] = {}
    rates: dict[float, float] = {}
    for ring in rings:
        previous: Sample | None = None
        for sample in ring:
            sums = totals.setdefault(sample.ts, [0, 0, 0, 0])
            for i, value in enumerate(sample[1:]):
                sums[i] += value
            rate = _rate(previous, sample)
            if rate is not None:
                rates[sample.ts] = rates.get(sample.ts, 0.0) + rate
            previous = sample
    return [
        {"ts": ts, **dict(zip(_FIELDS, sums, strict=True)), "rate": rates.get(ts)}
        for ts, sums in sorted(totals.items())
    ]


#: ``channel`` value that selects every channel series.
ALL_CHANNELS: Final = "*"


def _matches(key: Key, topic: str | None, channel: str | None, node: str | None) -> bool:
    key_node, key_topic, key_channel = key
    if node is not None and key_node != node:
        return False
    if channel == ALL_CHANNELS:
        return key_channel != "" and (topic is None or key_topic == topic)
    if topic is None:
        return key_channel == ""
    return key_topic == topic and key_channel == (channel or "")


def _rate(previous: Sample | None, sample: Sample) -> float | None:
    if previous is None or sample.ts <= previous.ts:
        return None
    delta = sample.message_count - previous.message_count
    if delta < 0:
        return None
    return delta / (sample.ts - previous.ts)

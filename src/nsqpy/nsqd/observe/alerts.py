"""Backlog alerts (nsqpy only; NSQ issue #1175): thresholds on queue depth and message age.

Rules
-----
``--alert-depth=[TOPIC[:CHANNEL]=]N`` and ``--alert-age=[TOPIC[:CHANNEL]=]DURATION``, each
repeatable (config keys ``alert_depths`` and ``alert_ages``, lists of the same strings):

- ``N`` alone applies to every topic and every channel;
- ``TOPIC=N`` applies to the topic's own queue (what it holds while it has no channel, is
  paused, or has a disk backlog not yet handed on); ``TOPIC:CHANNEL=N`` to a channel;
- a name may use ``*`` globs (``orders.*``, ``*:archive``, ``*#ephemeral``);
- for each queue the most specific matching rule of each kind wins: an explicit target beats
  the bare value, then the one with more exact (glob-free) names, then the one with more
  literal characters; among equals the last one given;
- a winning value ``<= 0`` disables that kind of alert for the queue, so
  ``--alert-depth=1000 --alert-depth='*#ephemeral:*=0'`` spares ephemeral channels.

What is measured
----------------
*depth* is ``/stats``'s depth: memory plus disk, excluding in-flight and deferred messages.
*age* is how long ago the oldest **queued** message was published, judged by the message at the
head of the memory queue and the one at the head of the disk queue (whichever is older), read in
place with no per-message cost. In-flight and deferred messages do not count, nor does a
requeued message further back than the head. An empty queue has age 0.

An alert is raised when the value reaches the threshold (``>=``) and cleared when it falls
below it, or when its topic or channel is deleted; each crossing is logged once (WARNING when
raised, INFO when cleared). ``AlertMonitor.check`` is pure apart from that log line: the daemon
passes the wall clock and ``probe``'s views on a timer (``--alert-check-interval``).

Units: depths are messages; ages are integer nanoseconds in ``/stats`` JSON (NSQ's unit for
durations in JSON), Go durations in text, seconds in ``/metrics``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from nsqpy._internal.duration import SECOND, format_go_duration, parse_go_duration
from nsqpy._internal.gostrconv import GoNumError, go_quote, parse_go_int
from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.backend import Backend, Peekable

if TYPE_CHECKING:
    from nsqpy.nsqd.core.message import Queued
    from nsqpy.nsqd.core.topic import Topic
    from nsqpy.nsqd.observe.stats import Stats

log = logging.getLogger("nsqpy.nsqd")

Kind = Literal["depth", "age"]
DEPTH: Final[Kind] = "depth"
AGE: Final[Kind] = "age"

#: A name pattern: a topic or channel name in which ``*`` stands for any run of characters.
_PATTERN_RE: Final = re.compile(r"[.a-zA-Z0-9_*-]+(?:#ephemeral)?")
#: Cached thresholds per (topic, channel); cleared when it grows past this (names churn).
_CACHE_LIMIT: Final = 100_000


# -- rules ----------------------------------------------------------------------------------------


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in pattern))


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``--alert-depth``/``--alert-age`` value. ``channel`` None: a topic-level rule."""

    kind: Kind
    topic: str
    channel: str | None
    threshold: int  # messages, or nanoseconds
    bare: bool = False  # given as a bare value: applies to topics and channels alike
    order: int = 0  # position among the rules of its kind (the last one wins ties)
    _topic_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _channel_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_topic_re", _glob(self.topic))
        channel_re = None if self.channel is None else _glob(self.channel)
        object.__setattr__(self, "_channel_re", channel_re)

    def matches(self, topic: str, channel: str) -> bool:
        """Does the rule cover ``topic`` (``channel`` "") or ``topic:channel``?"""
        if self.bare:
            return True
        if (self.channel is None) != (channel == ""):
            return False
        if not self._topic_re.fullmatch(topic):
            return False
        return self._channel_re is None or bool(self._channel_re.fullmatch(channel))

    def rank(self) -> tuple[int, int, int, int]:
        """Greater is more specific (see the module docstring)."""
        names = [self.topic] if self.channel is None else [self.topic, self.channel]
        exact = sum("*" not in name for name in names)
        literal = sum(len(name) - name.count("*") for name in names)
        return (0 if self.bare else 1, exact, literal, self.order)


def _check_pattern(pattern: str, text: str) -> None:
    if not _PATTERN_RE.fullmatch(pattern) or not pattern.isascii():
        raise ValueError(f"invalid topic or channel name {go_quote(pattern)} in {go_quote(text)}")


def _threshold(kind: Kind, value: str) -> int:
    if kind == DEPTH:
        try:
            return parse_go_int(value, 10)
        except GoNumError as err:
            raise ValueError(str(err)) from None
    return parse_go_duration(value)


def parse_rule(text: str, kind: Kind, order: int = 0) -> Rule:
    """``[TOPIC[:CHANNEL]=]VALUE``; ValueError with the reason when it is not one."""
    target, sep, value = text.rpartition("=")
    threshold = _threshold(kind, value)
    if not sep:
        return Rule(kind, "*", None, threshold, bare=True, order=order)
    topic, colon, channel = target.partition(":")
    _check_pattern(topic, text)
    if colon:
        _check_pattern(channel, text)
    return Rule(kind, topic, channel if colon else None, threshold, order=order)


class AlertRules:
    """Every configured rule, and the thresholds they give each queue."""

    def __init__(self, rules: Sequence[Rule] = ()) -> None:
        self.rules = list(rules)
        self._cache: dict[tuple[str, str], tuple[int, int]] = {}

    @classmethod
    def parse(cls, depths: Iterable[str] = (), ages: Iterable[str] = ()) -> AlertRules:
        """From the option values; ValueError naming the bad one."""
        rules = [parse_rule(text, DEPTH, i) for i, text in enumerate(depths)]
        rules += [parse_rule(text, AGE, i) for i, text in enumerate(ages)]
        return cls(rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def thresholds(self, topic: str, channel: str = "") -> tuple[int, int]:
        """(depth, age ns) for a topic (``channel`` "") or a channel; 0 means no alert."""
        key = (topic, channel)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[key] = (
                self._winner(DEPTH, topic, channel),
                self._winner(AGE, topic, channel),
            )
        return found

    def _winner(self, kind: Kind, topic: str, channel: str) -> int:
        matching = [r for r in self.rules if r.kind == kind and r.matches(topic, channel)]
        if not matching:
            return 0
        return max(max(matching, key=Rule.rank).threshold, 0)


# -- what a check looks at ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueView:
    """A topic's (``channel`` "") or channel's queue, as one check sees it."""

    topic: str
    channel: str
    depth: int
    oldest_ns: int | None = None  # publish time (unix ns) of the oldest queued message


def oldest_timestamp(queue: Sequence[Queued], backend: Backend | None) -> int | None:
    """The older of the memory queue's head and the disk queue's head; None when empty."""
    stamps: list[int] = []
    if queue:
        head = queue[0]
        stamps.append(head[2] if isinstance(head, tuple) else head.timestamp)
    if isinstance(backend, Peekable) and backend.depth:
        data = backend.peek(records.HEAD_SIZE)
        stamp = records.head_timestamp(data) if data is not None else None
        if stamp is not None:
            stamps.append(stamp)
    return min(stamps) if stamps else None


def probe(topics: Mapping[str, Topic], rules: AlertRules) -> list[QueueView]:
    """A view of every topic and channel; the disk is looked at only where an age rule applies."""
    views: list[QueueView] = []
    for topic in topics.values():
        queues = [("", topic.queue, topic.backend, topic.depth)]
        queues += [(c.name, c.queue, c.backend, c.depth) for c in topic.channels.values()]
        for channel, queue, backend, depth in queues:
            oldest = None
            if rules.thresholds(topic.name, channel)[1]:
                oldest = oldest_timestamp(queue, backend)
            views.append(QueueView(topic.name, channel, depth, oldest))
    return views


# -- alerts ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Alert:
    """One active alert; ``value`` is brought up to date at every check."""

    topic: str
    channel: str  # "" for a topic-level alert
    kind: Kind
    value: int
    threshold: int
    since: int  # unix seconds when it was raised

    @property
    def queue(self) -> str:
        return f"{self.topic}/{self.channel}" if self.channel else self.topic

    def amount(self, value: int) -> str:
        return str(value) if self.kind == DEPTH else format_go_duration(value)

    def describe(self) -> str:
        """``orders/archive depth 1234 >= 1000`` (ages as Go durations)."""
        return (
            f"{self.queue} {self.kind} {self.amount(self.value)} >= {self.amount(self.threshold)}"
        )

    def to_json(self) -> dict[str, object]:
        """The ``/stats`` shape (nsqadmin reads it): keys in this order."""
        return {
            "topic": self.topic,
            "channel": self.channel,
            "kind": self.kind,
            "value": self.value,
            "threshold": self.threshold,
            "since": self.since,
        }


@dataclass(frozen=True, slots=True)
class Transition:
    raised: bool  # False: cleared
    alert: Alert


AlertKey = tuple[str, str, str]


class AlertMonitor:
    """The active alerts, updated by ``check``."""

    def __init__(self, rules: AlertRules, logger: logging.Logger = log) -> None:
        self.rules = rules
        self.log = logger
        self.active: dict[AlertKey, Alert] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def check(self, now_ns: int, views: Iterable[QueueView]) -> list[Transition]:
        """Compare every view with its thresholds at wall-clock ``now_ns``; log and return
        the alerts raised and cleared by this check."""
        transitions: list[Transition] = []
        seen: set[AlertKey] = set()
        for view in views:
            depth_limit, age_limit = self.rules.thresholds(view.topic, view.channel)
            if depth_limit:
                self._compare(view, DEPTH, view.depth, depth_limit, now_ns, seen, transitions)
            if age_limit:
                age = 0 if view.oldest_ns is None else max(now_ns - view.oldest_ns, 0)
                self._compare(view, AGE, age, age_limit, now_ns, seen, transitions)
        gone = [key for key in self.active if key not in seen]
        transitions.extend(self._clear(key, gone=True) for key in gone)
        return transitions

    def _compare(
        self,
        view: QueueView,
        kind: Kind,
        value: int,
        threshold: int,
        now_ns: int,
        seen: set[AlertKey],
        transitions: list[Transition],
    ) -> None:
        key = (view.topic, view.channel, kind)
        alert = self.active.get(key)
        if value < threshold:
            if alert is not None:
                alert.value = value
                transitions.append(self._clear(key))
            return
        seen.add(key)
        if alert is not None:
            alert.value, alert.threshold = value, threshold
            return
        alert = Alert(view.topic, view.channel, kind, value, threshold, now_ns // SECOND)
        self.active[key] = alert
        self.log.warning("backlog alert raised: %s", alert.describe())
        transitions.append(Transition(True, alert))

    def _clear(self, key: AlertKey, gone: bool = False) -> Transition:
        alert = self.active.pop(key)
        if gone:
            self.log.info("backlog alert cleared: %s %s is gone", alert.queue, alert.kind)
        else:
            self.log.info(
                "backlog alert cleared: %s %s %s < %s",
                alert.queue,
                alert.kind,
                alert.amount(alert.value),
                alert.amount(alert.threshold),
            )
        return Transition(False, alert)

    def alerts(self) -> list[Alert]:
        """The active alerts by topic, channel and kind."""
        return sorted(self.active.values(), key=lambda a: (a.topic, a.channel, a.kind))

    # -- how the HTTP API shows them --------------------------------------------------------
    def ping_text(self) -> str | None:
        """``/ping``'s body while any alert is active, else None."""
        active = self.alerts()
        if not active:
            return None
        return "WARNING - backlog: " + "; ".join(alert.describe() for alert in active)

    def stats_json(self, shown: set[tuple[str, str]]) -> list[dict[str, object]]:
        """``/stats``'s ``alerts`` list, for the queues the snapshot shows (``shown_queues``)."""
        return [a.to_json() for a in self.alerts() if (a.topic, a.channel) in shown]

    def stats_text(self, shown: set[tuple[str, str]]) -> list[str]:
        """Lines under the text ``/stats``'s ``Alerts:`` heading."""
        from nsqpy.nsqd.observe.stats import rfc3339

        return [
            f"   [{a.queue}] {a.kind}: {a.amount(a.value)} >= {a.amount(a.threshold)} "
            f"since {rfc3339(a.since)}"
            for a in self.alerts()
            if (a.topic, a.channel) in shown
        ]


def shown_queues(snapshot: Stats) -> set[tuple[str, str]]:
    """(topic, channel) of every queue a ``/stats`` snapshot shows; channel "" for topics."""
    shown: set[tuple[str, str]] = set()
    for topic in snapshot.topics or ():
        shown.add((topic.topic_name, ""))
        shown.update((topic.topic_name, c.channel_name) for c in topic.channels)
    return shown

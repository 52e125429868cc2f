"""nsqd's ``GET /metrics``: the ``/stats`` numbers in the Prometheus text format.

A scrape reads the same snapshot as ``/stats`` (``stats.collect`` without clients: counters
kept as the work happens, nothing that walks queued messages), so its cost grows with the
number of topics, channels and connections, never with the number of messages. Names use the
``nsq_`` prefix and base units; every topic sample has a ``topic`` label, every channel sample
``topic`` and ``channel``. NSQ's ``*_count`` counters are Prometheus counters named
``*_total``; they restart from 0 with nsqd, which Prometheus' ``rate()`` expects.

End-to-end latency percentiles are a gauge family with a ``quantile`` label (in seconds):
they cover a sliding window (``--e2e-processing-latency-window-time``), so they are not a
Prometheus summary, whose ``_sum`` and ``_count`` would have to be cumulative.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from nsqpy._internal.gostrconv import format_go_float
from nsqpy._internal.prometheus import (
    Family,
    MetricType,
    labels,
    more_labels,
    process_families,
    render,
)
from nsqpy._version import __version__
from nsqpy.nsqd.observe import stats
from nsqpy.nsqd.observe.alerts import AGE, DEPTH, AlertMonitor
from nsqpy.nsqd.observe.stats import ChannelStats, E2eResult, Stats, TopicStats

_NS: Final = 1e9

#: (family name, type, help, /stats field) of the per-topic figures.
Figure = tuple[str, MetricType, str, str]
_TOPIC_FIGURES: Final[tuple[Figure, ...]] = (
    ("nsq_topic_depth", "gauge", "Messages queued at the topic (memory + disk).", "depth"),
    ("nsq_topic_backend_depth", "gauge", "Messages queued on the topic's disk.", "backend_depth"),
    ("nsq_topic_messages_total", "counter", "Messages published to the topic.", "message_count"),
    (
        "nsq_topic_message_bytes_total",
        "counter",
        "Bytes of message bodies published to the topic.",
        "message_bytes",
    ),
    ("nsq_topic_paused", "gauge", "1 while the topic is paused.", "paused"),
)
_CHANNEL_FIGURES: Final[tuple[Figure, ...]] = (
    ("nsq_channel_depth", "gauge", "Messages queued in the channel (memory + disk).", "depth"),
    (
        "nsq_channel_backend_depth",
        "gauge",
        "Messages queued on the channel's disk.",
        "backend_depth",
    ),
    ("nsq_channel_in_flight", "gauge", "Messages sent and not yet answered.", "in_flight_count"),
    (
        "nsq_channel_deferred",
        "gauge",
        "Messages deferred (DPUB, REQ with delay).",
        "deferred_count",
    ),
    ("nsq_channel_messages_total", "counter", "Messages put to the channel.", "message_count"),
    ("nsq_channel_requeues_total", "counter", "Messages requeued (REQ).", "requeue_count"),
    (
        "nsq_channel_timeouts_total",
        "counter",
        "Messages that timed out in flight.",
        "timeout_count",
    ),
    ("nsq_channel_clients", "gauge", "Consumers subscribed to the channel.", "client_count"),
    ("nsq_channel_paused", "gauge", "1 while the channel is paused.", "paused"),
)
#: nsqpy's dead-letter/TTL figures (``PolicyStats``), for channels whose /stats shows them.
_POLICY_FIGURES: Final[tuple[Figure, ...]] = (
    (
        "nsq_channel_dead_letters_total",
        "counter",
        "Messages moved to the channel's dead-letter topic (max attempts or TTL).",
        "dead_letter_count",
    ),
    (
        "nsq_channel_expired_total",
        "counter",
        "Messages not delivered because they were older than the channel's message TTL.",
        "expired_count",
    ),
    (
        "nsq_channel_max_attempts",
        "gauge",
        "Deliveries a message gets before it is dead-lettered (0: no limit).",
        "max_attempts",
    ),
)


@dataclass(frozen=True, slots=True)
class DaemonState:
    """What a scrape reads besides the snapshot."""

    version: str
    health: str
    start_time: int
    connections: int
    producers: int


def _number(value: object) -> float:
    if not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r}")
    return value


def _gauge(name: str, help_text: str, value: float) -> Family:
    family = Family(name, "gauge", help_text)
    family.add(value)
    return family


def _daemon_families(state: DaemonState, snapshot: Stats) -> list[Family]:
    topics = snapshot.topics or []
    info = Family("nsq_build_info", "gauge", "nsqd's NSQ protocol version and nsqpy version.")
    info.add(1, labels(("daemon", "nsqd"), ("version", state.version), ("nsqpy", __version__)))
    return [
        info,
        _gauge(
            "nsq_health",
            "1 while healthy (/ping OK), 0 after a disk write failed.",
            state.health == "OK",
        ),
        _gauge("nsq_start_time_seconds", "When nsqd started (unix seconds).", state.start_time),
        _gauge("nsq_topics", "Topics on this nsqd.", len(topics)),
        _gauge("nsq_channels", "Channels on this nsqd.", sum(len(t.channels) for t in topics)),
        _gauge("nsq_connections", "TCP client connections.", state.connections),
        _gauge("nsq_producers", "TCP connections that have published.", state.producers),
    ]


def add_e2e(family: Family, result: E2eResult, label_text: str) -> None:
    """End-to-end latency percentiles, from the ``/stats`` e2e result (the single place where
    they plug in): ``{"count": n, "percentiles": [{"quantile": q, "value": ns}, ...]}`` or
    ``"percentiles": None`` while ``--e2e-processing-latency-percentile`` is not set."""
    percentiles = result.get("percentiles")
    if not isinstance(percentiles, list):
        return
    for entry in percentiles:
        quantile, value = _number(entry["quantile"]), _number(entry["value"])
        quantile_text = format_go_float(float(quantile))
        family.add(value / _NS, more_labels(label_text, ("quantile", quantile_text)))


def _queue_families(snapshot: Stats) -> list[Family]:
    topic_families = [Family(n, kind, h) for n, kind, h, _ in _TOPIC_FIGURES]
    channel_families = [Family(n, kind, h) for n, kind, h, _ in _CHANNEL_FIGURES]
    topic_e2e = Family(
        "nsq_topic_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency percentiles over the window, all channels merged.",
    )
    channel_e2e = Family(
        "nsq_channel_e2e_processing_latency_seconds",
        "gauge",
        "End-to-end processing latency percentiles over the window (publish to FIN).",
    )
    policy_families = [Family(n, kind, h) for n, kind, h, _ in _POLICY_FIGURES]
    ttl = Family(
        "nsq_channel_message_ttl_seconds",
        "gauge",
        "Age past which a message of the channel is not delivered (0: no TTL).",
    )
    leases = Family(
        "nsq_channel_leases",
        "gauge",
        "Open leases of the channel (their messages count in nsq_channel_in_flight).",
    )
    for topic in snapshot.topics or ():
        _add_topic(topic, topic_families, topic_e2e)
        for channel in topic.channels:
            text = _add_channel(topic.topic_name, channel, channel_families, channel_e2e)
            if channel.lease_count is not None:
                leases.add(channel.lease_count, text)
            if channel.policy is not None:
                for family, value in zip(
                    policy_families, _POLICY_VALUES(channel.policy), strict=True
                ):
                    family.add(value, text)
                ttl.add(channel.policy.message_ttl / _NS, text)
    return [
        *topic_families,
        topic_e2e,
        *channel_families,
        channel_e2e,
        *policy_families,
        ttl,
        leases,
    ]


_TOPIC_VALUES: Final = attrgetter(*(figure[3] for figure in _TOPIC_FIGURES))
_CHANNEL_VALUES: Final = attrgetter(*(figure[3] for figure in _CHANNEL_FIGURES))
_POLICY_VALUES: Final = attrgetter(*(figure[3] for figure in _POLICY_FIGURES))


def _add_topic(topic: TopicStats, families: list[Family], e2e: Family) -> None:
    text = labels(("topic", topic.topic_name))
    for family, value in zip(families, _TOPIC_VALUES(topic), strict=True):
        family.add(value, text)
    add_e2e(e2e, topic.e2e_processing_latency, text)


def _add_channel(topic: str, channel: ChannelStats, families: list[Family], e2e: Family) -> str:
    """Add the channel's samples; returns its label text."""
    text = labels(("topic", topic), ("channel", channel.channel_name))
    for family, value in zip(families, _CHANNEL_VALUES(channel), strict=True):
        family.add(value, text)
    add_e2e(e2e, channel.e2e_processing_latency, text)
    return text


def _alert_families(monitor: AlertMonitor, snapshot: Stats) -> list[Family]:
    """Per queue with a threshold: the threshold and whether its alert is active."""
    active = Family("nsq_alert_active", "gauge", "1 while a backlog alert is raised.")
    depth = Family("nsq_alert_depth_threshold", "gauge", "Depth at which a backlog alert rises.")
    age = Family(
        "nsq_alert_age_threshold_seconds",
        "gauge",
        "Age of the oldest queued message at which a backlog alert rises.",
    )
    for topic in snapshot.topics or ():
        name = topic.topic_name
        for channel in ["", *(c.channel_name for c in topic.channels)]:
            depth_limit, age_limit = monitor.rules.thresholds(name, channel)
            if not depth_limit and not age_limit:
                continue
            text = labels(("topic", name), ("channel", channel))
            if depth_limit:
                depth.add(depth_limit, text)
                raised = (name, channel, DEPTH) in monitor.active
                active.add(int(raised), more_labels(text, ("kind", DEPTH)))
            if age_limit:
                age.add(age_limit / _NS, text)
                raised = (name, channel, AGE) in monitor.active
                active.add(int(raised), more_labels(text, ("kind", AGE)))
    return [active, depth, age]


def metrics_text(snapshot: Stats, state: DaemonState, monitor: AlertMonitor | None = None) -> str:
    """The whole ``/metrics`` body: daemon, topics, channels, alerts (when configured), process."""
    families = _daemon_families(state, snapshot) + _queue_families(snapshot)
    if monitor is not None and monitor.enabled:
        families += _alert_families(monitor, snapshot)
    families += process_families()
    return render(families)


def producer_count(connections: Mapping[int, stats.ClientView]) -> int:
    """Connections that have published (``/stats``'s producers)."""
    return sum(1 for conn in connections.values() if conn.pub_counts)

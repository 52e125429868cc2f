"""nsqlookupd's ``GET /metrics``: the registration DB's figures in the Prometheus text format.

One pass over the registrations, so a scrape costs in proportion to topics, channels and
producers. Producers are counted as the HTTP API shows them: ``nsq_lookupd_producers`` is
``/nodes``' list (nsqd peers that pinged within ``--inactive-producer-timeout``) and
``nsq_lookupd_topic_producers`` is ``/lookup``'s (active and not tombstoned).
"""

from __future__ import annotations

from dataclasses import dataclass

from nsqpy._internal.prometheus import Family, labels, process_families, render
from nsqpy._version import __version__
from nsqpy.nsqlookupd.registry import CHANNEL, CLIENT, TOPIC, RegistrationDB, filter_by_active
from nsqpy.protocol.constants import NSQ_VERSION


@dataclass(frozen=True, slots=True)
class Limits:
    """The two timeouts (ns) that decide which producers count."""

    inactive_producer_timeout: int
    tombstone_lifetime: int


def _gauge(name: str, help_text: str, value: float) -> Family:
    family = Family(name, "gauge", help_text)
    family.add(value)
    return family


def _topic_families(db: RegistrationDB, limits: Limits, now: int) -> tuple[list[Family], int]:
    """Per-topic families, and the number of channel registrations."""
    producers = Family(
        "nsq_lookupd_topic_producers", "gauge", "nsqd nodes /lookup returns for the topic."
    )
    tombstoned = Family(
        "nsq_lookupd_topic_tombstoned_producers",
        "gauge",
        "nsqd nodes tombstoned for the topic (within --tombstone-lifetime).",
    )
    channels_per_topic: dict[str, int] = {}
    channel_count = 0
    topic_rows: list[tuple[str, int, int]] = []
    for reg, regs_producers in db.items():
        if reg.category == CHANNEL:
            channel_count += 1
            channels_per_topic[reg.key] = channels_per_topic.get(reg.key, 0) + 1
        elif reg.category == TOPIC:
            active = filter_by_active(
                regs_producers, limits.inactive_producer_timeout, limits.tombstone_lifetime, now
            )
            stones = sum(p.is_tombstoned(limits.tombstone_lifetime, now) for p in regs_producers)
            topic_rows.append((reg.key, len(active), stones))
    channels = Family("nsq_lookupd_topic_channels", "gauge", "Channels registered for the topic.")
    for topic, active_count, stones in sorted(topic_rows):
        text = labels(("topic", topic))
        producers.add(active_count, text)
        tombstoned.add(stones, text)
        channels.add(channels_per_topic.get(topic, 0), text)
    return [producers, tombstoned, channels], channel_count


def metrics_text(db: RegistrationDB, limits: Limits, connections: int) -> str:
    """The whole ``/metrics`` body of one nsqlookupd."""
    now = db.clock()
    topic_families, channel_count = _topic_families(db, limits, now)
    nodes = filter_by_active(
        db.find_producers(CLIENT, "", ""), limits.inactive_producer_timeout, 0, now
    )
    info = Family("nsq_build_info", "gauge", "nsqlookupd's NSQ version and nsqpy version.")
    info.add(1, labels(("daemon", "nsqlookupd"), ("version", NSQ_VERSION), ("nsqpy", __version__)))
    families = [
        info,
        _gauge("nsq_lookupd_connections", "nsqd TCP (V1) connections.", connections),
        _gauge("nsq_lookupd_producers", "Active nsqd nodes (as /nodes lists them).", len(nodes)),
        _gauge("nsq_lookupd_topics", "Topics registered.", len(db.topics())),
        _gauge("nsq_lookupd_channels", "Channels registered (all topics).", channel_count),
        *topic_families,
        *process_families(),
    ]
    return render(families)

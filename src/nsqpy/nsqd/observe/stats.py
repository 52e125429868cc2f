"""``/stats``: snapshots of topics, channels and clients, rendered as nsqd renders them.

``collect`` reads the broker's counters (never the queued messages) into plain records;
``stats_json`` and ``stats_text`` turn a snapshot into nsqd v1.3.0's JSON document (field
order, ``null`` vs ``[]`` and omitempty quirks included) and its ``printStats`` text.

Quirks kept on purpose, because tools parse them:

- a topic filter that matches nothing gives ``"topics": null``; no filter gives ``[]``; a
  channel filter that matches nothing drops the topic;
- ``clients`` is ``null`` and ``producers`` is ``null`` when clients are excluded;
  ``producers`` is also ``null`` when there are none; ``client_count`` is always there;
- ``pub_counts`` holds at most one topic (the first one matching the topic filter), and is
  omitted when empty;
- ``e2e_processing_latency`` is ``{"count":0,"percentiles":null}`` while percentiles are not
  configured (``--e2e-processing-latency-percentile``), and for a topic none of whose channels
  tracks them; otherwise ``percentiles`` lists every configured quantile, even with count 0.

nsqpy's dead-letter/TTL fields (``max_attempts``, ``message_ttl``, ``dead_letter_topic``,
``dead_letter_count``, ``expired_count``) are added to a channel, after nsqd's, only when a
policy applies to it, it has its own settings, or it ever diverted a message; so unless those
features are used the output is exactly nsqd's. The text form gets one more line per such
channel. Likewise ``lease_count`` (open leases, whose messages count in ``in_flight_count``)
follows on a channel that has had a lease, with a ``leases: N`` line in the text form.

Memory figures come from CPython rather than Go's runtime; see ``memory_stats``.
"""

from __future__ import annotations

import datetime as dt
import gc
import math
import os
import resource
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Final, Protocol

from nsqpy._internal.duration import SECOND, format_go_duration
from nsqpy.nsqd.core.lease import LeaseBook
from nsqpy.nsqd.core.quantile import LatencySummary

if TYPE_CHECKING:
    import ssl

    from nsqpy.nsqd.core.auth import AuthState
    from nsqpy.nsqd.core.channel import Channel
    from nsqpy.nsqd.core.client import ClientState
    from nsqpy.nsqd.core.topic import Topic
    from nsqpy.protocol.identify import ClientSettings

E2eResult = dict[str, object]


class ClientView(Protocol):
    """What stats read from a client connection (``V2Connection`` provides it)."""

    @property
    def settings(self) -> ClientSettings: ...

    @property
    def state(self) -> ClientState: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def pub_counts(self) -> dict[str, int]: ...

    @property
    def tls(self) -> bool: ...

    @property
    def ssl_object(self) -> ssl.SSLObject | None: ...

    @property
    def auth_state(self) -> AuthState | None: ...


# -- end-to-end latency -------------------------------------------------------------------------


def e2e_json(summary: LatencySummary) -> E2eResult:
    """nsqd's quantile.Result: ``{"count": N, "percentiles": [{"quantile", "value"}] | null}``
    (Go marshals each percentile as a map, so its keys come sorted)."""
    percentiles = summary.percentiles
    return {
        "count": summary.count,
        "percentiles": None
        if percentiles is None
        else [{"quantile": q, "value": value} for q, value in percentiles],
    }


def e2e_latency(owner: Topic | Channel) -> E2eResult:
    """``e2e_processing_latency`` of a topic (its channels merged) or of a channel."""
    return e2e_json(owner.e2e_summary())


# -- records --------------------------------------------------------------------------------------


def _fields_json(record: Any, omit: tuple[str, ...] = (), **shown: object) -> dict[str, object]:
    """A record's fields in declaration order, which is nsqd's JSON order; ``shown`` gives a
    field's JSON form where it is not the value itself, ``omit`` leaves fields out."""
    return {
        f.name: shown[f.name] if f.name in shown else getattr(record, f.name)
        for f in fields(record)
        if f.name not in omit
    }


@dataclass(slots=True)
class ClientStats:
    """One client connection (nsqd's ClientV2Stats); fields in JSON order."""

    client_id: str
    hostname: str
    remote_address: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    deflate: bool
    snappy: bool
    user_agent: str
    pub_counts: list[tuple[str, int]] = field(default_factory=list)
    tls: bool = False
    version: str = "V2"
    authed: bool = False
    auth_identity: str = ""
    auth_identity_url: str = ""
    tls_cipher_suite: str = ""
    tls_version: str = ""

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "version": self.version,
            "remote_address": self.remote_address,
            "state": self.state,
            "ready_count": self.ready_count,
            "in_flight_count": self.in_flight_count,
            "message_count": self.message_count,
            "finish_count": self.finish_count,
            "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts,
            "sample_rate": self.sample_rate,
            "deflate": self.deflate,
            "snappy": self.snappy,
            "user_agent": self.user_agent,
        }
        # omitempty in nsqd:
        if self.authed:
            doc["authed"] = True
        if self.auth_identity:
            doc["auth_identity"] = self.auth_identity
        if self.auth_identity_url:
            doc["auth_identity_url"] = self.auth_identity_url
        if self.pub_counts:
            doc["pub_counts"] = [{"topic": t, "count": n} for t, n in self.pub_counts]
        doc["tls"] = self.tls
        doc["tls_cipher_suite"] = self.tls_cipher_suite
        doc["tls_version"] = self.tls_version
        doc["tls_negotiated_protocol"] = ""
        doc["tls_negotiated_protocol_is_mutual"] = False
        return doc

    def text(self, now_ns: int) -> str:
        """nsqd's ClientV2Stats.String(): a producer line if it published, else a consumer."""
        # Go: time.Since(time.Unix(connect_ts, 0)).Truncate(time.Second)
        connected = format_go_duration(max(now_ns // SECOND - self.connect_ts, 0) * SECOND)
        label = f"{self.version} {self._display_id():<21}"
        if self.pub_counts:
            total = sum(n for _, n in self.pub_counts)
            topics = ",".join(f"{t}={n}" for t, n in self.pub_counts)
            return f"[{label}] msgs: {total:<8d} topics: {topics} connected: {connected}"
        return (
            f"[{label}] state: {self.state} inflt: {self.in_flight_count:<4d} "
            f"rdy: {self.ready_count:<4d} fin: {self.finish_count:<8d} "
            f"re-q: {self.requeue_count:<8d} msgs: {self.message_count:<8d} "
            f"connected: {connected}"
        )

    def _display_id(self) -> str:
        # "hostname:port user_agent"; the port is empty when the address has none (unix).
        host, sep, port = self.remote_address.rpartition(":")
        if not sep or not host:
            port = ""
        return f"{self.hostname}:{port} {self.user_agent}"


@dataclass(slots=True)
class PolicyStats:
    """A channel's dead-letter/TTL policy as it applies, and what it did."""

    max_attempts: int
    message_ttl: int  # ns
    dead_letter_topic: str
    dead_letter_count: int
    expired_count: int

    def to_json(self) -> dict[str, object]:
        return _fields_json(self, message_ttl=format_go_duration(self.message_ttl))

    def text(self) -> str:
        return (
            f"dead-letter: {self.dead_letter_topic or '-'} max-attempts: {self.max_attempts} "
            f"ttl: {format_go_duration(self.message_ttl)} dead: {self.dead_letter_count} "
            f"expired: {self.expired_count}"
        )


@dataclass(slots=True)
class ChannelStats:
    channel_name: str
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    clients: list[ClientStats] | None
    paused: bool
    e2e_processing_latency: E2eResult
    policy: PolicyStats | None = None
    #: Open leases (nsqpy.nsqd.core.lease); None for a channel that never had one.
    lease_count: int | None = None

    def to_json(self) -> dict[str, object]:
        clients = None if self.clients is None else [c.to_json() for c in self.clients]
        doc = _fields_json(self, omit=("policy", "lease_count"), clients=clients)
        if self.policy is not None:
            doc.update(self.policy.to_json())
        if self.lease_count is not None:
            doc["lease_count"] = self.lease_count
        return doc


@dataclass(slots=True)
class TopicStats:
    topic_name: str
    channels: list[ChannelStats]
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    paused: bool
    e2e_processing_latency: E2eResult

    def to_json(self) -> dict[str, object]:
        return _fields_json(self, channels=[c.to_json() for c in self.channels])


@dataclass(slots=True)
class MemoryStats:
    """nsqd's memStats field names, filled from CPython (see ``memory_stats``)."""

    heap_objects: int = 0
    heap_idle_bytes: int = 0
    heap_in_use_bytes: int = 0
    heap_released_bytes: int = 0
    gc_pause_usec_100: int = 0
    gc_pause_usec_99: int = 0
    gc_pause_usec_95: int = 0
    next_gc_bytes: int = 0
    gc_total_runs: int = 0

    def to_json(self) -> dict[str, object]:
        return _fields_json(self)


@dataclass(slots=True)
class Stats:
    """One snapshot: ``None`` lists are Go's nil slices (JSON ``null``)."""

    topics: list[TopicStats] | None
    producers: list[ClientStats] | None


# -- collection -----------------------------------------------------------------------------------


def client_stats(conn: ClientView, topic_filter: str = "") -> ClientStats:
    """A connection's stats; ``pub_counts`` keeps one topic, as nsqd's loop ``break``s."""
    state, settings = conn.state, conn.settings
    pub_counts = [
        (topic, count)
        for topic, count in conn.pub_counts.items()
        if not topic_filter or topic == topic_filter
    ][:1]
    return ClientStats(
        client_id=settings.client_id,
        hostname=settings.hostname,
        remote_address=conn.remote_address,
        state=state.state,
        ready_count=state.rdy,
        in_flight_count=len(state.in_flight),
        message_count=state.message_count,
        finish_count=state.finish_count,
        requeue_count=state.requeue_count,
        connect_ts=state.connect_ts,
        sample_rate=settings.sample_rate,
        deflate=settings.deflate,
        snappy=settings.snappy,
        user_agent=settings.user_agent,
        pub_counts=pub_counts,
        tls=conn.tls,
        **_auth_fields(conn.auth_state),
        **_tls_fields(conn.ssl_object if conn.tls else None),
    )


def _auth_fields(state: AuthState | None) -> dict[str, Any]:
    if state is None:
        return {}
    return {
        "authed": bool(state.authorizations),
        "auth_identity": state.identity,
        "auth_identity_url": state.identity_url,
    }


def _tls_fields(ssl_object: ssl.SSLObject | None) -> dict[str, Any]:
    """nsqd's names: ``TLS1.2``-style versions; cipher suites by their IANA/OpenSSL name."""
    if ssl_object is None:
        return {}
    cipher = ssl_object.cipher()
    version = (ssl_object.version() or "").replace("TLSv", "TLS")
    return {"tls_cipher_suite": cipher[0] if cipher else "", "tls_version": version}


def _channel_stats(
    channel: Channel,
    connections: Mapping[int, ClientView],
    topic_filter: str,
    include_clients: bool,
) -> ChannelStats:
    clients: list[ClientStats] | None = None
    if include_clients:
        clients = [
            client_stats(conn, topic_filter)
            for client_id in channel.clients
            if (conn := connections.get(client_id)) is not None
        ]
    return ChannelStats(
        channel_name=channel.name,
        depth=channel.depth,  # memory + disk, as nsqd counts it
        backend_depth=channel.backend_depth,
        in_flight_count=channel.in_flight_count,
        deferred_count=channel.deferred_count,
        message_count=channel.message_count,
        requeue_count=channel.requeue_count,
        timeout_count=channel.timeout_count,
        client_count=len(channel.clients),
        clients=clients,
        paused=channel.paused,
        e2e_processing_latency=e2e_latency(channel),
        policy=_policy_stats(channel) if channel.shows_policy else None,
        lease_count=_lease_count(channel),
    )


def _lease_count(channel: Channel) -> int | None:
    book = channel.leases
    if not isinstance(book, LeaseBook) or not book.created:
        return None
    return book.lease_count


def _policy_stats(channel: Channel) -> PolicyStats:
    return PolicyStats(
        max_attempts=channel.max_attempts,
        message_ttl=channel.message_ttl,
        dead_letter_topic=channel.dead_letter_topic,
        dead_letter_count=channel.dead_letter_count,
        expired_count=channel.expired_count,
    )


def _topic_stats(topic: Topic, channels: list[ChannelStats]) -> TopicStats:
    return TopicStats(
        topic_name=topic.name,
        channels=channels,
        depth=topic.depth,
        backend_depth=topic.backend_depth,
        message_count=topic.message_count,
        message_bytes=topic.message_bytes,
        paused=topic.paused,
        e2e_processing_latency=e2e_latency(topic),
    )


def _pick(names: Iterable[str], wanted: str) -> list[str] | None:
    """Names to report, sorted; None when a filter names nothing that exists."""
    if not wanted:
        return sorted(names)
    return [wanted] if wanted in names else None


def collect(
    topics: Mapping[str, Topic],
    connections: Mapping[int, ClientView],
    topic_filter: str = "",
    channel_filter: str = "",
    include_clients: bool = True,
) -> Stats:
    """nsqd's GetStats: topics and channels by name, then producers (clients that published)."""
    topic_names = _pick(topics.keys(), topic_filter)
    if topic_names is None:
        return Stats(topics=None, producers=None)  # Go returns before looking at producers
    out: list[TopicStats] = []
    for name in topic_names:
        topic = topics[name]
        channel_names = _pick(topic.channels.keys(), channel_filter)
        if channel_names is None:
            continue
        channels = [
            _channel_stats(topic.channels[c], connections, topic_filter, include_clients)
            for c in channel_names
        ]
        out.append(_topic_stats(topic, channels))
    producers: list[ClientStats] | None = None
    if include_clients:
        producers = [
            client_stats(conn, topic_filter) for conn in connections.values() if conn.pub_counts
        ] or None
    return Stats(topics=out, producers=producers)


# -- memory ---------------------------------------------------------------------------------------


class _GcPauses:
    """Durations of the last 256 garbage collections, like Go's ``MemStats.PauseNs`` ring.

    Installed into ``gc.callbacks``; costs two clock reads per collection.
    """

    def __init__(self) -> None:
        self.pauses: deque[int] = deque(maxlen=256)
        self._started = 0

    def __call__(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.pauses.append(time.perf_counter_ns() - self._started)
            self._started = 0


_GC_PAUSES: Final = _GcPauses()


def install_gc_pause_recorder() -> None:
    """Start timing collections for ``gc_pause_usec_*`` (idempotent)."""
    if _GC_PAUSES not in gc.callbacks:
        gc.callbacks.append(_GC_PAUSES)


def _percentile(perc: float, values: list[int]) -> int:
    # nsqd's statsd.go percentile(): index floor(perc/100 * n + 0.5), clamped to the end.
    if not values:
        return 0
    index = math.floor(perc / 100.0 * len(values) + 0.5)
    return values[min(index, len(values) - 1)]


def _resident_bytes() -> int:
    """Current resident set size; the peak (ru_maxrss) where /proc is not available."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            resident_pages = int(statm.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def memory_stats() -> MemoryStats:
    """nsqd's memory block from CPython's counters.

    ========================  ===============================================================
    heap_objects              ``sys.getallocatedblocks()``: live blocks in CPython's allocator
    heap_in_use_bytes         resident set size of the process (/proc/self/statm)
    gc_pause_usec_100/99/95   percentiles of the last 256 collection durations, in µs
                              (timed by ``gc.callbacks`` once ``install_gc_pause_recorder``
                              ran; Go's are stop-the-world pauses, CPython's collections stop
                              the whole interpreter too)
    gc_total_runs             collections of all generations since start (``gc.get_stats``)
    heap_idle_bytes,          0: CPython has no idle spans, no pages returned by a scavenger,
    heap_released_bytes,      and its collector is triggered by allocation counts, not by a
    next_gc_bytes             heap size target
    ========================  ===============================================================
    """
    pauses = sorted(_GC_PAUSES.pauses)
    runs = sum(generation["collections"] for generation in gc.get_stats())
    return MemoryStats(
        heap_objects=sys.getallocatedblocks(),
        heap_in_use_bytes=_resident_bytes(),
        gc_pause_usec_100=_percentile(100.0, pauses) // 1000,
        gc_pause_usec_99=_percentile(99.0, pauses) // 1000,
        gc_pause_usec_95=_percentile(95.0, pauses) // 1000,
        gc_total_runs=runs & 0xFFFFFFFF,  # a uint32 in Go
    )


# -- rendering ------------------------------------------------------------------------------------


def stats_json(
    stats: Stats,
    *,
    version: str,
    health: str,
    start_time: int,
    memory: MemoryStats | None,
    alerts: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    """The ``/stats?format=json`` document, keys in nsqd's order (memory is omitempty).

    ``alerts`` (nsqpy's backlog alerts) is added last, and only when alert rules are
    configured, so that by default the document is exactly nsqd's.
    """
    doc: dict[str, object] = {
        "version": version,
        "health": health,
        "start_time": start_time,
        "topics": None if stats.topics is None else [t.to_json() for t in stats.topics],
    }
    if memory is not None:
        doc["memory"] = memory.to_json()
    doc["producers"] = None if stats.producers is None else [p.to_json() for p in stats.producers]
    if alerts is not None:
        doc["alerts"] = alerts
    return doc


def nanoseconds_to_human(value: float) -> str:
    """NSQ's stringy.NanoSecondToHuman: one decimal and the largest unit it exceeds."""
    for limit, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > limit:
            return f"{value / limit:.1f}{suffix}"
    return f"{value:.1f}ns"


def _e2e_text(result: E2eResult) -> str:
    percentiles = result.get("percentiles")
    if not isinstance(percentiles, list):
        return ""
    return ", ".join(nanoseconds_to_human(float(p["value"])) for p in percentiles)


def rfc3339(unix_seconds: int) -> str:
    """Go's ``time.Unix(s, 0).Format(time.RFC3339)`` in the local zone ("Z" for UTC)."""
    local = dt.datetime.fromtimestamp(unix_seconds).astimezone()
    offset = local.utcoffset() or dt.timedelta(0)
    if not offset:
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return local.strftime("%Y-%m-%dT%H:%M:%S") + f"{sign}{hours:02d}:{mins:02d}"


def _memory_text(memory: MemoryStats) -> list[str]:
    lines = ["", "Memory:"]
    lines.extend(f"   {name:<25s}\t{value}" for name, value in memory.to_json().items())
    return lines


def _topic_text(topic: TopicStats, now_ns: int) -> list[str]:
    prefix = "*P " if topic.paused else "   "
    lines = [
        f"{prefix}[{topic.topic_name:<15s}] depth: {topic.depth:<5d} "
        f"be-depth: {topic.backend_depth:<5d} msgs: {topic.message_count:<8d} "
        f"e2e%: {_e2e_text(topic.e2e_processing_latency)}",
    ]
    for channel in topic.channels:
        prefix = "   *P " if channel.paused else "      "
        lines.append(
            f"{prefix}[{channel.channel_name:<25s}] depth: {channel.depth:<5d} "
            f"be-depth: {channel.backend_depth:<5d} inflt: {channel.in_flight_count:<4d} "
            f"def: {channel.deferred_count:<4d} re-q: {channel.requeue_count:<5d} "
            f"timeout: {channel.timeout_count:<5d} msgs: {channel.message_count:<8d} "
            f"e2e%: {_e2e_text(channel.e2e_processing_latency)}"
        )
        if channel.policy is not None:
            lines.append(f"          {channel.policy.text()}")
        if channel.lease_count is not None:
            lines.append(f"          leases: {channel.lease_count}")
        lines.extend(f"        {client.text(now_ns)}" for client in channel.clients or ())
    return lines


def stats_text(
    stats: Stats,
    *,
    version_line: str,
    health: str,
    start_time: int,
    now_ns: int,
    memory: MemoryStats | None,
    alerts: list[str] | None = None,
) -> str:
    """nsqd's printStats; ``now_ns`` is wall-clock ns (uptime and "connected" durations).

    ``alerts``: lines for an ``Alerts:`` section at the end (only when rules are configured).
    """
    uptime_ns = max(now_ns - start_time * SECOND, 0)
    lines = [
        version_line,
        f"start_time {rfc3339(start_time)}",
        f"uptime {format_go_duration(uptime_ns)}",
        "",
        f"Health: {health}",
    ]
    if memory is not None:
        lines.extend(_memory_text(memory))
    topics = stats.topics or []
    if topics:
        lines.extend(["", "Topics:"])
        for index, topic in enumerate(topics):
            if index:
                lines.append("")  # nsqd separates topics (not the first) by a blank line
            lines.extend(_topic_text(topic, now_ns))
    else:
        lines.extend(["", "Topics: None"])
    producers = stats.producers or []
    lines.extend(["", "Producers:" if producers else "Producers: None"])
    lines.extend(f"   {producer.text(now_ns)}" for producer in producers)
    if alerts is not None:
        lines.extend(["", "Alerts:" if alerts else "Alerts: None", *alerts])
    return "\n".join(lines) + "\n"

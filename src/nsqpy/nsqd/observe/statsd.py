"""statsd output, as nsqd v1.3.0 sends it: the lines and the packets, without any I/O.

Every ``--statsd-interval`` nsqd takes a ``/stats`` snapshot (the same ``stats.collect``) and
turns it into statsd lines: counters are the change since the previous push, gauges the
current value. ``Report`` remembers the previous snapshot; ``pack`` fills UDP payloads of at
most ``--statsd-udp-packet-size`` bytes without splitting a line. The adapter (``statsd_push``)
opens the socket and spreads the packets over the interval.

Names, with ``<T>`` a topic and ``<C>`` a channel (``|c`` counter, ``|g`` gauge)::

    topic.<T>.message_count|c  .message_bytes|c  .depth|g  .backend_depth|g
    topic.<T>.e2e_processing_latency_<pct>|g                      (when percentiles are on)
    topic.<T>.channel.<C>.message_count|c  .depth|g  .backend_depth|g  .in_flight_count|g
        .deferred_count|g  .requeue_count|c  .timeout_count|c  .clients|g
        .e2e_processing_latency_<pct>|g
        .dead_letter_count|c  .expired_count|c     (nsqpy: channels with a dead-letter/TTL policy)
    mem.heap_objects|g  mem.heap_idle_bytes|g  mem.heap_in_use_bytes|g
    mem.heap_released_bytes|g  mem.gc_pause_usec_100|g  mem.gc_pause_usec_99|g
    mem.gc_pause_usec_95|g  mem.next_gc_bytes|g  mem.gc_runs|c   (with --statsd-mem-stats)

The ``mem.*`` values are ``stats.memory_stats()``: CPython's nearest equivalents of Go's
runtime figures (see its docstring; the ones CPython has no counterpart for are 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nsqpy.nsqd.observe.stats import ChannelStats, E2eResult, MemoryStats, Stats, TopicStats

_EPHEMERAL = "#ephemeral"
_UINT32 = 0xFFFFFFFF
_BUFIO_DEFAULT_SIZE = 4096


def host_key(address: str) -> str:
    """nsqd's statsd.HostKey: ``.`` and ``:`` become ``_``."""
    return address.replace(".", "_").replace(":", "_")


def prefix_for(template: str, broadcast_address: str, http_port: int) -> str:
    """``--statsd-prefix`` with ``%s`` replaced by the host key, ending in ``.``.

    The host key is of ``broadcast_address:broadcast_http_port`` (Go's JoinHostPort, so an
    IPv6 address keeps its brackets). An empty template stays empty, as in nsqd.
    """
    if not template:
        return ""
    host = f"[{broadcast_address}]" if ":" in broadcast_address else broadcast_address
    prefix = template.replace("%s", host_key(f"{host}:{http_port}"))
    return prefix if prefix.endswith(".") else prefix + "."


def counter(prefix: str, stat: str, value: int) -> str:
    return f"{prefix}{stat}:{value}|c\n"


def gauge(prefix: str, stat: str, value: int) -> str:
    return f"{prefix}{stat}:{value}|g\n"


def _e2e_stats(stat: str, latency: E2eResult) -> list[tuple[str, int]]:
    """``<stat>.e2e_processing_latency_<pct>`` gauges: Go's ``%.0f`` of the quantile * 100,
    and the value cast to int64 (ns are the finest unit, so nothing is lost)."""
    percentiles = latency.get("percentiles")
    if not isinstance(percentiles, list):
        return []
    return [
        (f"{stat}.e2e_processing_latency_{item['quantile'] * 100.0:.0f}", int(item["value"]))
        for item in percentiles
    ]


@dataclass(slots=True)
class Report:
    """Turns successive snapshots into statsd lines (nsqd's statsdLoop body)."""

    prefix: str
    exclude_ephemeral: bool = False
    _last: dict[str, TopicStats] = field(default_factory=dict)
    _last_memory: MemoryStats = field(default_factory=MemoryStats)

    def lines(self, stats: Stats, memory: MemoryStats | None = None) -> list[str]:
        """This push's lines; ``memory`` is given when ``--statsd-mem-stats`` is on."""
        out: list[str] = []
        for topic in stats.topics or ():
            if self.exclude_ephemeral and topic.topic_name.endswith(_EPHEMERAL):
                continue
            out.extend(self._topic_lines(topic))
        # Excluded topics are remembered too: nsqd keeps the whole previous snapshot.
        self._last = {topic.topic_name: topic for topic in stats.topics or ()}
        if memory is not None:
            out.extend(self._memory_lines(memory))
        return out

    def _topic_lines(self, topic: TopicStats) -> list[str]:
        p, stat = self.prefix, f"topic.{topic.topic_name}"
        last = self._last.get(topic.topic_name)
        last_channels = {c.channel_name: c for c in last.channels} if last else {}
        out = [
            counter(p, f"{stat}.message_count", topic.message_count - _count(last)),
            counter(p, f"{stat}.message_bytes", topic.message_bytes - _bytes(last)),
            gauge(p, f"{stat}.depth", topic.depth),
            gauge(p, f"{stat}.backend_depth", topic.backend_depth),
        ]
        out.extend(
            gauge(p, name, value) for name, value in _e2e_stats(stat, topic.e2e_processing_latency)
        )
        for channel in topic.channels:
            if self.exclude_ephemeral and channel.channel_name.endswith(_EPHEMERAL):
                continue
            out.extend(self._channel_lines(stat, channel, last_channels.get(channel.channel_name)))
        return out

    def _channel_lines(
        self, topic_stat: str, channel: ChannelStats, last: ChannelStats | None
    ) -> list[str]:
        p, stat = self.prefix, f"{topic_stat}.channel.{channel.channel_name}"
        messages, requeues, timeouts = (
            (last.message_count, last.requeue_count, last.timeout_count) if last else (0, 0, 0)
        )
        out = [
            counter(p, f"{stat}.message_count", channel.message_count - messages),
            gauge(p, f"{stat}.depth", channel.depth),
            gauge(p, f"{stat}.backend_depth", channel.backend_depth),
            gauge(p, f"{stat}.in_flight_count", channel.in_flight_count),
            gauge(p, f"{stat}.deferred_count", channel.deferred_count),
            counter(p, f"{stat}.requeue_count", channel.requeue_count - requeues),
            counter(p, f"{stat}.timeout_count", channel.timeout_count - timeouts),
            gauge(p, f"{stat}.clients", channel.client_count),
        ]
        out.extend(
            gauge(p, name, value)
            for name, value in _e2e_stats(stat, channel.e2e_processing_latency)
        )
        policy = channel.policy
        if policy is not None:  # nsqpy's dead letters, only where /stats shows them
            before = last.policy if last is not None else None
            dead, expired = (before.dead_letter_count, before.expired_count) if before else (0, 0)
            out.append(counter(p, f"{stat}.dead_letter_count", policy.dead_letter_count - dead))
            out.append(counter(p, f"{stat}.expired_count", policy.expired_count - expired))
        return out

    def _memory_lines(self, memory: MemoryStats) -> list[str]:
        p, last = self.prefix, self._last_memory
        self._last_memory = memory
        runs = (memory.gc_total_runs - last.gc_total_runs) & _UINT32  # uint32 arithmetic
        return [
            gauge(p, "mem.heap_objects", memory.heap_objects),
            gauge(p, "mem.heap_idle_bytes", memory.heap_idle_bytes),
            gauge(p, "mem.heap_in_use_bytes", memory.heap_in_use_bytes),
            gauge(p, "mem.heap_released_bytes", memory.heap_released_bytes),
            gauge(p, "mem.gc_pause_usec_100", memory.gc_pause_usec_100),
            gauge(p, "mem.gc_pause_usec_99", memory.gc_pause_usec_99),
            gauge(p, "mem.gc_pause_usec_95", memory.gc_pause_usec_95),
            gauge(p, "mem.next_gc_bytes", memory.next_gc_bytes),
            counter(p, "mem.gc_runs", runs),
        ]


def _count(topic: TopicStats | None) -> int:
    return topic.message_count if topic is not None else 0


def _bytes(topic: TopicStats | None) -> int:
    return topic.message_bytes if topic is not None else 0


def pack(lines: Iterable[str], size: int) -> list[bytes]:
    """UDP payloads of whole lines, each at most ``size`` bytes (nsqd's boundary-buffered
    writer over a ``size``-byte bufio.Writer). A single line longer than ``size`` goes out
    alone, whole, as bufio writes an oversized chunk straight through."""
    if size <= 0:
        size = _BUFIO_DEFAULT_SIZE  # bufio.NewWriterSize's fallback
    packets: list[bytes] = []
    current = bytearray()
    for line in lines:
        data = line.encode()
        if len(data) > size - len(current) and current:
            packets.append(bytes(current))
            current.clear()
        if len(data) > size:
            packets.append(data)
        else:
            current += data
    if current:
        packets.append(bytes(current))
    return packets

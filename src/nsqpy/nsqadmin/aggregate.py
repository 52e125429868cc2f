"""nsqd ``/stats`` documents → NSQ clusterinfo's TopicStats / ChannelStats / ClientStats JSON.

Pure functions over parsed JSON. Every object is a dict built in the Go struct's field order,
so ``gojson.dumps`` writes what NSQ's nsqadmin writes. The rules are clusterinfo's:

* per node: ``node`` is the nsqd's ``broadcast_address:http_port``, ``memory_depth`` is
  ``depth - backend_depth``, and each channel learns its node, hostname and topic;
* a channel aggregate starts empty and adds every node's channel: counts summed, ``paused``
  if any node is paused, ``nodes`` and ``clients`` sorted by hostname, ``node`` = ``"*"``;
* a topic aggregate adds every node's topic the same way; its ``channels`` are the channel
  aggregates. (Go's nsqadmin builds them from the first node's channel objects, mutating that
  node's own entry as a side effect; we build the same sums without the aliasing.)
* end-to-end latency percentiles merge as quantile.E2eProcessingLatencyAggregate.Add does,
  quirks included (``min`` ends up as the last node's ``max``).

nsqpy's nsqd adds five keys to a channel that has a dead-letter or TTL policy (or once diverted
a message): ``max_attempts``, ``message_ttl``, ``dead_letter_topic``, ``dead_letter_count``,
``expired_count``. They are carried, after Go's keys and in that order, by a node's channel
that reported them and by every aggregate (channel, and a topic's channel list) with at least
one such node, and nowhere else, so against nodes without the feature the JSON is Go's. An
aggregate sums the two counts over the nodes that report them; its three settings are those
of the first reporting node in ``nodes`` order (by hostname, then node address), whatever
order the nodes were added in. Nodes that disagree keep their own values in ``nodes``.

Likewise ``lease_count`` (open leases), which nsqpy's nsqd adds to a channel that has had a
lease: carried last, after the dead-letter keys, by a node's channel that reported it and by
every aggregate with at least one such node (the sum over them), and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

Doc = dict[str, Any]

_TOPIC_COUNTS: Final = ("depth", "memory_depth", "backend_depth", "message_count")
_CHANNEL_COUNTS: Final = (
    "depth",
    "memory_depth",
    "backend_depth",
    "in_flight_count",
    "deferred_count",
    "requeue_count",
    "timeout_count",
    "message_count",
    "client_count",
)
_CLIENT_FIELDS: Final[tuple[tuple[str, object], ...]] = (
    ("remote_address", ""),
    ("version", ""),
    ("client_id", ""),
    ("hostname", ""),
    ("user_agent", ""),
    ("connect_ts", 0),
)
_CLIENT_COUNTS: Final[tuple[tuple[str, object], ...]] = (
    ("in_flight_count", 0),
    ("ready_count", 0),
    ("finish_count", 0),
    ("requeue_count", 0),
    ("message_count", 0),
    ("sample_rate", 0),
    ("deflate", False),
    ("snappy", False),
    ("authed", False),
    ("auth_identity", ""),
    ("auth_identity_url", ""),
    ("tls", False),
    ("tls_cipher_suite", ""),
    ("tls_version", ""),
    ("tls_negotiated_protocol", ""),
    ("tls_negotiated_protocol_is_mutual", False),
)
_NS: Final = 1_000_000_000
#: nsqpy's dead-letter keys of a channel, in nsqd's order: settings, then counts.
_POLICY_SETTINGS: Final = ("max_attempts", "message_ttl", "dead_letter_topic")
_POLICY_COUNTS: Final = ("dead_letter_count", "expired_count")
#: nsqpy's count of a channel's open leases, after everything else.
_LEASES: Final = "lease_count"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _num(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _list(value: object) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _by_hostname(items: list[Doc]) -> None:
    # Go sorts by hostname alone; the node breaks ties so equal hostnames stay deterministic.
    items.sort(key=lambda d: (d.get("hostname", ""), d.get("node", "")))


# -- end-to-end latency ------------------------------------------------------------------------


def _sorted(mapping: Mapping[str, float]) -> dict[str, float]:
    return dict(sorted(mapping.items()))  # a Go map marshals with sorted keys


def e2e_from_node(doc: object) -> Doc | None:
    """A node's ``e2e_processing_latency`` as clusterinfo reads it (None if absent)."""
    if not isinstance(doc, Mapping):
        return None
    count = _num(doc, "count")
    percentiles = None
    raw = _list(doc.get("percentiles"))
    if raw is not None:
        percentiles = []
        for item in raw:
            p = {k: float(v) for k, v in _mapping(item).items() if isinstance(v, int | float)}
            value = p.get("value", 0.0)
            p.update(min=value, max=value, average=value, count=float(count))
            percentiles.append(_sorted(p))
    return {
        "count": count,
        "percentiles": percentiles,
        "topic": doc.get("topic", ""),
        "channel": doc.get("channel", ""),
        "host": doc.get("host", ""),
    }


def e2e_add(total: Doc, other: Doc | None) -> None:
    """quantile.E2eProcessingLatencyAggregate.Add: merge ``other`` into ``total``."""
    total["host"] = "*"
    if other is None:
        return  # Go would dereference nil here; nsqd always sends the object
    total["count"] += other["count"]
    percentiles: list[dict[str, float]] = total["percentiles"] or []
    for value in other["percentiles"] or ():
        index = next(
            (j for j, p in enumerate(percentiles) if p.get("quantile") == value.get("quantile")),
            None,
        )
        if index is None:
            percentiles.append({"quantile": value.get("quantile", 0.0)})
            index = len(percentiles) - 1
        p = percentiles[index]
        p["max"] = max(value.get("max", 0.0), p.get("max", 0.0))
        p["min"] = min(value.get("max", 0.0), p["max"])  # sic: NSQ compares with max
        p["count"] = p.get("count", 0.0) + value.get("count", 0.0)
        if p["count"] == 0:
            p["average"] = 0.0
        else:
            delta = value.get("average", 0.0) - p.get("average", 0.0)
            p["average"] = p.get("average", 0.0) + delta * value.get("count", 0.0) / p["count"]
        percentiles[index] = _sorted(p)
    total["percentiles"] = percentiles or total["percentiles"]


def _new_e2e(topic: str, channel: str) -> Doc:
    return {"count": 0, "percentiles": None, "topic": topic, "channel": channel, "host": "*"}


# -- per node ----------------------------------------------------------------------------------


def client_stats(doc: Mapping[str, Any], node: str, now: float) -> Doc:
    """One client of a node's channel (clusterinfo.ClientStats); ``connected`` in ns."""
    out: Doc = {"node": node}
    for key, default in _CLIENT_FIELDS:
        out[key] = doc.get(key, default)
    # Go: time.Now().Truncate(time.Second).Sub(time.Unix(connect_ts, 0))
    out["connected"] = (int(now) - _num(doc, "connect_ts")) * _NS
    for key, default in _CLIENT_COUNTS:
        out[key] = doc.get(key, default)
    return out


def node_channel(doc: Mapping[str, Any], node: str, hostname: str, topic: str, now: float) -> Doc:
    """One node's channel (clusterinfo.ChannelStats after GetNSQDStats filled it in)."""
    raw_clients = _list(doc.get("clients"))
    clients = None
    if raw_clients is not None:
        clients = [client_stats(_mapping(c), node, now) for c in raw_clients]
    depth, backend = _num(doc, "depth"), _num(doc, "backend_depth")
    out: Doc = {
        "node": node,
        "hostname": hostname,
        "topic_name": topic,
        "channel_name": doc.get("channel_name", ""),
        "depth": depth,
        "memory_depth": depth - backend,
        "backend_depth": backend,
        "in_flight_count": _num(doc, "in_flight_count"),
        "deferred_count": _num(doc, "deferred_count"),
        "requeue_count": _num(doc, "requeue_count"),
        "timeout_count": _num(doc, "timeout_count"),
        "message_count": _num(doc, "message_count"),
        "client_count": _num(doc, "client_count"),
        "nodes": None,
        "clients": clients,
        "paused": bool(doc.get("paused", False)),
        "e2e_processing_latency": e2e_from_node(doc.get("e2e_processing_latency")),
    }
    if _has_policy(doc):
        out.update((key, doc.get(key)) for key in _POLICY_SETTINGS)
        out.update((key, _num(doc, key)) for key in _POLICY_COUNTS)
    if _LEASES in doc:
        out[_LEASES] = _num(doc, _LEASES)
    return out


def _has_policy(doc: Mapping[str, Any]) -> bool:
    return any(key in doc for key in (*_POLICY_SETTINGS, *_POLICY_COUNTS))


def _policy_add(total: Doc) -> None:
    """The aggregate's dead-letter keys from its (sorted) nodes; see the module docstring."""
    reporting = [one for one in total["nodes"] if _has_policy(one)]
    if not reporting:
        return
    total.update((key, reporting[0][key]) for key in _POLICY_SETTINGS)
    total.update((key, sum(one[key] for one in reporting)) for key in _POLICY_COUNTS)


def _leases_add(total: Doc) -> None:
    """The aggregate's ``lease_count``: the sum over the nodes that report one, kept last."""
    total.pop(_LEASES, None)
    reporting = [one[_LEASES] for one in total["nodes"] if _LEASES in one]
    if reporting:
        total[_LEASES] = sum(reporting)


def node_topic(doc: Mapping[str, Any], node: str, hostname: str, now: float) -> Doc:
    """One node's topic (clusterinfo.TopicStats after GetNSQDStats filled it in)."""
    name = doc.get("topic_name", "")
    raw_channels = _list(doc.get("channels"))
    channels = None
    if raw_channels is not None:
        channels = [node_channel(_mapping(c), node, hostname, name, now) for c in raw_channels]
    depth, backend = _num(doc, "depth"), _num(doc, "backend_depth")
    return {
        "node": node,
        "hostname": hostname,
        "topic_name": name,
        "depth": depth,
        "memory_depth": depth - backend,
        "backend_depth": backend,
        "message_count": _num(doc, "message_count"),
        "nodes": None,
        "channels": channels,
        "paused": bool(doc.get("paused", False)),
        "e2e_processing_latency": e2e_from_node(doc.get("e2e_processing_latency")),
    }


# -- aggregates --------------------------------------------------------------------------------


def new_channel_aggregate(node: str, topic: str, channel: str) -> Doc:
    """The empty ChannelStats GetNSQDStats starts each channel's aggregate from."""
    return {
        "node": node,
        "hostname": "",
        "topic_name": topic,
        "channel_name": channel,
        **dict.fromkeys(_CHANNEL_COUNTS, 0),
        "nodes": None,
        "clients": None,
        "paused": False,
        "e2e_processing_latency": None,
    }


def channel_add(total: Doc, one: Doc) -> None:
    """ChannelStats.Add (and nsqpy's dead-letter and lease keys)."""
    total["node"] = "*"
    for key in _CHANNEL_COUNTS:
        total[key] += one[key]
    total["paused"] = total["paused"] or one["paused"]
    total["nodes"] = [*(total["nodes"] or ()), one]
    _by_hostname(total["nodes"])
    _policy_add(total)
    _leases_add(total)
    if total["e2e_processing_latency"] is None:
        total["e2e_processing_latency"] = _new_e2e(total["topic_name"], total["channel_name"])
    e2e_add(total["e2e_processing_latency"], one["e2e_processing_latency"])
    if one["clients"]:
        total["clients"] = [*(total["clients"] or ()), *one["clients"]]
        _by_hostname(total["clients"])


def topic_aggregate(name: str, node_topics: Iterable[Doc], channels: list[Doc] | None) -> Doc:
    """TopicStats{TopicName: name} after Add of every node's topic; ``channels`` are the
    channel aggregates (see the module docstring)."""
    total: Doc = {
        "node": "",
        "hostname": "",
        "topic_name": name,
        **dict.fromkeys(_TOPIC_COUNTS, 0),
        "nodes": None,
        "channels": None,
        "paused": False,
        "e2e_processing_latency": None,
    }
    for one in node_topics:
        total["node"] = "*"
        for key in _TOPIC_COUNTS:
            total[key] += one[key]
        total["paused"] = total["paused"] or one["paused"]
        total["nodes"] = [*(total["nodes"] or ()), one]
        if total["e2e_processing_latency"] is None:
            total["e2e_processing_latency"] = _new_e2e(name, "")
        e2e_add(total["e2e_processing_latency"], one["e2e_processing_latency"])
        total["channels"] = channels
    if total["nodes"]:
        _by_hostname(total["nodes"])
    return total


class StatsCollector:
    """GetNSQDStats without the I/O: feed each node's /stats, read the per-node topics and
    the channel aggregates (keyed by channel name, or ``topic:channel`` without a topic)."""

    def __init__(self, selected_topic: str, now: float) -> None:
        self.selected_topic = selected_topic
        self.now = now
        self.topics: list[Doc] = []
        self.channels: dict[str, Doc] = {}

    def add_node(self, node: str, hostname: str, stats: Mapping[str, Any]) -> None:
        for raw in _list(stats.get("topics")) or ():
            topic = node_topic(_mapping(raw), node, hostname, self.now)
            if self.selected_topic and topic["topic_name"] != self.selected_topic:
                continue
            self.topics.append(topic)
            for channel in topic["channels"] or ():
                name = channel["channel_name"]
                key = name if self.selected_topic else f"{topic['topic_name']}:{name}"
                total = self.channels.get(key)
                if total is None:
                    total = new_channel_aggregate(node, topic["topic_name"], name)
                    self.channels[key] = total
                channel_add(total, channel)

    def sorted_topics(self) -> list[Doc]:
        _by_hostname(self.topics)
        return self.topics


def counter_stats(channels: Mapping[str, Doc]) -> dict[str, Doc]:
    """``/api/counter``'s ``stats``: message_count per ``topic:channel:node``, sorted keys."""
    out: dict[str, Doc] = {}
    for total in channels.values():
        for one in total["nodes"] or ():
            key = f"{total['topic_name']}:{total['channel_name']}:{one['node']}"
            entry = out.setdefault(
                key,
                {
                    "node": one["node"],
                    "topic_name": total["topic_name"],
                    "channel_name": total["channel_name"],
                    "message_count": 0,
                },
            )
            entry["message_count"] += one["message_count"]
    return dict(sorted(out.items()))


def node_totals(topics: Iterable[Doc]) -> tuple[int, int]:
    """``/api/nodes/:node``'s (total_messages, total_clients)."""
    messages = clients = 0
    for topic in topics:
        messages += topic["message_count"]
        for channel in topic["channels"] or ():
            clients += len(channel["clients"] or ())
    return messages, clients

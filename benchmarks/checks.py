"""Correctness checks for benchmark runs: counts against the broker's /stats, and memory.

Every broker scenario of the full run ends with a check:

- PUB only: the writers' acknowledged count equals the topics' ``message_count``, and every
  channel holds all of them (``depth + in_flight + deferred``).
- SUB only / PUB+SUB / latency: once the readers have drained, what they received (timed window
  plus tail) equals published x channels per topic, and the channels are empty with nothing in
  flight, requeued or timed out. The latency runs also check duplicates by message id and by
  sequence number, and that every sequence number arrived.
- Memory (1x1 PUB only): peak RSS <= 2 x bytes held + 100 MiB, bytes held being the /stats depth
  x (message size + 26).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Collection
from typing import Any

# Bytes of per-message overhead in the memory formula (NSQ's 26-byte message header).
MESSAGE_OVERHEAD = 26
MIB = 1024 * 1024
_CHANNEL_SUMS = (
    "depth",
    "in_flight_count",
    "deferred_count",
    "message_count",
    "requeue_count",
    "timeout_count",
)


def fetch_stats(http: str | None) -> dict[str, Any] | None:
    """The broker's /stats document, or None when there is no HTTP port or it cannot answer."""
    if http is None:
        return None
    url = f"http://{http}/stats?" + urllib.parse.urlencode({"format": "json"})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc: dict[str, Any] = json.load(resp)
    except (OSError, ValueError):
        return None
    inner: dict[str, Any] = doc.get("data", doc)  # older NSQ wrapped replies in {"data": ...}
    return inner


def aggregate(doc: dict[str, Any], topics: Collection[str]) -> dict[str, int]:
    """Sums over ``topics`` and their channels of the counters the checks need."""
    sums = {"topics": 0, "channels": 0, "clients": 0, "topic_depth": 0, "topic_message_count": 0}
    sums.update({f"channel_{k}": 0 for k in _CHANNEL_SUMS})
    for topic in doc.get("topics") or []:
        if topic.get("topic_name") not in topics:
            continue
        sums["topics"] += 1
        sums["topic_depth"] += topic.get("depth") or 0
        sums["topic_message_count"] += topic.get("message_count") or 0
        for channel in topic.get("channels") or []:
            sums["channels"] += 1
            sums["clients"] += len(channel.get("clients") or [])
            for key in _CHANNEL_SUMS:
                sums[f"channel_{key}"] += channel.get(key) or 0
    return sums


def settled_stats(http: str | None, topics: Collection[str], timeout: float = 5.0) -> Any:
    """/stats sums once nothing is in flight any more (the last FINs may still be on their way)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = fetch_stats(http)
        if doc is None:
            return None
        sums = aggregate(doc, topics)
        if sums["channel_in_flight_count"] == 0 or time.monotonic() >= deadline:
            return sums
        time.sleep(0.1)


def verdict(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"check": name, "pass": ok, "detail": detail}


def check_pub(published: int, channels: int, stats: dict[str, int]) -> dict[str, Any]:
    held = stats["channel_depth"] + stats["channel_in_flight_count"]
    held += stats["channel_deferred_count"]
    ok = stats["topic_message_count"] == published and held == published * channels
    return verdict(
        "counts",
        ok,
        f"acked {published:,}, topics' message_count {stats['topic_message_count']:,}, "
        f"channels hold {held:,} (want {published * channels:,})",
    )


def check_drained(
    published: int, channels: int, received: int, stats: dict[str, int] | None
) -> dict[str, Any]:
    """Every published message arrived once per channel, and the broker agrees."""
    want = published * channels
    detail = f"published {published:,} x {channels} channel(s), received {received:,}"
    if stats is None:
        return verdict("counts", received == want, detail + " (no /stats)")
    leftover = sum(
        stats[f"channel_{k}"]
        for k in ("depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count")
    )
    ok = received == want and leftover == 0 and stats["topic_message_count"] == published
    return verdict(
        "counts",
        ok,
        f"{detail}; /stats: topics' message_count {stats['topic_message_count']:,}, "
        f"channels' depth {stats['channel_depth']:,}, in flight "
        f"{stats['channel_in_flight_count']:,}, requeued {stats['channel_requeue_count']:,}, "
        f"timed out {stats['channel_timeout_count']:,}",
    )


def check_unique(counters: dict[str, int], published: int) -> dict[str, Any]:
    """Latency runs: no duplicate ids or sequence numbers, every sequence number seen."""
    dups = counters.get("dup_ids", 0) + counters.get("dup_seqs", 0)
    unique = counters.get("unique_seqs", 0)
    return verdict(
        "duplicates",
        dups == 0 and unique == published,
        f"duplicate ids {counters.get('dup_ids', 0)}, duplicate seqs "
        f"{counters.get('dup_seqs', 0)}, distinct seqs {unique:,} of {published:,}",
    )


def check_memory(stats: dict[str, int], peak_rss_mib: float, size: int) -> dict[str, Any]:
    """Peak RSS <= 2 x (depth x (size + 26)) + 100 MiB."""
    depth = stats["topic_depth"] + stats["channel_depth"]
    held_mib = depth * (size + MESSAGE_OVERHEAD) / MIB
    limit = 2 * held_mib + 100
    return verdict(
        "memory",
        peak_rss_mib <= limit,
        f"peak RSS {peak_rss_mib:,.0f} MiB, depth {depth:,} = {held_mib:,.0f} MiB held, "
        f"limit {limit:,.0f} MiB",
    ) | {"peak_rss_mib": peak_rss_mib, "held_mib": round(held_mib, 1), "limit_mib": limit}

"""A micro-batch out of leases: their names, their sizes and the tasks that read them. No I/O.

A batch asks every nsqd for leases named after (query token, batch number, nsqd, index), so
that planning the same batch again after a crash asks for the same leases, which nsqd hands
back with the same messages. The batch's count and byte budget is split evenly over the nsqds
and, on each, over enough leases for ``numPartitions`` tasks, none above the nsqd's
``--max-rdy-count`` (nsqd's limit on a lease's count) nor the size one frame can carry.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from nsqpy.spark.limits import Limits
from nsqpy.spark.offsets import LeaseRef

#: At most this many leases per nsqd and batch: a budget that would need more (a count far
#: above the nsqd's --max-rdy-count) makes a smaller batch instead.
MAX_LEASES_PER_NSQD: Final = 64
#: A lease's size, at most: its LEASE_COLUMNS answer is one frame, which must stay within the
#: client's limit (64 MiB) with room for one message over the byte limit (nsqd lets a lease
#: take its first message whatever its size).
MAX_LEASE_COUNT: Final = 500_000
MAX_LEASE_BYTES: Final = 24 * 1024 * 1024
#: A task reads its share of a batch as up to this many leases, which overlap: nsqd encodes
#: the next lease while the task's Python worker turns one into Arrow and Spark writes the one
#: before. With one lease per task the three took turns and each waited for the others.
PIPELINED_LEASES: Final = 4
#: ...but a share is not cut into leases below this many messages: each lease costs commands
#: in the planner and a frame in the task, which small batches would not win back.
MIN_PIPELINED_COUNT: Final = 8_192
#: How long one waiting reserve may wait: an idle source then starts a batch within about
#: this much (plus nsqd's 100 ms queue scan) of the first message.
WAIT_STEP: Final = 0.25


@dataclass(frozen=True, slots=True)
class Ask:
    """One lease a batch asks an nsqd for."""

    nsqd: str
    name: str
    count: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class LeaseSplit:
    """What one Spark task reads: whole leases (the value of a lease InputPartition)."""

    leases: tuple[LeaseRef, ...]


def lease_name(query: str, batch: int, nsqd: str, index: int) -> str:
    """``<query>.<batch>.<nsqd hash>.<index>``: stable whatever other nsqds come and go."""
    slot = hashlib.blake2b(nsqd.encode(), digest_size=3).hexdigest()
    return f"{query}.{batch}.{slot}.{index}"


def asks(
    query: str, batch: int, caps: Mapping[str, int], limits: Limits, num_partitions: int
) -> list[Ask]:
    """The leases batch ``batch`` asks for; ``caps`` is each nsqd's largest lease count."""
    nsqds = sorted(caps)
    if not nsqds:
        return []
    counts = _spread(limits.max_count, len(nsqds))
    byte_share = math.ceil(limits.max_bytes / len(nsqds))
    tasks_each = math.ceil(num_partitions / len(nsqds))
    out: list[Ask] = []
    for nsqd, count in zip(nsqds, counts, strict=True):
        if count == 0:
            continue
        cap = max(1, min(caps[nsqd], MAX_LEASE_COUNT))
        pieces = max(1, min(PIPELINED_LEASES, count // (tasks_each * MIN_PIPELINED_COUNT)))
        needed = max(tasks_each * pieces, math.ceil(count / cap),
                     math.ceil(byte_share / MAX_LEASE_BYTES))  # fmt: skip
        leases = min(needed, count, MAX_LEASES_PER_NSQD)
        count = min(count, leases * cap)
        each_bytes = max(1, min(MAX_LEASE_BYTES, math.ceil(byte_share / leases)))
        out.extend(
            Ask(nsqd, lease_name(query, batch, nsqd, i), n, each_bytes)
            for i, n in enumerate(_spread(count, leases))
        )
    return out


def firsts(planned: Sequence[Ask]) -> list[Ask]:
    """The first lease of each nsqd: the one a waiting reserve uses (one per connection)."""
    seen: dict[str, Ask] = {}
    for ask in planned:
        seen.setdefault(ask.nsqd, ask)
    return list(seen.values())


def splits(leases: Sequence[LeaseRef], num_partitions: int) -> list[LeaseSplit]:
    """Whole leases into at most ``num_partitions`` tasks of about equal counts: each lease, the
    largest first, goes to the task that has the fewest messages so far."""
    tasks: list[list[LeaseRef]] = [[] for _ in range(max(1, num_partitions))]
    totals = [0] * len(tasks)
    for ref in sorted(leases, key=lambda r: -r.count):
        i = totals.index(min(totals))
        tasks[i].append(ref)
        totals[i] += ref.count
    return [LeaseSplit(tuple(task)) for task in tasks if task]


def _spread(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` integers that differ by at most one (the larger first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]

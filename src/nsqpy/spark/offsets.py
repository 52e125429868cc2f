"""The stream's offsets, one kind per way of reading (docs/spark.md, "Two ways to read").

Driver-side reading: ``{"v": 1, "seq": S, "tick": T}``. ``seq`` counts the messages this query
has admitted into micro-batches (it carries on from the checkpointed offset after a restart).
``tick`` changes when a batch must run although no message arrived: Spark calls
``commit(end)`` for batch N only while it plans batch N+1, so without a new offset the last
batch would never be committed and never FINished (idle topic, AvailableNow, stop).

Lease reading: ``{"v": 2, "q": Q, "batch": N, "leases": [[nsqd, name, count, bytes], ...]}``.
``q`` is the query's token (made by ``initialOffset``, then carried on from offset to offset,
so a restart from the checkpoint keeps it), ``batch`` numbers the batches planned under it and
``leases`` are batch N's leases, whose names derive from (q, N, nsqd, index): re-planning the
same batch after a crash asks nsqd for the same leases and gets the same messages.

Spark treats offsets as opaque JSON and compares them as strings. A query may change its way of
reading at a restart (``mode=auto`` decides again), so each side accepts the other's offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

VERSION: Final = 1
LEASE_VERSION: Final = 2


@dataclass(frozen=True, slots=True)
class Offset:
    seq: int = 0
    tick: int = 0

    @classmethod
    def parse(cls, raw: Any) -> Offset:
        """Read an offset from Spark (a dict decoded from the checkpoint's JSON)."""
        if not isinstance(raw, dict) or raw.get("v") != VERSION:
            raise ValueError(f"nsq source: unsupported offset {raw!r} (want v={VERSION})")
        seq, tick = raw.get("seq"), raw.get("tick", 0)
        if not isinstance(seq, int) or not isinstance(tick, int) or seq < 0 or tick < 0:
            raise ValueError(f"nsq source: malformed offset {raw!r}")
        return cls(seq, tick)

    def to_json(self) -> dict[str, int]:
        return {"v": VERSION, "seq": self.seq, "tick": self.tick}

    def advanced(self, count: int) -> Offset:
        return Offset(self.seq + count, self.tick)

    def ticked(self) -> Offset:
        return Offset(self.seq, self.tick + 1)


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """One lease of a micro-batch: where it is, its name and what it holds."""

    nsqd: str
    name: str
    count: int
    size: int  # bytes of bodies


@dataclass(frozen=True, slots=True)
class LeaseOffset:
    query: str
    batch: int = 0
    leases: tuple[LeaseRef, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> LeaseOffset:
        if not isinstance(raw, dict) or raw.get("v") != LEASE_VERSION:
            raise ValueError(f"nsq source: unsupported offset {raw!r} (want v={LEASE_VERSION})")
        query, batch, leases = raw.get("q"), raw.get("batch"), raw.get("leases")
        if (
            not isinstance(query, str)
            or not isinstance(batch, int)
            or batch < 0
            or not isinstance(leases, list)
            or not all(_is_ref(item) for item in leases)
        ):
            raise ValueError(f"nsq source: malformed offset {raw!r}")
        return cls(query, batch, tuple(LeaseRef(*item) for item in leases))

    def to_json(self) -> dict[str, Any]:
        return {
            "v": LEASE_VERSION,
            "q": self.query,
            "batch": self.batch,
            "leases": [[r.nsqd, r.name, r.count, r.size] for r in self.leases],
        }

    @property
    def count(self) -> int:
        return sum(r.count for r in self.leases)


def parse_any(raw: Any) -> Offset | LeaseOffset:
    """Either kind of offset (the version says which)."""
    if isinstance(raw, dict) and raw.get("v") == LEASE_VERSION:
        return LeaseOffset.parse(raw)
    return Offset.parse(raw)


def _is_ref(item: Any) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 4
        and isinstance(item[0], str)
        and isinstance(item[1], str)
        and all(isinstance(n, int) and n >= 0 for n in item[2:])
    )

"""The stream's offsets: ``{"v": 1, "seq": S, "tick": T}``.

``seq`` counts the messages this query has admitted into micro-batches (it carries on from the
checkpointed offset after a restart). ``tick`` changes when a batch must run although no message
arrived: Spark calls ``commit(end)`` for batch N only while it plans batch N+1, so without a new
offset the last batch would never be committed and never FINished (idle topic, AvailableNow, stop).
Spark treats offsets as opaque JSON and compares them as strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

VERSION: Final = 1


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

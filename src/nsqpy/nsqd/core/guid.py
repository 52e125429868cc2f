"""Message ids: nsqd's snowflake layout, one generator per node.

::

    id = ((ts - EPOCH) << 22) | (node_id << 12) | sequence      ts = unix ns >> 20 (~1.05 ms)

rendered as 16 lowercase hex characters. nsqd keeps one generator per topic and stalls a
topic that publishes more than 4096 messages in one tick; nsqpy keeps one per node (so ids are
unique across the whole node) and borrows the next tick instead of stalling, which keeps ids
unique and increasing while the clock catches up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nsqpy._internal.compiled import load

EPOCH: Final = 1288834974288
_SEQUENCE_MASK: Final = 0xFFF
#: The sequence is exactly the last 3 hex digits, so an id is a 13-digit prefix (fixed for a
#: tick) plus one of these: a concatenation instead of formatting every id.
_SEQUENCE_HEX: Final = tuple(b"%03x" % n for n in range(_SEQUENCE_MASK + 1))


class GuidFactory:
    """Generates unique, increasing 16-byte hex ids for one node."""

    __slots__ = ("_last_ts", "_node_bits", "_seq")

    def __init__(self, node_id: int) -> None:
        if not 0 <= node_id < 1024:
            raise ValueError("--node-id must be [0,1024)")
        self._node_bits = node_id << 12
        self._last_ts = -1
        self._seq = 0

    def new_ids(self, count: int, now_ns: int) -> list[bytes]:
        """``count`` fresh ids for messages published at wall-clock ``now_ns``."""
        ts = now_ns >> 20
        if ts > self._last_ts:
            self._last_ts = ts
            self._seq = -1
        out: list[bytes] = []
        last_ts, seq, node = self._last_ts, self._seq, self._node_bits
        while count > 0:
            if seq >= _SEQUENCE_MASK:
                last_ts += 1
                seq = -1
            take = min(count, _SEQUENCE_MASK - seq)
            _render_ids(out, (((last_ts - EPOCH) << 22) | node) >> 12, seq + 1, take)
            seq += take
            count -= take
        self._last_ts, self._seq = last_ts, seq
        return out


def py_render_ids(out: list[bytes], prefix: int, first: int, take: int) -> None:
    """Append ids ``prefix`` (13 hex digits) + sequence ``first .. first+take-1`` (3 digits)."""
    head = b"%013x" % prefix
    out.extend([head + tail for tail in _SEQUENCE_HEX[first : first + take]])


_c = load("nsqpy.nsqd.core._cdelivery")
_render_ids: Callable[[list[bytes], int, int, int], None] = (
    py_render_ids if _c is None else _c.render_ids
)

"""``LEASE_COLUMNS``' answer (an nsqpy extension): a lease's messages column by column.

One response frame (type 0) whose data is a text line, then the columns back to back::

    LEASED_COLUMNS <lease> <count> <bytes>\\n
    ids         count x 16 bytes (as on the wire: hex)
    timestamps  count x int64, little-endian, unix ns
    attempts    count x uint16, little-endian
    ends        count x int64, little-endian: where each body ends in ``bodies``
    bodies      <bytes> bytes, back to back

A reader that turns a lease into Arrow columns (the Spark source's executors) then needs no
loop per message, and nsqd writes one frame instead of ``count``. Little-endian is Arrow's
layout. The same messages as ``LEASE``'s frames, in the same order.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Final

from nsqpy.protocol.frames import Framed

HEAD: Final = b"LEASED_COLUMNS "
ID_SIZE: Final = 16
#: bytes per message before the bodies: id, timestamp, attempts, end
PER_MESSAGE: Final = ID_SIZE + 8 + 2 + 8


def encode(name: str, messages: Sequence[Framed]) -> bytes:
    """The frame's data (not yet framed) for the lease ``name`` holding ``messages``."""
    bodies = [m.body for m in messages]
    stamps = array("q", [m.timestamp for m in messages])
    attempts = array("H", [m.attempts & 0xFFFF for m in messages])
    ends = array("q", accumulate(map(len, bodies)))
    if sys.byteorder == "big":
        for column in (stamps, attempts, ends):
            column.byteswap()
    line = b"%s%s %d %d\n" % (HEAD, name.encode(), len(messages), ends[-1] if ends else 0)
    ids = b"".join([m.id for m in messages])
    return b"".join([line, ids, stamps.tobytes(), attempts.tobytes(), ends.tobytes(), *bodies])


@dataclass(frozen=True, slots=True)
class LeaseColumns:
    """A decoded answer; the columns are views of the frame's data (no copy)."""

    name: str
    count: int
    ids: memoryview
    timestamps: memoryview  # int64 LE
    attempts: memoryview  # uint16 LE
    ends: memoryview  # int64 LE
    bodies: memoryview


class ColumnsError(ValueError):
    """Not a well-formed LEASE_COLUMNS answer."""


def decode(data: bytes) -> LeaseColumns:
    newline = data.find(b"\n", 0, 256)
    parts = data[:newline].split(b" ") if newline > 0 else []
    if len(parts) != 4 or parts[0] + b" " != HEAD or not (parts[2] + parts[3]).isdigit():
        raise ColumnsError(f"not a LEASE_COLUMNS answer: {data[:80]!r}")
    count, size = int(parts[2]), int(parts[3])
    view = memoryview(data)[newline + 1 :]
    if len(view) != PER_MESSAGE * count + size:
        raise ColumnsError(f"LEASE_COLUMNS of {count} messages, {size} bytes: {len(view)} bytes")
    cuts = list(accumulate((ID_SIZE * count, 8 * count, 2 * count, 8 * count), initial=0))
    ids, stamps, attempts, ends = (view[a:b] for a, b in pairwise(cuts))
    return LeaseColumns(parts[1].decode(), count, ids, stamps, attempts, ends, view[cuts[-1] :])

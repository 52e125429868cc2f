"""A batch of disk records framed for one write: each record behind its 4-byte big-endian
length, as go-diskqueue lays them out, with where each one starts.

Durable mode pays this on every publish before its commit can start, so it is on the path a
publisher waits on: the Python version took ~40 us for an MPUB of 200 records (the size
check, the sizes, the starts and the join, each a pass over the batch), the compiled twin
(``_cframes``) does it in one pass. ``py_frame`` and ``py_bad_size`` are the reference.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from itertools import accumulate, chain
from typing import Final

from nsqpy._internal.compiled import load

_LEN: Final = struct.Struct(">i")
#: A record's length prefix.
PREFIX: Final = 4

Frame = Callable[[list[bytes], int, int, int, bool], tuple[bytes, int, "list[int] | None"]]
BadSize = Callable[[list[bytes], int, int], int]


def py_frame(
    records: list[bytes], start: int, pos: int, limit: int, want_starts: bool
) -> tuple[bytes, int, list[int] | None]:
    """Frame ``records[start:]`` for a segment whose writes stand at ``pos``: as many as fit
    under ``limit`` bytes (the first always does in an empty segment). Returns the framed
    bytes, how many records they hold and, with ``want_starts``, each one's start."""
    if start < 0:
        raise ValueError("start must not be negative")
    rest = records[start:] if start else records
    sizes = list(map(len, rest))
    count = len(sizes)
    if pos + sum(sizes) + PREFIX * count > limit:  # not all fit: find how many do
        end, count = pos, 0
        for size in sizes:
            if end > 0 and end + PREFIX + size > limit:
                break
            end += PREFIX + size
            count += 1
        rest, sizes = rest[:count], sizes[:count]
    starts = None
    if want_starts:
        starts = list(accumulate(map(PREFIX.__add__, sizes), initial=pos))
        starts.pop()  # the end of the last record
    framed = chain.from_iterable(zip(map(_LEN.pack, sizes), rest, strict=True))
    return b"".join(framed), count, starts


def py_bad_size(records: list[bytes], low: int, high: int) -> int:
    """The first record size outside ``low..high``, or -1 when every one is in it."""
    if not records:
        return -1
    sizes = list(map(len, records))
    if min(sizes) >= low and max(sizes) <= high:
        return -1
    return next(s for s in sizes if s < low or s > high)


_c = load("nsqpy.nsqd.storage._cframes")
frame: Frame = py_frame if _c is None else _c.frame
bad_size: BadSize = py_bad_size if _c is None else _c.bad_size

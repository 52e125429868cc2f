"""The tokens a durable queue has handed out and not seen finished yet.

A queue with ``track_acks`` gives every record it hands out the next token (they only grow)
and must know the oldest one not yet finished: its record is where a restart resumes. Every
durable publish adds a run of tokens (an MPUB's 200) and every run of FINs removes as many.
A Python set cost ~9.5 us per MPUB for that (an int object and a hash per token, both ways)
on the path that durable publishers wait on; the compiled twin (``_cunfinished``) keeps one
byte per token from the oldest unfinished one to the newest in a buffer of its own.

That buffer grows with the distance between the oldest unfinished token and the newest: one
byte per record the queue keeps on disk for the same reason (a record is ~230 bytes), so it
stays well under what the disk holds. ``PyUnfinished`` is the reference (a set).
"""

from __future__ import annotations

from typing import Protocol

from nsqpy._internal.compiled import load


class Unfinished(Protocol):
    def add_range(self, lo: int, hi: int) -> None: ...
    def discard(self, token: int) -> bool: ...
    def discard_many(self, tokens: list[int]) -> bool: ...
    def oldest(self) -> int: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...


class PyUnfinished:
    """Tokens ``lo..hi-1`` come in runs, each above every token added before (else
    ValueError); ``discard`` and ``discard_many`` say whether anything was removed (tokens
    never added or already gone are ignored); ``oldest`` is the smallest left (ValueError
    when none is)."""

    __slots__ = ("_end", "_tokens")

    def __init__(self) -> None:
        self._tokens: set[int] = set()
        self._end = 0  # one past the highest token added

    def add_range(self, lo: int, hi: int) -> None:
        if lo < self._end:
            raise ValueError(f"token {lo} is not above every token added ({self._end - 1})")
        if hi > lo:
            self._tokens.update(range(lo, hi))
            self._end = hi

    def discard(self, token: int) -> bool:
        tokens = self._tokens
        if token in tokens:
            tokens.remove(token)
            return True
        return False

    def discard_many(self, tokens: list[int]) -> bool:
        mine = self._tokens
        before = len(mine)
        mine.difference_update(tokens)
        return len(mine) != before

    def oldest(self) -> int:
        if not self._tokens:
            raise ValueError("no unfinished token")
        return min(self._tokens)

    def clear(self) -> None:
        """Forget every token (the queue skipped or emptied); later runs still go above."""
        self._tokens.clear()

    def __len__(self) -> int:
        return len(self._tokens)


_c = load("nsqpy.nsqd.storage._cunfinished")
#: The class a queue uses: compiled unless ``NSQPY_PURE_PYTHON=1`` or it was not built.
unfinished_tokens: type[Unfinished] = PyUnfinished if _c is None else _c.Unfinished

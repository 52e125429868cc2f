"""Durable mode's commit linger: which publishers a group commit waits a moment for.

An NSQ publisher sends a PUB or MPUB and waits for its reply before it sends the next one
(``bench_writer``, pynsq's and go-nsq's producers). In durable mode that reply waits for an
fdatasync, so each publisher has one publish in flight, and two or more publishers
interleave: each one's publish arrives while the other's commit is out and starts a commit of
its own. Every publish then pays a whole fdatasync, about 60 us of the machine's CPU in the
kernel on the 2-core VM, besides the wait.

A publisher that was just answered is due back in a few hundred microseconds. So a commit that
could start while such a publisher has not yet sent again waits for it, up to ``linger``
seconds: the round starts as soon as every publisher answered within the last ``window``
seconds has been heard from, or when the linger runs out. One fdatasync then covers both
publishes. Under NSQ's ``bench_writer`` and ``bench_reader`` that was +5 to +9 % durable
PUB+SUB with two publishers and +8 to +14 % with eight (docs/performance.md, "Issue 21,
eighteenth pass"). A lone publisher is never waited for: nobody else is due back.

The messages themselves are written and handed to consumers at once; only the commit, and so
the publisher's reply, waits. Times are the loop's clock, passed in.
"""

from __future__ import annotations

from typing import Final

#: A publisher answered longer ago than this (s) is not waited for: it went quiet.
EXPECT_WINDOW: Final = 0.002


class CommitLinger:
    """Publishers answered recently and not heard from since, keyed by client id."""

    __slots__ = ("_answered", "linger", "window")

    def __init__(self, linger: float, window: float = EXPECT_WINDOW) -> None:
        #: The longest a commit waits (s); 0 turns lingering off.
        self.linger = linger
        self.window = window
        self._answered: dict[int, float] = {}  # oldest first

    def answered(self, key: int, now: float) -> None:
        """Publisher ``key`` got its reply at ``now``: it may publish again soon."""
        if self.linger > 0:
            self._answered.pop(key, None)  # to the end: the dict stays oldest first
            self._answered[key] = now

    def heard(self, key: int) -> None:
        """Publisher ``key`` sent something (or went away): no longer waited for."""
        self._answered.pop(key, None)

    def expected(self, now: float) -> bool:
        """Whether a publisher answered within the window has not sent since (those answered
        earlier are forgotten)."""
        answered = self._answered
        while answered:
            key = next(iter(answered))
            if now - answered[key] < self.window:
                return True
            del answered[key]
        return False

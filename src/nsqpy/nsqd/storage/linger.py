"""Durable mode's commit linger: which publishers a group commit waits a moment for.

An NSQ publisher sends a PUB or MPUB and waits for its reply before it sends the next one
(``bench_writer``, pynsq's and go-nsq's producers). In durable mode that reply waits for an
fdatasync, so each publisher has one publish in flight, and two or more publishers
interleave: each one's publish arrives while the other's commit is out and starts a commit of
its own. Every publish then pays a whole fdatasync, about 60 us of the machine's CPU in the
kernel on the 2-core VM, besides the wait.

A publisher that was just answered and usually comes back quickly is due back soon. So a
commit that could start while such a publisher has not sent again waits for it, up to
``linger`` seconds: the round starts once no publisher is due any more (each one's next
command came, or its time passed) or when the linger runs out. One fdatasync then covers both
publishes. Under NSQ's ``bench_writer`` and ``bench_reader`` that was +5 to +8 % durable
PUB+SUB with two publishers and +16 % with eight (docs/performance.md, "Issue 21, eighteenth
pass").

Who is due: a publisher's turnaround (from its reply to its next command, averaged) is
measured on every publish. One whose turnaround is over ``WINDOW``, such as a producer that
publishes at a set pace, is never waited for: it is not coming back within a linger, and
waiting would only add to its neighbours' replies. Nor is a publisher before its turnaround is
known, so a lone one never waits. One that is due stops being due ``WINDOW`` after its reply:
it went quiet.

The messages themselves are written and handed to consumers at once; only the commit, and so
the publisher's reply, waits. Times are the loop's clock, passed in.
"""

from __future__ import annotations

from typing import Final

#: How much a new turnaround moves a publisher's average (an exponential moving average).
TURNAROUND_WEIGHT: Final = 0.25
#: Waited for only if its turnaround averages at most this (s), and for this long after a reply.
WINDOW: Final = 0.002


class CommitLinger:
    """Publishers' turnarounds, and which ones are due back now, keyed by client id."""

    __slots__ = ("_due", "_since", "_turnaround", "linger")

    def __init__(self, linger: float) -> None:
        #: The longest a commit waits (s); 0 turns lingering off.
        self.linger = linger
        self._since: dict[int, float] = {}  # answered and not heard from since: when
        self._turnaround: dict[int, float] = {}  # reply to next command, averaged (s)
        self._due: dict[int, float] = {}  # worth waiting for, until when; oldest first

    def answered(self, key: int, now: float) -> None:
        """Publisher ``key`` got its reply at ``now``."""
        if self.linger <= 0:
            return
        self._since[key] = now
        turnaround = self._turnaround.get(key)
        if turnaround is not None and turnaround <= WINDOW:
            self._due.pop(key, None)  # to the end: the dict stays oldest first
            self._due[key] = now + WINDOW

    def heard(self, key: int, now: float) -> None:
        """Publisher ``key`` sent its next command at ``now``: no longer due."""
        at = self._since.pop(key, None)
        if at is None:
            return
        self._due.pop(key, None)
        gap = now - at
        old = self._turnaround.get(key)
        self._turnaround[key] = gap if old is None else old + (gap - old) * TURNAROUND_WEIGHT

    def gone(self, key: int) -> None:
        """Publisher ``key`` disconnected."""
        self._since.pop(key, None)
        self._turnaround.pop(key, None)
        self._due.pop(key, None)

    def expected(self, now: float) -> bool:
        """Whether a publisher is due back (those whose time passed are dropped)."""
        due = self._due
        while due:
            key = next(iter(due))
            if now < due[key]:
                return True
            del due[key]
        return False

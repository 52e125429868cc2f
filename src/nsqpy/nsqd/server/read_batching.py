"""Fewer, larger reads from a consumer that answers fast: the socket's ``SO_RCVLOWAT``.

A consumer at full speed sends a FIN per message, often in a write of its own (NSQ's
``bench_reader`` flushes after every FIN for the last quarter of each RDY window). Each of
those small segments woke the loop for a read of a few commands, and each read drew an ACK
that the consumer's kernel then had to take in: both ends paid per segment, and on two
cores that was 15-20 % of PUB+SUB (docs/performance.md, "eighth pass").

While a subscribed connection sends at least ``BUSY`` bytes per tick, its receive low-water
mark is raised to about half of what it sent in the last tick (a power of two), so the
kernel wakes the loop a couple of times per tick instead of once per segment. As soon as a
tick finds it slower, the mark goes back to 1, which makes whatever is waiting readable at
once (Linux re-checks readability when the mark is set). So a command waits at most about
two ticks, and only on a connection that has just sent a tick's worth. The mark is never more
than a sixteenth of the consumer's window in FIN lines (``WINDOW_SHARE``), nor ``MAX_LOWAT``.
A consumer that has answered everything it holds and waits for more, its last FINs under the
mark, waits for a tick; with a small window that happens often, so windows under 64 get no
mark at all.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

#: How often a busy connection's pace is looked at (s); bounds a command's extra wait.
TICK: Final = 0.001
#: After this many slow ticks in a row a connection is no longer watched...
SLOW_TICKS: Final = 8
#: ...for this long (s), so a steady trickle of commands does not keep the tick running.
REST: Final = 0.1
#: The highest mark (bytes): 195 FINs, what NSQ's bench_reader flushes at once while it
#: buffers. 512 bytes measured ~5 % lower, in both modes.
MAX_LOWAT: Final = 4096
#: The least a connection sends per tick (bytes) to get a mark: ~24,000 FINs a second.
BUSY: Final = 512
#: ``FIN <16-byte id>\n``
FIN_LINE: Final = 21
#: Below this many FIN lines a mark saves too little to be worth its syscalls.
MIN_LINES: Final = 4
#: The most of a consumer's window a mark may hold, as 1/n. A quarter cost our 100-topic
#: SUB (RDY 50 per connection) ~7 %: its consumers ran dry waiting for a tick.
WINDOW_SHARE: Final = 16


def lowat_for(rdy: int) -> int:
    """The highest mark for a consumer whose RDY count is ``rdy``; 0 means never raise it."""
    lines = rdy // WINDOW_SHARE
    if lines < MIN_LINES:
        return 0
    return min(MAX_LOWAT, lines * FIN_LINE)


def mark_for(sent: int, highest: int) -> int:
    """The mark for a connection that sent ``sent`` bytes in the last tick, under its
    ``highest`` (``lowat_for``); 0 when it is not busy enough for one."""
    if not highest or sent < BUSY:
        return 0
    half = sent // 2
    return min(highest, 1 << (half.bit_length() - 1))  # a power of two: fewer changes


class Batched(Protocol):
    """What the batcher sees of a connection (``V2Connection`` keeps these fields)."""

    #: bytes read so far, counted while ``lowat_want`` is set
    rx_bytes: int
    #: the mark the socket has now (1 is the kernel's default)
    lowat: int
    #: the highest mark it may get (``lowat_for``); 0 for never
    lowat_want: int
    #: whether the batcher is watching it
    batched: bool
    #: loop time before which it is not watched again
    rest_until: float

    def set_lowat(self, mark: int) -> None: ...


class ReadBatcher:
    """Raises and lowers the marks of the connections it watches, one tick at a time."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, tick: float = TICK, rest: float = REST
    ) -> None:
        self._loop = loop
        self._tick = tick
        self._rest = rest
        #: watched connection -> (its ``rx_bytes`` at the last tick, slow ticks in a row)
        self._watched: dict[Batched, tuple[int, int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, conn: Batched) -> None:
        """Start looking at ``conn``'s pace (its mark is raised at the next tick if busy)."""
        if self._closed:  # the daemon is stopping: no timer that would outlive it
            return
        conn.batched = True
        self._watched[conn] = (conn.rx_bytes, 0)
        if self._timer is None:
            self._timer = self._loop.call_later(self._tick, self._on_tick)

    def forget(self, conn: Batched) -> None:
        """``conn`` is gone: stop watching it."""
        self._watched.pop(conn, None)
        conn.batched = False

    def tick(self, now: float) -> None:
        """Set the mark of each connection that was busy since the last tick (``mark_for``).
        Lower the others' to 1 at once (what waits under the mark is read now), and stop
        watching one that has been slow for ``SLOW_TICKS`` ticks."""
        watched = self._watched
        for conn, (seen, slow) in list(watched.items()):
            received = conn.rx_bytes
            mark = mark_for(received - seen, conn.lowat_want)
            if mark:
                watched[conn] = (received, 0)
                if conn.lowat != mark:
                    conn.set_lowat(mark)
                continue
            # A pause of a tick (the peer descheduled, say) lowers the mark but keeps the
            # watch: the next busy tick raises it again.
            if conn.lowat != 1:
                conn.set_lowat(1)
            if slow + 1 < SLOW_TICKS:
                watched[conn] = (received, slow + 1)
                continue
            del watched[conn]
            conn.batched = False
            conn.rest_until = now + self._rest

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_tick(self) -> None:
        self._timer = None
        self.tick(self._loop.time())
        if self._watched:
            self._timer = self._loop.call_later(self._tick, self._on_tick)

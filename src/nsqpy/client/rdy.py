"""Pure RDY planning: how a consumer's max_in_flight is spread over its connections.

With at least as many in-flight slots as connections, each connection gets an equal share
(the remainder to the first ones), so the total is exactly max_in_flight. With more connections
than slots (NSQ's "low RDY" case, go-nsq #179/#277) only max_in_flight connections can hold
RDY 1 at a time: a connection that has had no message for ``idle_timeout`` gives its slot up,
and free slots go to randomly chosen waiting connections, so that over successive plans every
nsqd gets its turn and none is starved forever.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConnView:
    """What the planner needs to know about one connection."""

    rdy: int
    last_message_at: float
    last_rdy_at: float


def plan(
    max_in_flight: int,
    conns: Sequence[ConnView],
    now: float,
    idle_timeout: float,
    rng: random.Random,
) -> list[int]:
    """The RDY each connection should have, in the order given."""
    n = len(conns)
    if n == 0:
        return []
    if max_in_flight >= n:
        share, extra = divmod(max_in_flight, n)
        return [share + (1 if i < extra else 0) for i in range(n)]
    return _plan_low(max_in_flight, conns, now, idle_timeout, rng)


def _plan_low(
    slots: int, conns: Sequence[ConnView], now: float, idle_timeout: float, rng: random.Random
) -> list[int]:
    out = [0] * len(conns)
    kept = 0
    for i, c in enumerate(conns):
        busy_since = max(c.last_message_at, c.last_rdy_at)
        if c.rdy > 0 and now - busy_since < idle_timeout and kept < slots:
            out[i] = 1
            kept += 1
    waiting = [i for i, c in enumerate(conns) if out[i] == 0 and c.rdy == 0]
    released = [i for i, c in enumerate(conns) if out[i] == 0 and c.rdy > 0]
    rng.shuffle(waiting)
    # waiting connections first: a released one just had its turn
    for i in (waiting + released)[: slots - kept]:
        out[i] = 1
    return out


def is_starved(conns: Sequence[tuple[int, int]]) -> bool:
    """go-nsq's IsStarved: some connection has in-flight messages at >= 85% of its RDY.

    ``conns`` holds (in_flight, rdy) pairs.
    """
    return any(in_flight > 0 and in_flight >= int(rdy * 0.85) for in_flight, rdy in conns)

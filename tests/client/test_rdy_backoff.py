"""Pure RDY planning and backoff policy (no loop, no sockets; times are plain numbers)."""

from __future__ import annotations

import random

from nsqpy.client.backoff import Backoff, ReconnectPolicy, Step
from nsqpy.client.rdy import ConnView, is_starved, plan


def view(rdy: int = 0, last_message_at: float = 0.0, last_rdy_at: float = 0.0) -> ConnView:
    return ConnView(rdy, last_message_at, last_rdy_at)


def test_even_split_adds_up_to_max_in_flight() -> None:
    rng = random.Random(1)
    assert plan(10, [view()] * 3, 0, 10, rng) == [4, 3, 3]
    assert plan(2500, [view()], 0, 10, rng) == [2500]
    assert plan(5, [], 0, 10, rng) == []


def test_low_rdy_keeps_busy_connections_and_gives_the_rest_away() -> None:
    rng = random.Random(1)
    now = 100.0
    conns = [view(1, last_message_at=99.0), view(0), view(0), view(1, last_message_at=50.0)]
    out = plan(2, conns, now, 10.0, rng)
    assert sum(out) == 2
    assert out[0] == 1  # busy: keeps its slot
    assert out[3] == 0  # idle for 50 s: gives it up
    assert out[1] + out[2] == 1  # one waiting connection gets the freed slot


def test_low_rdy_rotation_reaches_every_connection() -> None:
    rng = random.Random(7)
    conns = [view() for _ in range(5)]
    served: set[int] = set()
    now = 0.0
    for _ in range(50):
        out = plan(1, conns, now, 1.0, rng)
        assert sum(out) == 1
        served |= {i for i, r in enumerate(out) if r}
        conns = [view(r, last_rdy_at=now if r and not c.rdy else c.last_rdy_at)
                 for r, c in zip(out, conns, strict=True)]
        now += 2.0  # every holder goes idle before the next plan
    assert served == set(range(5))


def test_is_starved() -> None:
    assert is_starved([(85, 100)])
    assert not is_starved([(84, 100), (0, 0)])
    assert not is_starved([(0, 1)])


def test_backoff_escalates_caps_and_recovers() -> None:
    b = Backoff(multiplier=1.0, max_duration=4.0)
    assert b.record(True) is Step.NOTHING
    assert b.record(False) is Step.PAUSE and b.delay == 2.0
    assert b.record(False) is Step.NOTHING  # ignored while paused
    b.pause_over()
    assert b.record(False) is Step.PAUSE and b.delay == 4.0
    b.pause_over()
    assert b.record(False) is Step.PAUSE and b.delay == 4.0 and b.counter == 2  # capped
    b.pause_over()
    assert b.record(True) is Step.PAUSE and b.counter == 1
    b.pause_over()
    assert b.record(True) is Step.RESUME and b.counter == 0


def test_failures_without_backoff_do_not_count() -> None:
    b = Backoff()
    assert b.record(False, backoff=False) is Step.NOTHING
    assert b.counter == 0


def test_reconnect_policy_grows_with_jitter_and_resets() -> None:
    p = ReconnectPolicy(base=0.1, cap=1.0, rng=random.Random(3))
    delays = [p.failure() for _ in range(8)]
    assert all(0 < d <= 1.0 for d in delays)
    assert delays[-1] >= 0.5  # at the cap, jitter only takes half away
    p.success()
    assert p.failure() <= 0.2

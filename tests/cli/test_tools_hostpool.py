"""Destination choice for ``--mode`` (nsqpy.tools.hostpool), on a hand-moved clock."""

from __future__ import annotations

from nsqpy.tools.hostpool import INITIAL_RETRY_DELAY, HostPool, RoundRobin
from nsqpy.tools.relay import selector_for_mode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_round_robin_starts_at_the_second_address() -> None:
    rr = RoundRobin(["a", "b", "c"])
    assert [rr.get() for _ in range(4)] == ["b", "c", "a", "b"]
    rr.mark("b", ok=False)  # outcomes do not matter
    assert rr.get() == "c"


def test_hostpool_cycles_and_skips_dead_hosts_until_their_retry() -> None:
    clock = Clock()
    pool = HostPool(["a", "b", "c"], clock)
    assert [pool.get() for _ in range(3)] == ["a", "b", "c"]
    pool.mark("b", ok=False)
    assert [pool.get() for _ in range(4)] == ["a", "c", "a", "c"]
    clock.now += INITIAL_RETRY_DELAY + 1
    assert [pool.get() for _ in range(3)] == ["a", "b", "c"]  # b is retried once...
    assert [pool.get() for _ in range(2)] == ["a", "c"]  # ...then waits twice as long
    pool.mark("b", ok=True)
    assert [pool.get() for _ in range(3)] == ["a", "b", "c"]


def test_hostpool_revives_everyone_when_all_are_dead() -> None:
    pool = HostPool(["a", "b"], Clock())
    pool.mark("a", ok=False)
    pool.mark("b", ok=False)
    # go-hostpool returns the first host and restarts its cycle there: "a" comes twice
    assert [pool.get() for _ in range(3)] == ["a", "a", "b"]


def test_modes() -> None:
    assert isinstance(selector_for_mode("round-robin", ["a"]), RoundRobin)
    assert isinstance(selector_for_mode("nonsense", ["a"]), RoundRobin)  # NSQ's fall-through
    assert type(selector_for_mode("hostpool", ["a"])) is HostPool
    assert isinstance(selector_for_mode("epsilon-greedy", ["a"]), HostPool)

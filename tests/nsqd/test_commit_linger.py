"""CommitLinger: which publishers a durable group commit waits for (``storage.linger``)."""

from __future__ import annotations

import pytest

from nsqpy.nsqd.storage.linger import WINDOW, CommitLinger


def cycle(linger: CommitLinger, key: int, answered: float, turnaround: float) -> None:
    """One publish's reply at ``answered`` and the next command ``turnaround`` later."""
    linger.answered(key, answered)
    linger.heard(key, answered + turnaround)


def test_nobody_answered_nobody_expected() -> None:
    assert not CommitLinger(0.001).expected(5.0)


def test_a_publisher_is_not_due_before_its_turnaround_is_known() -> None:
    linger = CommitLinger(0.001)
    linger.answered(7, 10.0)  # its first reply: how soon it comes back is not known yet
    assert not linger.expected(10.0)


def test_a_quick_publisher_is_due_for_the_window_then_dropped() -> None:
    linger = CommitLinger(0.001)
    cycle(linger, 7, 0.0, 0.0004)
    linger.answered(7, 10.0)
    until = 10.0 + WINDOW
    assert linger.expected(10.0)
    assert linger.expected(until - 1e-6)
    assert not linger.expected(until)
    assert not linger.expected(10.0)  # dropped, not merely past its time


def test_a_publisher_heard_from_is_no_longer_due() -> None:
    linger = CommitLinger(0.001)
    for key in (1, 2):
        cycle(linger, key, 0.0, 0.0003)
        linger.answered(key, 1.0)
    linger.heard(1, 1.0001)
    assert linger.expected(1.0001)  # 2 still due
    linger.heard(2, 1.0002)
    assert not linger.expected(1.0002)
    linger.heard(3, 1.0)  # never answered: nothing to do, no error


def test_a_slow_publisher_is_never_waited_for() -> None:
    """A paced producer: a linger could not cover it, and would delay everyone else."""
    linger = CommitLinger(0.0006)
    cycle(linger, 1, 0.0, WINDOW * 1.5)
    linger.answered(1, 1.0)
    assert not linger.expected(1.0)


def test_the_turnaround_is_an_average() -> None:
    linger = CommitLinger(0.001)
    cycle(linger, 1, 0.0, 0.0004)
    cycle(linger, 1, 1.0, 0.005)  # one slow turn: 0.4 + 4.6 / 4 = 1.55 ms, still quick
    linger.answered(1, 2.0)
    assert linger.expected(2.0)
    linger.heard(1, 2.01)  # another, slower: 1.55 + 8.45 / 4 = 3.66 ms
    linger.answered(1, 3.0)
    assert not linger.expected(3.0)
    for start in (4.0, 5.0, 6.0):
        cycle(linger, 1, start, 0.0004)  # quick again: 2.85, 2.23, then 1.78 ms
    linger.answered(1, 7.0)
    assert linger.expected(7.0)


def test_a_publisher_gone_is_forgotten() -> None:
    linger = CommitLinger(0.001)
    cycle(linger, 1, 0.0, 0.0003)
    linger.answered(1, 1.0)
    linger.gone(1)
    assert not linger.expected(1.0)
    linger.answered(1, 2.0)  # a new connection would have a new id; even so: unknown again
    assert not linger.expected(2.0)


@pytest.mark.parametrize("turnaround", [0.0001, 0.0005])
def test_no_linger_tracks_nobody(turnaround: float) -> None:
    linger = CommitLinger(0.0)
    cycle(linger, 1, 0.0, turnaround)
    linger.answered(1, 1.0)
    assert not linger.expected(1.0)

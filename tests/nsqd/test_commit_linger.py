"""CommitLinger: which publishers a durable group commit waits for (``storage.linger``)."""

from __future__ import annotations

from nsqpy.nsqd.storage.linger import EXPECT_WINDOW, CommitLinger


def test_nobody_answered_nobody_expected() -> None:
    assert not CommitLinger(0.001).expected(5.0)


def test_a_publisher_answered_is_expected_for_the_window_then_forgotten() -> None:
    linger = CommitLinger(0.001)
    linger.answered(7, 10.0)
    assert linger.expected(10.0)
    assert linger.expected(10.0 + EXPECT_WINDOW * 0.99)
    assert not linger.expected(10.0 + EXPECT_WINDOW)
    assert not linger.expected(10.0)  # forgotten, not merely out of the window


def test_a_publisher_heard_from_is_no_longer_expected() -> None:
    linger = CommitLinger(0.001)
    linger.answered(1, 0.0)
    linger.answered(2, 0.0)
    linger.heard(1)
    assert linger.expected(0.0)  # 2 still due
    linger.heard(2)
    assert not linger.expected(0.0)
    linger.heard(3)  # never answered: nothing to forget, no error


def test_a_stale_publisher_does_not_hide_a_fresh_one() -> None:
    linger = CommitLinger(0.001, window=1.0)
    linger.answered(1, 0.0)
    linger.answered(2, 0.5)
    linger.answered(1, 0.9)  # answered again: now the newest
    assert linger.expected(1.6)  # 2 is stale by then, 1 is not
    linger.heard(1)
    assert not linger.expected(1.6)


def test_no_linger_tracks_nobody() -> None:
    linger = CommitLinger(0.0)
    linger.answered(1, 0.0)
    assert not linger.expected(0.0)

"""to_nsq's record splitting and pacing (nsqpy.tools.records), with a hand-moved clock."""

from __future__ import annotations

import pytest

from nsqpy.tools.records import RateLimiter, RecordSplitter


def split(delimiter: bytes, *chunks: bytes) -> list[bytes]:
    splitter = RecordSplitter(delimiter)
    records = [r for chunk in chunks for r in splitter.feed(chunk)]
    return records + splitter.finish()


def test_lines_with_empty_ones_skipped() -> None:
    assert split(b"\n", b"one\ntwo\n\n\nthree\n") == [b"one", b"two", b"three"]


def test_last_record_without_delimiter_is_kept_whole() -> None:
    assert split(b"\n", b"one\ntwo") == [b"one", b"two"]
    assert split(b"\n", b"") == []
    assert split(b"\n", b"\n\n") == []


def test_records_span_chunks() -> None:
    assert split(b",", b"ab", b"c,d", b"", b"e,,", b"f") == [b"abc", b"de", b"f"]


def test_binary_delimiter_and_bodies() -> None:
    assert split(b"\x00", b"\xff\n\x00a b\x00") == [b"\xff\n", b"a b"]


@pytest.mark.parametrize("delimiter", [b"", b"ab"])
def test_delimiter_must_be_one_byte(delimiter: bytes) -> None:
    with pytest.raises(ValueError, match="single byte"):
        RecordSplitter(delimiter)


def test_rate_limiter_first_send_is_free_then_one_per_interval() -> None:
    limiter = RateLimiter(10, now=100.0)
    assert limiter.reserve(100.0) == 0.0
    waits = [limiter.reserve(100.0) for _ in range(3)]
    assert waits == pytest.approx([0.1, 0.2, 0.3])


def test_rate_limiter_refills_over_time_capped_at_one_second() -> None:
    limiter = RateLimiter(5, now=0.0)
    assert limiter.reserve(0.0) == 0.0
    # after a long idle spell, at most `rate` sends go out without waiting
    waits = [limiter.reserve(60.0) for _ in range(6)]
    assert waits[:5] == [0.0] * 5
    assert waits[5] == pytest.approx(0.2)


def test_rate_limiter_keeps_the_average_rate() -> None:
    limiter, now = RateLimiter(50, now=0.0), 0.0
    for _ in range(500):
        now += limiter.reserve(now)  # send as soon as allowed
    assert now == pytest.approx(499 / 50)


def test_rate_limiter_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError):
        RateLimiter(0, now=0.0)

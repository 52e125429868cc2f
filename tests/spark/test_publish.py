"""MPUB framing limits of the sink, and a task's publisher against a real nsqd (no Spark)."""

from __future__ import annotations

import pytest

from nsqpy.spark.options import parse_write_options
from nsqpy.spark.publish import Publisher, SinkUnavailableError, chunks

from .conftest import NsqdFactory, consume


def frame_size(bodies: list[bytes]) -> int:
    return 4 + sum(4 + len(b) for b in bodies)


def test_chunks_respect_count_and_bytes() -> None:
    bodies = [bytes(10)] * 25
    by_count = list(chunks(bodies, 10, 1 << 20))
    assert [len(c) for c in by_count] == [10, 10, 5]
    by_bytes = list(chunks(bodies, 100, 4 + 14 * 4))  # room for exactly 4 messages
    assert [len(c) for c in by_bytes] == [4] * 6 + [1]
    assert all(frame_size(list(c)) <= 60 for c in by_bytes)
    assert [b for c in by_bytes for b in c] == bodies


def test_a_body_bigger_than_the_frame_limit_goes_alone() -> None:
    bodies = [b"a", bytes(1000), b"b"]
    assert [list(c) for c in chunks(bodies, 10, 100)] == [[b"a"], [bytes(1000)], [b"b"]]
    assert list(chunks([], 10, 100)) == []


def test_publisher_mpub_and_dpub(nsqd_proc: NsqdFactory) -> None:
    nsqd = nsqd_proc()
    nsqd.create_channel("p", "check")
    pub = Publisher(parse_write_options({"nsqd": nsqd.tcp_address, "mpubBatch": "3"}))
    try:
        pub.publish("p", [b"1", b"2", b"3", b"4", b"5"], [0, 0, 60_000, 0, -1])
    finally:
        pub.close()
    assert pub.counts.published == {"p": 5} and pub.counts.deferred == 1
    assert sorted(consume(nsqd.tcp_address, "p", "check", 4)) == [b"1", b"2", b"4", b"5"]
    assert nsqd.channel("p", "check")["deferred_count"] == 1


def test_unreachable_nsqd() -> None:
    expected = r"cannot connect to any nsqd of \['127.0.0.1:1'\]"
    with pytest.raises(SinkUnavailableError, match=expected):
        Publisher(parse_write_options({"nsqd": "127.0.0.1:1"}))

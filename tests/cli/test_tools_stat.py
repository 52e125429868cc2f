"""nsq_stat's aggregation and report text (nsqpy.tools.stat), without any daemon."""

from __future__ import annotations

import re

import pytest

from nsqpy.tools.stat import (
    HEADER,
    ChannelTotals,
    StatReport,
    aggregate_channel,
    channel_totals,
    format_row,
    rates,
)

ROW = re.compile(r"^ {0,6}-?\d+ {1,7}-?\d+ \| +\d+ +\d+ +\d+ +\d+ +\d+ \| +\d+ +\d+ +\d+ +\d+$")


def node(topic: str, channel: str, **counts: int) -> dict[str, object]:
    return {"topics": [{"topic_name": topic, "channels": [{"channel_name": channel, **counts}]}]}


def test_header_is_nsqs_two_lines() -> None:
    assert HEADER.splitlines() == [
        "------rate------+----------------depth----------------+"
        "--------------metadata---------------",
        "ingress  egress |   total     mem    disk inflt   def |"
        "     req     t-o         msgs clients",
    ]


def test_channel_totals_derive_memory_depth() -> None:
    totals = channel_totals({"depth": 10, "backend_depth": 3, "client_count": 2})
    assert (totals.depth, totals.memory_depth, totals.backend_depth) == (10, 7, 3)
    assert totals.client_count == 2


def test_aggregate_sums_the_channel_over_nodes_and_ignores_others() -> None:
    docs = [
        node("t", "c", depth=5, backend_depth=1, message_count=100, in_flight_count=2,
             deferred_count=1, requeue_count=4, timeout_count=3, client_count=1),
        node("t", "c", depth=7, backend_depth=0, message_count=50, client_count=2),
        node("t", "other", depth=1000, message_count=1000),
        node("u", "c", depth=1000, message_count=1000),
        {"topics": None},
    ]  # fmt: skip
    total = aggregate_channel(docs, "t", "c")
    assert total == ChannelTotals(
        depth=12, memory_depth=11, backend_depth=1, in_flight_count=2, deferred_count=1,
        requeue_count=4, timeout_count=3, message_count=150, client_count=3,
    )  # fmt: skip


def test_aggregate_without_the_channel_is_none() -> None:
    assert aggregate_channel([node("t", "x", depth=1)], "t", "c") is None
    assert aggregate_channel([], "t", "c") is None


def test_rates_are_deltas_per_second_truncated_toward_zero() -> None:
    before = ChannelTotals(depth=10, message_count=100)
    after = ChannelTotals(depth=15, message_count=125)
    # 25 new messages in 2 s; depth grew 5, so 20 went out
    assert rates(before, after, 2.0) == (12, 10)
    # depth falling faster than messages arrive: egress exceeds ingress
    assert rates(after, ChannelTotals(depth=0, message_count=130), 2.0) == (2, 10)
    # a node leaving makes counts fall: Go truncates the negative rate toward zero
    assert rates(after, ChannelTotals(depth=15, message_count=122), 2.0) == (-1, -1)


def test_row_format_matches_nsq_widths() -> None:
    before = ChannelTotals(message_count=0)
    current = ChannelTotals(
        depth=1234567, memory_depth=1234000, backend_depth=567, in_flight_count=12345,
        deferred_count=7, requeue_count=3, timeout_count=2, message_count=123456789012,
        client_count=4,
    )  # fmt: skip
    row = format_row(before, current, 1.0)
    assert row == (
        "123456789012 123455554445 | 1234567 1234000     567 12345     7 |"
        "       3       2 123456789012       4\n"
    )
    small = format_row(ChannelTotals(), ChannelTotals(depth=1, message_count=3), 1.0)
    assert small == (
        "      3       2 |       1       0       0     0     0 |"
        "       0       0            3       0\n"
    )
    assert ROW.match(small.rstrip("\n"))


def test_report_prints_a_header_before_every_25th_poll() -> None:
    report = StatReport(1.0)
    texts = [report.add(ChannelTotals(message_count=i)) for i in range(52)]
    assert texts[0] == HEADER  # the first poll is only the baseline
    headed = [i for i, text in enumerate(texts) if text.startswith("------rate")]
    assert headed == [0, 25, 50]
    rows = [line for text in texts for line in text.splitlines() if ROW.match(line)]
    assert len(rows) == 51
    assert texts[25] == HEADER + format_row(
        ChannelTotals(message_count=24), ChannelTotals(message_count=25), 1.0
    )


@pytest.mark.parametrize("interval", [0.5, 2.0])
def test_report_rates_use_the_interval(interval: float) -> None:
    report = StatReport(interval)
    report.add(ChannelTotals(message_count=0))
    row = report.add(ChannelTotals(message_count=10, depth=10))
    ingress, egress = (int(v) for v in row.split()[:2])
    assert (ingress, egress) == (int(10 / interval), 0)

"""The lease planner's connections (LeaseLinks) on real nsqd processes, without Spark."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsqpy.spark.ingest import SourceUnavailableError
from nsqpy.spark.lease_core import ClosedName
from nsqpy.spark.lease_links import LeaseLinks, LeasesUnsupportedError
from nsqpy.spark.lease_plan import Ask
from nsqpy.spark.offsets import LeaseRef
from nsqpy.spark.options import parse_read_options

from .conftest import NsqdFactory, numbered, publish, read_options
from .daemons import GO_NSQD, GoNsqd, Nsqd


@pytest.fixture
def links() -> Iterator[list[LeaseLinks]]:
    made: list[LeaseLinks] = []
    yield made
    for one in made:
        one.close()


def open_links(made: list[LeaseLinks], nsqd: Nsqd | str, topic: str, **extra: object) -> LeaseLinks:
    address = nsqd if isinstance(nsqd, str) else nsqd.tcp_address
    options = read_options(nsqd, topic, **extra) if isinstance(nsqd, Nsqd) else {
        "nsqd": address, "topic": topic, "channel": "spark"}  # fmt: skip
    one = LeaseLinks(parse_read_options(options))
    made.append(one)
    one.start()
    return one


def test_reserve_finish_and_what_nsqd_sees(nsqd_proc: NsqdFactory, links: list[LeaseLinks]) -> None:
    nsqd = nsqd_proc("--max-rdy-count=300")
    publish(nsqd.tcp_address, "ll", numbered(500))
    planner = open_links(links, nsqd, "ll")
    assert planner.caps() == {nsqd.tcp_address: 300}
    assert nsqd.channel("ll", "spark")["client_count"] == 1  # subscribed, RDY 0

    asks = [Ask(nsqd.tcp_address, f"q.1.n.{i}", 200, 1 << 20) for i in range(3)]
    got = planner.reserve(asks, wait=0.0, ttl=60.0, before_ns=0)
    assert [r.count for r in got] == [200, 200, 100]
    # asked again with another size (a crashed plan's other limits): taken as it is
    again = planner.reserve([Ask(nsqd.tcp_address, "q.1.n.0", 50, 7)], wait=0.0, ttl=60.0,
                            before_ns=0)  # fmt: skip
    assert again == [got[0]]
    stats = nsqd.channel("ll", "spark")
    assert (stats["depth"], stats["in_flight_count"], stats["lease_count"]) == (0, 500, 3)

    done = planner.finish([*got, LeaseRef(nsqd.tcp_address, "never", 9, 9)])
    assert done.done == 3 and [r.name for r in done.gone] == ["never"] and done.failed == []
    assert planner.finish(got[:1]).done == 1  # a repeat is fine
    assert nsqd.channel("ll", "spark")["in_flight_count"] == 0
    with pytest.raises(ClosedName):  # a finished name cannot be planned again
        planner.reserve(asks[:1], wait=0.0, ttl=60.0, before_ns=0)


def test_an_unreachable_nsqd_is_named_with_its_reason(links: list[LeaseLinks]) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{free.getsockname()[1]}"
    with pytest.raises(SourceUnavailableError) as info:
        open_links(links, address, "t")
    assert str(info.value).startswith(f"nsq source: cannot connect to any nsqd of ['{address}'] "
                                      "for topic 't': cannot connect to nsqd")  # fmt: skip


@pytest.mark.skipif(not GO_NSQD.exists(), reason=f"no Go nsqd at {GO_NSQD}")
def test_go_nsqd_is_noted_or_refused(links: list[LeaseLinks], tmp_path: Path) -> None:
    go = GoNsqd(tmp_path / "go")
    try:
        noting = open_links(links, go.tcp_address, "t")
        assert noting.unsupported == {go.tcp_address} and noting.caps() == {}
        strict = LeaseLinks(parse_read_options({"nsqd": go.tcp_address, "topic": "t",
                                                "channel": "spark"}))  # fmt: skip
        links.append(strict)
        strict.strict = True
        with pytest.raises(LeasesUnsupportedError, match="has no leases"):
            strict.start()
    finally:
        go.stop()

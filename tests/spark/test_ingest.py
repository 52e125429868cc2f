"""The source's NSQ side (no Spark): holding, FIN, TOUCH, cut, RDY beyond 2500, stop."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from nsqpy.spark.ingest import Ingest, SourceUnavailableError
from nsqpy.spark.options import parse_read_options

from .conftest import NsqdFactory, numbered, publish, read_options
from .daemons import Lookupd, Nsqd, wait_until
from .trickle import Trickle

BIG = 1 << 30


@pytest.fixture
def ingests() -> Iterator[list[Ingest]]:
    made: list[Ingest] = []
    yield made
    for ingest in made:
        ingest.shutdown(requeue=True)


def start(
    made: list[Ingest], nsqd: Nsqd, topic: str, settle_limit: float | None = None, **extra: object
) -> Ingest:
    opts = parse_read_options(read_options(nsqd, topic, **extra))
    ingest = Ingest(opts) if settle_limit is None else Ingest(opts, settle_limit=settle_limit)
    made.append(ingest)
    ingest.start()
    return ingest


def test_take_holds_until_finish_then_stop_requeues_the_rest(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(100))
    ingest = start(ingests, nsqd, "t", maxInFlight=1000)
    wait_until(lambda: ingest.available() == 100, 10, "all 100 in the inbox")

    first = ingest.take(40, BIG, wait=1.0)
    assert [m.body for m in first] == numbered(100)[:40]  # one nsqd delivers in order
    assert nsqd.channel("t", "spark")["in_flight_count"] == 100  # taken is still held
    ingest.finish(first)
    wait_until(lambda: nsqd.channel("t", "spark")["in_flight_count"] == 60, 10, "40 FINs")
    assert ingest.stats.finished == 40 and ingest.stats.fin_failed == 0

    ingest.take(10, BIG, wait=1.0)  # held, never finished: must go back on stop
    ingest.shutdown(requeue=True)
    stats = nsqd.channel("t", "spark")
    assert stats["in_flight_count"] == 0
    assert stats["depth"] == 60
    assert (stats["requeue_count"], stats["timeout_count"]) == (60, 0)  # REQ'd, not dropped
    assert ingest.stats.requeued == 60


def test_a_second_shutdown_returns_only_once_the_first_handed_everything_back(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """Spark's end of stream and its SIGTERM can both stop the runner; the handler exits the
    process as soon as its call returns, so that call must wait for the REQs under way."""
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(30))
    ingest = start(ingests, nsqd, "t", maxInFlight=100)
    wait_until(lambda: ingest.available() == 30, 10, "30 in the inbox")
    ingest.take(30, BIG, wait=1.0)
    entered, release = threading.Event(), threading.Event()
    real_close = ingest._close

    async def held_close(requeue: bool, drain_limit: float) -> None:
        entered.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)
        await real_close(requeue, drain_limit)

    ingest._close = held_close  # type: ignore[method-assign]
    first = threading.Thread(target=ingest.shutdown, kwargs={"requeue": True, "timeout": 5.0})
    first.start()
    assert entered.wait(10)
    seen: list[int] = []

    def second() -> None:
        ingest.shutdown(requeue=True, timeout=5.0)
        seen.append(nsqd.channel("t", "spark")["in_flight_count"])

    waiter = threading.Thread(target=second)
    waiter.start()
    waiter.join(0.5)  # it must still be waiting: the first shutdown is held
    assert waiter.is_alive()
    release.set()
    waiter.join(10)
    first.join(10)
    assert seen == [0]  # when the second call returned, every message was back in nsqd
    assert nsqd.channel("t", "spark")["requeue_count"] == 30


def test_a_second_shutdown_does_not_wait_for_the_first_callers_return(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """The first caller may be the main thread a SIGTERM handler interrupted: it returns only
    after the handler, so the second call must go by the close's end on the loop thread."""
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(10))
    ingest = start(ingests, nsqd, "t")
    wait_until(lambda: ingest.available() == 10, 10, "10 in the inbox")
    loop_thread = ingest._thread
    assert loop_thread is not None
    resume = threading.Event()
    real_stop = loop_thread.stop

    def suspended_stop() -> None:  # the first caller, stuck after its close has run
        resume.wait(30)
        real_stop()

    loop_thread.stop = suspended_stop  # type: ignore[method-assign]
    first = threading.Thread(target=ingest.shutdown, kwargs={"requeue": True, "timeout": 30.0})
    first.start()
    try:
        wait_until(lambda: nsqd.channel("t", "spark")["in_flight_count"] == 0, 10, "REQs")
        second = threading.Thread(target=ingest.shutdown, kwargs={"requeue": True, "timeout": 30.0})
        second.start()
        second.join(5)  # a wait for the first caller would last the whole 31 s
        assert not second.is_alive()
        assert first.is_alive()
    finally:
        resume.set()
        first.join(10)


def test_stop_without_requeue_leaves_messages_to_nsqd(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(20))
    ingest = start(ingests, nsqd, "t", requeueOnStop="false", msgTimeout="60s")
    wait_until(lambda: ingest.available() == 20, 10, "20 in the inbox")
    ingest.shutdown(requeue=False)
    stats = nsqd.channel("t", "spark")
    assert stats["requeue_count"] == 0
    # NSQ's nsqd lets them time out; nsqpy's puts a dropped client's messages back at once
    assert (stats["depth"], stats["timeout_count"]) == (20, 20)


def test_byte_limit_and_at_least_one_message(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(10, size=100))
    ingest = start(ingests, nsqd, "t")
    wait_until(lambda: ingest.available() == 10, 10, "10 in the inbox")
    assert len(ingest.take(100, 350, wait=0)) == 3
    assert len(ingest.take(100, 1, wait=0)) == 1  # a message bigger than the limit goes alone
    assert len(ingest.take(100, BIG, wait=0)) == 6
    assert ingest.take(100, BIG, wait=0) == []


def test_cut_holds_back_later_messages_and_returns_them_on_stop(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(10, "early"))
    ingest = start(ingests, nsqd, "t")
    wait_until(lambda: ingest.available() == 10, 10, "early messages")
    cut = time.time_ns()
    publish(nsqd.tcp_address, "t", numbered(5, "late"))
    wait_until(lambda: ingest.available() == 15, 10, "late messages")

    taken = ingest.take(100, BIG, wait=0, cut_ns=cut)
    assert [m.body for m in taken] == numbered(10, "early")
    assert ingest.stats.deferred_after_cut == 5
    ingest.finish(taken)
    ingest.shutdown(requeue=True)
    stats = nsqd.channel("t", "spark")
    assert (stats["depth"], stats["in_flight_count"]) == (5, 0)


def test_held_messages_are_touched_past_their_timeout(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    nsqd = nsqd_proc()
    publish(nsqd.tcp_address, "t", numbered(30))
    ingest = start(ingests, nsqd, "t", msgTimeout="2s")
    wait_until(lambda: ingest.available() == 30, 10, "30 in the inbox")
    held = ingest.take(20, BIG, wait=0)  # 20 admitted, 10 left in the inbox
    began = time.monotonic()
    # three touch rounds: more than the 2 s timeout has passed since delivery
    wait_until(lambda: ingest.stats.touched >= 90 and time.monotonic() - began > 2.5, 15,
               "three rounds of TOUCH")
    stats = nsqd.channel("t", "spark")
    assert stats["timeout_count"] == 0
    assert stats["in_flight_count"] == 30
    ingest.finish(held)
    wait_until(lambda: nsqd.channel("t", "spark")["in_flight_count"] == 10, 10, "FIN after TOUCH")
    assert ingest.stats.fin_failed == 0


def test_in_flight_beyond_nsqds_default_rdy_cap(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """A source needs an nsqd with a large --max-rdy-count; the default caps it at 2500."""
    roomy = nsqd_proc("--max-rdy-count=20000")
    default = nsqd_proc()
    for nsqd in (roomy, default):
        publish(nsqd.tcp_address, "t", numbered(6000))
    ingest = start(ingests, roomy, "t", maxInFlight=12000)
    ingest2 = start(ingests, default, "t", maxInFlight=12000)
    wait_until(lambda: roomy.channel("t", "spark").get("in_flight_count") == 6000, 20,
               "6000 in flight from the roomy nsqd")
    wait_until(lambda: ingest2.available() == 2500, 20, "2500 from the default nsqd")
    # nsqd counts them in flight when written; the inbox has them once the client parsed them
    wait_until(lambda: ingest.available() == 6000, 20, "6000 in the roomy inbox")
    assert default.channel("t", "spark")["in_flight_count"] == 2500
    assert ingest.stats.rdy_capped == []
    assert ingest2.stats.rdy_capped == [default.tcp_address]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_nsqd_fails_with_a_readable_error() -> None:
    address = f"127.0.0.1:{_free_port()}"
    ingest = Ingest(parse_read_options({"nsqd": address, "topic": "t", "channel": "c"}))
    began = time.monotonic()
    with pytest.raises(SourceUnavailableError, match=f"cannot connect to any nsqd.*{address}"):
        ingest.start()
    assert time.monotonic() - began < 10


def test_unreachable_lookupd_fails_but_an_unknown_topic_does_not(
    ingests: list[Ingest],
) -> None:
    address = f"127.0.0.1:{_free_port()}"
    ingest = Ingest(parse_read_options({"lookupd": address, "topic": "t", "channel": "c"}))
    with pytest.raises(SourceUnavailableError, match="no nsqlookupd reachable"):
        ingest.start()
    lookupd = Lookupd()
    try:
        quiet = Ingest(parse_read_options(
            {"lookupd": lookupd.http_address, "topic": "nobody", "channel": "c"}
        ))
        ingests.append(quiet)
        quiet.start()  # the topic may appear later: not an error
        assert quiet.take(10, BIG, wait=0.1) == []
    finally:
        lookupd.stop()


def test_a_backlog_larger_than_the_window_keeps_flowing(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """Windows of 50000 over a 150000 backlog: every FIN must let nsqd send more.

    The runner's main thread (building payloads, pickling) starves the loop thread that reads
    from nsqd; long C calls that hold the GIL do the same here, so nsqd's transport fills up
    (the case where nsqd once stopped refilling a client's window after its FINs).
    """
    nsqd = nsqd_proc("--max-rdy-count=100000")
    publish(nsqd.tcp_address, "t", numbered(150000, size=200))
    ingest = start(ingests, nsqd, "t", maxInFlight=50000)
    for _ in range(20):
        sum(range(3_000_000))  # one C call: the GIL is not released while it runs
    got = 0
    for _ in range(3):
        wait_until(lambda: ingest.available() == 50000, 30, f"a full window after {got}")
        batch = ingest.take(50000, BIG, wait=0)
        ingest.finish(batch)
        got += len(batch)
    assert got == 150000
    wait_until(lambda: nsqd.channel("t", "spark")["in_flight_count"] == 0, 10, "last FINs")


def test_discovers_nsqd_through_lookupd(nsqd_proc: NsqdFactory, ingests: list[Ingest]) -> None:
    lookupd = Lookupd()
    try:
        nsqd = nsqd_proc(f"--lookupd-tcp-address={lookupd.tcp_address}",
                         "--broadcast-address=127.0.0.1")
        publish(nsqd.tcp_address, "found", numbered(50))
        wait_until(lambda: _producers(lookupd, "found") == 1, 15, "lookupd to list the nsqd")
        ingest = Ingest(parse_read_options(
            {"lookupd": lookupd.http_address, "topic": "found", "channel": "c"}
        ))
        ingests.append(ingest)
        ingest.start()
        wait_until(lambda: ingest.available() == 50, 15, "50 messages via lookupd")
        assert {m.nsqd_address for m in ingest.take(100, BIG, wait=0)} == {nsqd.tcp_address}
    finally:
        lookupd.stop()


def _producers(lookupd: Lookupd, topic: str) -> int:
    try:
        return len(lookupd.get(f"/lookup?topic={topic}")["producers"])
    except OSError:  # 404 until the topic is registered
        return 0


def timed_take(ingest: Ingest, max_count: int, wait: float) -> tuple[float, int]:
    began = time.monotonic()
    got = ingest.take(max_count, BIG, wait=wait)
    return time.monotonic() - began, len(got)


def test_a_steady_trickle_is_taken_after_a_short_settle(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """Messages 5 ms apart never leave the 50 ms settle loop by going quiet.

    The settle wait after the first message of an empty inbox once ended only when nsqd
    stopped sending, i.e. when maxInFlight messages were in flight: 15 s here, 21 s for the
    first batch of a live archive. It ends after SETTLE_LIMIT at most now.
    """
    nsqd = nsqd_proc("--max-rdy-count=10000")
    nsqd.create_channel("t", "spark")
    ingest = start(ingests, nsqd, "t", maxInFlight=3000)
    with Trickle(nsqd.tcp_address, "t", rate=200) as trickle:
        took, got = timed_take(ingest, 1000, wait=30.0)
        assert trickle.error is None
    assert 0 < got < 1000  # the count bound (1000 = 5 s of trickle) did not end it
    assert took < 2.0, f"the first take waited {took:.1f} s for a trickle of 200 msg/s"


def test_the_settle_ends_once_a_batch_is_waiting(
    nsqd_proc: NsqdFactory, ingests: list[Ingest]
) -> None:
    """The count bound: with a settle limit far away, max_count messages end the wait."""
    nsqd = nsqd_proc("--max-rdy-count=10000")
    nsqd.create_channel("t", "spark")
    ingest = start(ingests, nsqd, "t", settle_limit=60.0, maxInFlight=3000, pollTimeout="60s")
    with Trickle(nsqd.tcp_address, "t", rate=200) as trickle:
        took, got = timed_take(ingest, 50, wait=60.0)
        assert trickle.error is None
    assert got == 50
    assert took < 10.0, f"50 messages at 200 msg/s took {took:.1f} s to be taken"

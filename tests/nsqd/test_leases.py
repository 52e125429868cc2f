"""Leases (nsqpy extension) in the channel domain, with an injected clock: no daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_channel import make_channel, msg, subscribe
from test_dead_letters import Clock, channel, disk_queues, make_broker, publish

from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.lease import (
    EXPIRED,
    FINISHED,
    REQUEUED,
    SEALED,
    Lease,
    LeaseBook,
    LeaseError,
    is_valid_lease_name,
)
from nsqpy.nsqd.core.message import materialize

TTL = 30.0


def filled(n: int, mem: int = 100) -> Channel:
    ch = make_channel(mem)
    ch.put_many([msg(i) for i in range(n)], 0.0)
    return ch


def lease(ch: Channel, name: str = "a", count: int | None = 3, max_bytes: int | None = None,
          *, wait: float = 0.0, now: float = 0.0, ttl: float = TTL) -> Lease:  # fmt: skip
    return LeaseBook.of(ch).lease(name, count, max_bytes, ttl=ttl, wait=wait, now=now)


def queued_ids(ch: Channel) -> list[bytes]:
    return [materialize(item).id for item in ch.queue]


def code(err: pytest.ExceptionInfo[LeaseError]) -> str:
    return err.value.code


# -- taking and replaying -----------------------------------------------------------------------


def test_a_lease_takes_up_to_count_from_the_head_and_counts_in_flight() -> None:
    ch = filled(5)
    got = lease(ch, count=3)
    assert got.state == SEALED
    assert [m.id for m in got.messages] == [msg(i).id for i in range(3)]
    assert [m.attempts for m in got.messages] == [1, 1, 1]
    assert (got.size, ch.depth, ch.in_flight_count) == (15, 2, 3)
    assert queued_ids(ch) == [msg(3).id, msg(4).id]
    assert LeaseBook.of(ch).lease_count == 1


def test_the_same_lease_asked_again_gives_exactly_the_same_messages() -> None:
    ch = filled(5)
    first = [(m.id, m.body, m.timestamp, m.attempts) for m in lease(ch).messages]
    again = lease(ch, now=10.0)
    assert [(m.id, m.body, m.timestamp, m.attempts) for m in again.messages] == first
    assert lease(ch, count=None, now=11.0) is again, "count and bytes may be left out"
    assert (ch.depth, ch.in_flight_count) == (2, 3), "nothing more was taken"
    other = lease(ch, "b", count=5)
    assert [m.id for m in other.messages] == [msg(3).id, msg(4).id]


def test_a_lease_of_an_empty_channel_is_sealed_empty_and_stays_empty() -> None:
    ch = make_channel()
    assert lease(ch).messages == []
    ch.put(msg(1), 0.0)
    assert lease(ch).messages == [] and ch.depth == 1


def test_bytes_limit_stops_before_the_message_that_would_pass_it() -> None:
    ch = make_channel()
    bodies = [b"x" * 4, b"y" * 4, b"z" * 10, b"w"]
    ch.put_many([(b"%016x" % i, body, 0) for i, body in enumerate(bodies)], 0.0)
    got = lease(ch, count=10, max_bytes=9)
    assert [m.body for m in got.messages] == [b"xxxx", b"yyyy"] and got.size == 8
    assert [materialize(i).body for i in ch.queue] == [b"z" * 10, b"w"], "order kept"
    big = lease(ch, "b", count=10, max_bytes=5)
    assert [m.body for m in big.messages] == [b"z" * 10], "the first message always goes"


def test_a_lease_takes_memory_then_disk_in_order(tmp_path: Path) -> None:
    queue = disk_queues(tmp_path)("t:c")
    ch = Channel("t", "c", mem_queue_size=2, max_msg_timeout=900.0, backend=queue)
    ch.put_many([msg(i) for i in range(6)], 0.0)
    assert (len(ch.queue), ch.backend_depth) == (2, 4)
    got = lease(ch, count=5)
    assert [m.id for m in got.messages] == [msg(i).id for i in range(5)]
    assert ch.depth == 1 and ch.in_flight_count == 5


def test_a_paused_channel_leases_nothing() -> None:
    ch = filled(2)
    ch.pause()
    assert lease(ch).messages == [] and ch.depth == 2


def test_an_expired_message_is_not_leased(tmp_path: Path) -> None:
    clock = Clock()
    broker = make_broker(clock, message_ttl=10 * 10**9)
    broker.get_channel(broker.get_topic("t"), "c", clock.now)
    publish(broker, clock, "t", b"old")
    clock.advance(11)
    publish(broker, clock, "t", b"new")
    got = lease(channel(broker, "t", "c"), count=5, now=clock.now)
    assert [m.body for m in got.messages] == [b"new"]
    assert channel(broker, "t", "c").expired_count == 1


# -- waiting ------------------------------------------------------------------------------------


def test_a_waiting_lease_fills_on_the_queue_scan_and_seals_when_full() -> None:
    ch = make_channel()
    sealed: list[Lease] = []
    got = lease(ch, count=2, wait=5.0)
    got.waiters.append(sealed.append)
    assert not got.sealed and ch.in_flight_count == 0
    ch.put(msg(1), 1.0)
    assert ch.process(1.0) and not got.sealed
    assert [m.id for m in got.messages] == [msg(1).id] and ch.in_flight_count == 1
    ch.put_many([msg(2), msg(3)], 2.0)
    ch.process(2.0)
    assert got.sealed and sealed == [got]
    assert [m.id for m in got.messages] == [msg(1).id, msg(2).id]
    assert queued_ids(ch) == [msg(3).id]
    assert got.deadline == 2.0 + TTL, "the ttl runs from the seal"


def test_a_waiting_lease_seals_with_what_came_when_its_wait_is_over() -> None:
    ch = make_channel()
    got = lease(ch, count=5, wait=5.0)
    ch.put(msg(1), 1.0)
    ch.process(4.9)
    assert not got.sealed
    ch.process(5.0)
    assert got.sealed and [m.id for m in got.messages] == [msg(1).id]
    ch.put(msg(2), 6.0)
    ch.process(6.0)
    assert len(lease(ch, count=5, now=6.0).messages) == 1, "sealed: nothing more"


def test_seal_now_takes_what_is_queued_and_calls_the_waiters_once() -> None:
    ch = make_channel()
    book = LeaseBook.of(ch)
    got = lease(ch, count=5, wait=60.0)
    calls: list[Lease] = []
    got.waiters.append(calls.append)
    ch.put(msg(1), 1.0)
    book.seal(got, 1.0)
    book.seal(got, 2.0)
    assert calls == [got] and [m.id for m in got.messages] == [msg(1).id]


# -- FIN and REQ --------------------------------------------------------------------------------


def test_fin_of_a_lease_is_idempotent_and_the_name_stays_used() -> None:
    ch = filled(3)
    book = LeaseBook.of(ch)
    lease(ch)
    assert book.finish("a", 1.0).state == FINISHED
    assert (ch.in_flight_count, ch.depth, book.lease_count) == (0, 0, 0)
    assert book.finish("a", 2.0).state == FINISHED, "again: the same answer"
    assert ch.in_flight_count == 0
    with pytest.raises(LeaseError) as err:
        lease(ch, now=3.0)
    assert code(err) == "LEASE_FINISHED"
    with pytest.raises(LeaseError) as err:
        book.requeue("a", 0.0, 3.0)
    assert code(err) == "LEASE_FINISHED"


def test_req_of_a_lease_puts_its_messages_back_in_order() -> None:
    ch = filled(4)
    book = LeaseBook.of(ch)
    lease(ch, count=2)
    ch.queue.clear()  # only the leased ones remain
    book.requeue("a", 0.0, 1.0)
    assert queued_ids(ch) == [msg(0).id, msg(1).id]
    assert (ch.requeue_count, ch.in_flight_count, ch.timeout_count) == (2, 0, 0)
    assert book.requeue("a", 0.0, 2.0).state == REQUEUED, "again: no-op"
    assert ch.depth == 2 and ch.requeue_count == 2
    with pytest.raises(LeaseError) as err:
        book.finish("a", 2.0)
    assert code(err) == "LEASE_REQUEUED"
    sink = subscribe(ch, 5, now=3.0)
    assert sink.attempts == [2, 2], "the lease counted as a delivery"


def test_req_with_a_delay_defers_the_messages() -> None:
    ch = filled(2)
    LeaseBook.of(ch).requeue(lease(ch, count=2).name, 10.0, 0.0)
    assert (ch.deferred_count, ch.depth) == (2, 0)
    ch.process(10.0)
    assert (ch.deferred_count, ch.depth) == (0, 2)


def test_unknown_lease_to_fin_or_req_is_not_found() -> None:
    book = LeaseBook.of(filled(1))
    for action in (lambda: book.finish("nope", 0.0), lambda: book.requeue("nope", 0.0, 0.0)):
        with pytest.raises(LeaseError) as err:
            action()
        assert code(err) == "LEASE_NOT_FOUND"


def test_fin_of_a_lease_still_waiting_settles_what_it_took() -> None:
    ch = make_channel()
    got = lease(ch, count=3, wait=10.0)
    ch.put(msg(1), 1.0)
    ch.process(1.0)
    LeaseBook.of(ch).finish("a", 2.0)
    assert got.state == FINISHED and len(got.messages) == 1 and ch.in_flight_count == 0


# -- bad input ----------------------------------------------------------------------------------


def test_reusing_a_name_with_other_limits_is_a_mismatch_and_changes_nothing() -> None:
    ch = filled(5)
    lease(ch, count=2, max_bytes=100)
    for count, max_bytes in ((3, 100), (2, 99), (2, 0)):
        with pytest.raises(LeaseError) as err:
            lease(ch, count=count, max_bytes=max_bytes)
        assert code(err) == "LEASE_MISMATCH"
    assert (ch.depth, ch.in_flight_count) == (3, 2)


def test_a_new_lease_needs_a_positive_count() -> None:
    ch = filled(1)
    for count, expected in ((None, "MISSING_ARG_COUNT"), (0, "INVALID_COUNT")):
        with pytest.raises(LeaseError) as err:
            lease(ch, count=count)
        assert code(err) == expected
    assert ch.depth == 1 and LeaseBook.of(ch).lease_count == 0


def test_no_lease_on_an_ephemeral_channel() -> None:
    ch = Channel("t", "c#ephemeral", mem_queue_size=10, max_msg_timeout=900.0)
    ch.put(msg(1), 0.0)
    with pytest.raises(LeaseError) as err:
        lease(ch)
    assert code(err) == "EPHEMERAL_CHANNEL" and ch.depth == 1


def test_lease_names() -> None:
    assert is_valid_lease_name("batch-17.part_3")
    assert not is_valid_lease_name("")
    assert not is_valid_lease_name("a" * 65)
    assert not is_valid_lease_name("x#ephemeral")
    assert not is_valid_lease_name("a b")


# -- ttl ----------------------------------------------------------------------------------------


def test_a_lease_past_its_ttl_is_requeued_as_timed_out() -> None:
    ch = filled(2)
    book = LeaseBook.of(ch)
    lease(ch, count=2, now=1.0)
    assert not ch.process(1.0 + TTL - 0.1)
    assert ch.in_flight_count == 2
    assert ch.process(1.0 + TTL)
    assert (ch.in_flight_count, ch.depth, ch.timeout_count) == (0, 2, 2)
    assert book.requeue("a", 0.0, 40.0).state == EXPIRED, "a late REQ is a no-op"
    with pytest.raises(LeaseError) as err:
        book.finish("a", 40.0)
    assert code(err) == "LEASE_REQUEUED"
    again = lease(ch, "b", count=2, now=41.0)
    assert [m.attempts for m in again.messages] == [2, 2]


def test_an_expired_lease_out_of_attempts_goes_to_the_dead_letter_topic() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    ch = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    publish(broker, clock, "t", b"poison", b"fine")
    lease(ch, count=1, now=clock.now)
    clock.advance(TTL)
    ch.process(clock.now)
    assert (ch.timeout_count, ch.dead_letter_count) == (1, 1)
    assert broker.flush_dead_letters(clock.now, clock.wall) == 1
    assert broker.topics["t.dead"].depth == 1
    assert [materialize(i).body for i in ch.queue] == [b"fine"]


def test_a_closed_lease_is_forgotten_after_its_ttl() -> None:
    ch = filled(2)
    book = LeaseBook.of(ch)
    lease(ch, count=1)
    book.finish("a", 5.0)
    ch.process(5.0 + TTL - 0.1)
    assert book.finish("a", 5.0 + TTL - 0.1).state == FINISHED
    ch.process(5.0 + TTL)
    with pytest.raises(LeaseError) as err:
        book.finish("a", 5.0 + TTL)
    assert code(err) == "LEASE_NOT_FOUND"
    assert [m.id for m in lease(ch, count=1, now=40.0).messages] == [msg(1).id], "name free"


# -- the channel's own operations ---------------------------------------------------------------


def test_empty_drops_leases_and_wakes_waiters_with_nothing() -> None:
    ch = filled(2)
    book = LeaseBook.of(ch)
    lease(ch, count=2)
    waiting = lease(ch, "w", count=2, wait=10.0)
    woken: list[Lease] = []
    waiting.waiters.append(woken.append)
    ch.empty(1.0)
    assert (ch.in_flight_count, book.lease_count) == (0, 0)
    assert woken == [waiting] and waiting.messages == []
    with pytest.raises(LeaseError) as err:
        book.finish("a", 1.0)
    assert code(err) == "LEASE_NOT_FOUND"


def test_a_clean_stop_writes_leased_messages_back(tmp_path: Path) -> None:
    open_queue = disk_queues(tmp_path)
    ch = Channel("t", "c", mem_queue_size=10, max_msg_timeout=900.0, backend=open_queue("t:c"))
    ch.put_many([msg(i) for i in range(3)], 0.0)
    lease(ch, count=2)
    assert ch.flush(1.0) == 3
    assert ch.in_flight_count == 0 and ch.backend_depth == 3
    assert LeaseBook.of(ch).lease_count == 0

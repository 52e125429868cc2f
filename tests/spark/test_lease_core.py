"""Lease mode's planning and offsets without Spark or nsqd: a scripted nsqd behind ``Links``."""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from nsqpy.spark import lease_plan
from nsqpy.spark.lease_core import ClosedName, Finished, LeaseCore
from nsqpy.spark.lease_plan import Ask
from nsqpy.spark.limits import Limits
from nsqpy.spark.offsets import LeaseOffset, LeaseRef, Offset, parse_any
from nsqpy.spark.options import parse_read_options

A, B = "10.0.0.1:4150", "10.0.0.2:4150"
ALL = Limits(5000, 1 << 30)


@dataclass
class FakeMessage:
    body: bytes
    id: bytes
    timestamp: int
    attempts: int


@dataclass
class FakeNsqd:
    """Queued message sizes and leases by name, as nsqd keeps them."""

    queue: deque[int] = field(default_factory=deque)
    leases: dict[str, list[int]] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    cap: int = 2500
    up: bool = True


@dataclass
class FakeLinks:
    nsqds: dict[str, FakeNsqd]
    calls: list[tuple[str, float]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    arrive_after_waits: int = -1  # a message comes during the n-th waiting reserve
    prefetched: list[str] = field(default_factory=list)
    run_prefetch: bool = False

    def caps(self) -> dict[str, int]:
        return {a: n.cap for a, n in self.nsqds.items() if n.up}

    def reserve(
        self, asks: Sequence[Ask], *, wait: float, ttl: float, before_ns: int
    ) -> list[LeaseRef]:
        self.calls.append(("reserve", wait))
        if wait > 0:
            self.arrive_after_waits -= 1
            if self.arrive_after_waits == 0:
                self.nsqds[asks[0].nsqd].queue.append(7)
        return [self._one(ask) for ask in asks]

    def _one(self, ask: Ask) -> LeaseRef:
        nsqd = self.nsqds[ask.nsqd]
        if not nsqd.up:
            return LeaseRef(ask.nsqd, ask.name, 0, 0)
        if ask.name in nsqd.closed:
            raise ClosedName(ask.name)
        taken = nsqd.leases.get(ask.name)
        if taken is None:
            taken = []
            while nsqd.queue and len(taken) < ask.count:
                taken.append(nsqd.queue.popleft())
            if taken:  # a reserve that took nothing keeps no lease
                nsqd.leases[ask.name] = taken
        return LeaseRef(ask.nsqd, ask.name, len(taken), sum(taken))

    def prefetch(self, asks: Sequence[Ask], *, ttl: float, before_ns: int) -> None:
        self.prefetched.extend(a.name for a in asks)
        if self.run_prefetch:
            self.reserve(asks, wait=0.0, ttl=ttl, before_ns=before_ns)

    def finish(self, leases: Sequence[LeaseRef]) -> Finished:
        result = Finished()
        for ref in leases:
            nsqd = self.nsqds[ref.nsqd]
            if not nsqd.up:
                result.failed.append(ref)
            elif nsqd.leases.pop(ref.name, None) is None and ref.name not in nsqd.closed:
                result.gone.append(ref)
            else:
                nsqd.closed.add(ref.name)
                self.finished.append(ref.name)
                result.done += 1
        return result

    def close(self) -> None:
        pass


def opts(**extra: str) -> object:
    return parse_read_options({"nsqd": A, "topic": "t", "channel": "c", "pollTimeout": "0s",
                               **extra})  # fmt: skip


def make(*nsqds: str, **extra: str) -> tuple[LeaseCore, FakeLinks]:
    links = FakeLinks({a: FakeNsqd() for a in nsqds or (A,)})
    return LeaseCore(opts(**extra), links, "q0"), links  # type: ignore[arg-type]


# --- names, sizes, tasks ------------------------------------------------------------------------


def test_lease_names_are_stable_valid_and_distinct() -> None:
    name = lease_plan.lease_name("0123456789ab", 123456, A, 17)
    assert name == lease_plan.lease_name("0123456789ab", 123456, A, 17)
    assert re.fullmatch(r"[.a-zA-Z0-9_-]{1,64}", name)
    assert name.startswith("0123456789ab.123456.") and name.endswith(".17")
    others = {lease_plan.lease_name("0123456789ab", b, n, i)
              for b in (1, 2) for n in (A, B) for i in (0, 1)}  # fmt: skip
    assert len(others) == 8


def test_the_budget_is_split_exactly_over_nsqds_leases_and_caps() -> None:
    asks = lease_plan.asks("q", 3, {A: 2500, B: 2500}, Limits(1001, 9000), num_partitions=2)
    assert [(a.nsqd, a.count, a.max_bytes) for a in asks] == [(A, 501, 4500), (B, 500, 4500)]
    # one nsqd, two tasks, and nsqd's --max-rdy-count caps a lease's count
    asks = lease_plan.asks("q", 3, {A: 300}, Limits(1000, 1 << 20), num_partitions=2)
    assert [a.count for a in asks] == [250, 250, 250, 250]
    assert len({a.name for a in asks}) == 4
    # never more leases than messages, never over the count
    asks = lease_plan.asks("q", 3, {A: 10, B: 10}, Limits(3, 100), num_partitions=8)
    assert sum(a.count for a in asks) == 3 and all(a.count > 0 for a in asks)
    # a budget far above the cap: a bounded number of full leases
    asks = lease_plan.asks("q", 3, {A: 100}, Limits(1 << 30, 1 << 30), num_partitions=2)
    assert len(asks) == lease_plan.MAX_LEASES_PER_NSQD and {a.count for a in asks} == {100}
    # a lease stays small enough for one LEASE_COLUMNS frame
    asks = lease_plan.asks("q", 3, {A: 10**6}, Limits(10**6, 100 << 20), num_partitions=1)
    assert len(asks) == 5 and max(a.max_bytes for a in asks) <= lease_plan.MAX_LEASE_BYTES
    assert lease_plan.asks("q", 3, {}, ALL, 2) == []


def test_a_large_share_is_read_as_several_leases_per_task() -> None:
    """So that a task's fetch, Arrow and write overlap; small shares stay one lease a task."""
    per_task = lease_plan.PIPELINED_LEASES * lease_plan.MIN_PIPELINED_COUNT
    asks = lease_plan.asks("q", 3, {A: 10**6}, Limits(2 * per_task, 64 << 20), num_partitions=2)
    assert len(asks) == 2 * lease_plan.PIPELINED_LEASES
    refs = [LeaseRef(A, a.name, a.count, 0) for a in asks]
    assert [len(s.leases) for s in lease_plan.splits(refs, 2)] == [lease_plan.PIPELINED_LEASES] * 2
    small = lease_plan.asks("q", 3, {A: 10**6}, Limits(lease_plan.MIN_PIPELINED_COUNT, 16 << 20), 2)
    assert len(small) == 2


def test_tasks_get_whole_leases_balanced_by_count() -> None:
    refs = [LeaseRef(A, "a", 10, 0), LeaseRef(B, "b", 4, 0), LeaseRef(A, "c", 5, 0),
            LeaseRef(B, "d", 1, 0)]  # fmt: skip
    splits = lease_plan.splits(refs, 2)
    assert [[r.name for r in s.leases] for s in splits] == [["a"], ["c", "b", "d"]]
    assert len(lease_plan.splits(refs[:1], 4)) == 1  # no empty task


def test_offsets_round_trip_and_refuse_garbage() -> None:
    end = LeaseOffset("q1", 4, (LeaseRef(A, "q1.4.x.0", 3, 30),))
    assert parse_any(end.to_json()) == end
    assert end.to_json() == {"v": 2, "q": "q1", "batch": 4, "leases": [[A, "q1.4.x.0", 3, 30]]}
    assert parse_any({"v": 1, "seq": 5, "tick": 1}) == Offset(5, 1)
    for bad in ({"v": 2, "q": "q", "batch": -1, "leases": []},
                {"v": 2, "q": "q", "batch": 1, "leases": [[A, "n", 1]]},
                {"v": 2, "batch": 1, "leases": []}, {"v": 3}):  # fmt: skip
        with pytest.raises(ValueError, match="nsq source"):
            parse_any(bad)


# --- planning -----------------------------------------------------------------------------------


def test_a_batch_reserves_then_its_start_is_finished_at_the_next_trigger() -> None:
    core, links = make(A, B)
    links.nsqds[A].queue.extend([10] * 5)
    links.nsqds[B].queue.extend([20] * 2)
    first = core.latest(LeaseOffset("q0"), Limits(6, 1 << 20))
    assert first is not None and (first.query, first.batch) == ("q0", 1)
    assert sorted((r.nsqd, r.count, r.size) for r in first.leases) == [(A, 3, 30), (B, 2, 40)]
    assert links.finished == []  # not before Spark commits it
    second = core.latest(first, ALL)  # Spark asks this only once batch 1 is committed
    assert sorted(links.finished) == sorted(r.name for r in first.leases)
    assert second is not None and second.batch == 2 and second.count == 2
    core.finish(first)  # Spark's commit(end_1) comes later: nothing is sent again
    assert len(links.finished) == 2
    assert core.latest(second, ALL) is None  # nothing left: no batch
    assert core.stats.finished == 3 and core.stats.messages == 7


def test_a_restarted_run_plans_the_same_batch_under_the_same_names() -> None:
    core, links = make(A)
    links.nsqds[A].queue.extend([1] * 10)
    start = LeaseOffset("q7", 4)
    planned = core.latest(start, Limits(4, 100))
    # the driver dies before Spark logs the batch; the next run asks for the same batch
    again = LeaseCore(core.opts, links, "other").latest(start, Limits(4, 100))
    assert again == planned
    assert len(links.nsqds[A].queue) == 6  # the same messages, nothing more taken


def test_nothing_queued_waits_for_messages_up_to_the_poll_timeout() -> None:
    core, links = make(A, pollTimeout="2s")
    links.arrive_after_waits = 2  # a message arrives during the second waiting reserve
    end = core.latest(LeaseOffset("q0"), ALL)
    assert end is not None and end.count == 1
    waits = [w for kind, w in links.calls if kind == "reserve"]
    assert waits[0] == 0 and waits[1:3] == [lease_plan.WAIT_STEP] * 2 and waits[3] == 0

    idle, idle_links = make(A, pollTimeout="300ms")
    began = time.monotonic()
    assert idle.latest(LeaseOffset("q0"), ALL) is None
    assert 0.25 < time.monotonic() - began < 2.0
    assert all(w <= lease_plan.WAIT_STEP for _, w in idle_links.calls)


def test_names_taken_by_an_expired_crashed_plan_get_a_new_token() -> None:
    core, links = make(A)
    links.nsqds[A].queue.extend([1, 1])
    start = LeaseOffset("q0", 9)
    for ask in lease_plan.asks("q0", 10, links.caps(), ALL, 2):
        links.nsqds[A].closed.add(ask.name)
    end = core.latest(start, ALL)
    assert end is not None and end.query != "q0" and end.batch == 10 and end.count == 2
    assert core.token == end.query


def test_a_driver_side_start_begins_lease_batches_under_the_runs_token() -> None:
    core, links = make(A)
    links.nsqds[A].queue.append(5)
    end = core.latest(Offset(1234, 3), ALL)
    assert end is not None and (end.query, end.batch, end.count) == ("q0", 1, 1)


def test_lost_leases_are_counted_and_unsent_fins_tried_once_more() -> None:
    core, links = make(A, B)
    gone = LeaseOffset("q0", 1, (LeaseRef(A, "expired", 3, 3),))
    core.finish(gone)
    assert core.stats.expired == 3
    links.nsqds[B].up = False
    links.nsqds[B].leases["b"] = [1]
    core.finish(LeaseOffset("q0", 2, (LeaseRef(B, "b", 1, 1),)))
    assert core.stats.fin_failed == 1 and links.finished == []
    links.nsqds[B].up = True
    core.latest(LeaseOffset("q0", 2), ALL)  # the next trigger sends it
    assert links.finished == ["b"]


def test_available_now_reserves_with_the_cut() -> None:
    core, links = make(A)
    seen: list[int] = []
    original = links.reserve

    def spy(asks: Sequence[Ask], *, wait: float, ttl: float, before_ns: int) -> list[LeaseRef]:
        seen.append(before_ns)
        return original(asks, wait=wait, ttl=ttl, before_ns=before_ns)

    links.reserve = spy  # type: ignore[method-assign]
    core.latest(LeaseOffset("q0"), ALL)
    core.prepare_available_now()
    core.latest(LeaseOffset("q0"), ALL)
    assert seen[0] == 0 and abs(seen[-1] - time.time_ns()) < 10**10


def test_available_now_ends_without_waiting_once_the_run_has_taken_a_batch() -> None:
    core, links = make(A, pollTimeout="5s")
    core.prepare_available_now()
    links.arrive_after_waits = 1  # at the first trigger a message may still be on its way
    first = core.latest(LeaseOffset("q0"), ALL)
    assert first is not None and first.count == 1
    links.calls.clear()
    began = time.monotonic()
    assert core.latest(first, ALL) is None  # drained: nsqd answered for its whole queue
    assert time.monotonic() - began < 1.0
    assert [w for kind, w in links.calls if kind == "reserve"] == [0.0]


def test_a_fetched_lease_becomes_the_arrow_batch_spark_expects() -> None:
    pa = pytest.importorskip("pyarrow")
    from nsqpy.protocol import lease_columns
    from nsqpy.spark import payload
    from nsqpy.spark.lease_read import to_payload

    sent = [FakeMessage(b"", b"0123456789abcdef", 1_700_000_000_123_456_789, 1),
            FakeMessage(b"x" * 300, b"fedcba9876543210", 1_700_000_001_000_000_999, 65535),
            FakeMessage(b"last", b"00000000000000ff", 5_000, 2)]  # fmt: skip
    columns = lease_columns.decode(lease_columns.encode("l", sent))
    assert (columns.name, columns.count) == ("l", 3)
    batch = payload.to_record_batch(to_payload(columns, "t", "c", A))
    assert batch.schema.equals(payload.arrow_schema())
    assert batch.column("id").to_pylist() == [m.id.decode() for m in sent]
    assert batch.column("body").to_pylist() == [m.body for m in sent]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [m.timestamp // 1000
                                                                        for m in sent]  # fmt: skip
    assert batch.column("attempts").to_pylist() == [1, 65535, 2]
    assert batch.column("nsqd").to_pylist() == [A] * 3
    assert batch.column("channel").to_pylist() == ["c"] * 3


def test_the_next_batch_is_reserved_ahead_under_the_names_it_is_then_planned_with() -> None:
    core, links = make(A)
    links.run_prefetch = True
    links.nsqds[A].queue.extend([1] * 10)
    first = core.latest(LeaseOffset("q0"), Limits(4, 100))
    assert first is not None and first.count == 4
    ahead = list(links.prefetched)
    assert len(ahead) == 2 and all(name.startswith("q0.2.") for name in ahead)
    assert len(links.nsqds[A].queue) == 2  # batch 2's 4 were taken ahead
    links.nsqds[A].queue.extend([1] * 5)  # newer messages do not change batch 2
    second = core.latest(first, Limits(4, 100))
    assert second is not None and [r.name for r in second.leases] == ahead
    assert second.count == 4 and len(links.nsqds[A].queue) == 3  # ... and batch 3's ahead

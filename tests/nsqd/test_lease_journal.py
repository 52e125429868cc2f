"""Durable leases: the lease journal and the restored leases' claims, with injected clocks.

A "crash" here is a new broker and journal opened on the same files while the old objects are
abandoned unclosed: no metadata was synced, so every queue is read back from its segments,
the worst case a kill -9 can leave. No daemon; ``test_lease_crash.py`` kills real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_channel import Sink
from test_dead_letters import Clock, disk_queues, make_broker, publish

from nsqpy.nsqd.core.backend import DiskHooks
from nsqpy.nsqd.core.broker import Broker
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.lease import FINISHED, REQUEUED, Lease, LeaseBook, LeaseError
from nsqpy.nsqd.storage import lease_records, metadata
from nsqpy.nsqd.storage.diskqueue import DiskQueue
from nsqpy.nsqd.storage.lease_journal import QUEUE_NAME, LeaseJournal, open_journal
from nsqpy.nsqd.storage.lease_records import Close, Drop, Seal

TTL = 30.0


class Durable(DiskHooks):
    """--durable's hooks, with every commit done at once."""

    durable = True


class Node:
    """A durable broker with channel t:c and the lease journal, wired as nsqd wires them."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock
        hooks = Durable()
        self.broker: Broker = make_broker(clock, backends=disk_queues(path, acks=True), hooks=hooks)
        self.channel: Channel = self.broker.get_channel(self.broker.get_topic("t"), "c", clock.now)
        self.journal: LeaseJournal = open_journal(
            disk_queues(path, acks=True), hooks, self.broker, clock.now, clock
        )

    @property
    def book(self) -> LeaseBook:
        return LeaseBook.of(self.channel)

    def lease(self, name: str = "a", count: int | None = 3) -> Lease:
        return self.book.lease(name, count, None, ttl=TTL, wait=0.0, now=self.clock.now)

    def consume(self, rdy: int = 100) -> Sink:
        sink = Sink(msg_timeout=60.0)
        self.channel.add_client(sink.state)
        self.channel.set_rdy(sink.state, rdy, self.clock.now)
        return sink

    def crash(self, seconds: float = 10.0, monotonic: float = 500.0) -> Node:
        """Abandon this node and start another on the same files, ``seconds`` later by the
        wall clock, on a loop clock that starts elsewhere (as after a restart)."""
        self.clock.wall += int(seconds * 1e9)
        self.clock.now = monotonic
        return Node(self.path, self.clock)

    def stop(self) -> Node:
        """A clean stop (as nsqd's: channels flushed, then every queue closed) and a start."""
        self.channel.flush(self.clock.now)
        for queue in [*self.broker.backends_in_use(), self.journal.queue]:
            queue.close()
        return Node(self.path, self.clock)


def snapshot(lease: Lease) -> list[tuple[bytes, bytes, int, int]]:
    return [(m.id, m.body, m.timestamp, m.attempts) for m in lease.messages]


def bodies(sink: Sink) -> list[bytes]:
    return [m.body for m in sink.got]


@pytest.fixture
def node(tmp_path: Path) -> Node:
    clock = Clock()
    node = Node(tmp_path, clock)
    publish(node.broker, clock, "t", b"m0", b"m1", b"m2", b"m3", b"m4")
    return node


def test_a_sealed_lease_comes_back_after_a_crash_with_the_same_messages(node: Node) -> None:
    before = snapshot(node.lease())
    assert [b for _, b, _, _ in before] == [b"m0", b"m1", b"m2"]
    after = node.crash()
    lease = after.lease(count=None)
    assert snapshot(lease) == before, "ids, bodies, timestamps and attempts at the seal"
    assert (after.channel.depth, after.channel.in_flight_count) == (5, 0), "nothing read yet"
    sink = after.consume()
    assert bodies(sink) == [b"m3", b"m4"], "the leased records are claimed, not delivered"
    assert (after.channel.depth, after.channel.in_flight_count) == (0, 5)
    assert after.book.lease_count == 1 and lease.unclaimed == 0
    after.book.finish("a", after.clock.now)
    for msg in sink.got:
        after.channel.finish(sink.state, msg.id, after.clock.now)
    assert (after.channel.depth, after.channel.in_flight_count) == (0, 0)
    assert isinstance(after.channel.backend, DiskQueue)
    after.channel.backend.sync_now()  # as --sync-timeout does: the FINs' positions persist
    again = after.crash()
    assert bodies(again.consume()) == [] and again.book.get("a") is None


def test_the_ttl_runs_on_across_the_restart_and_an_expired_lease_is_requeued(
    node: Node,
) -> None:
    node.lease()
    after = node.crash(seconds=10.0, monotonic=500.0)  # 20 s of the ttl are left
    assert after.book.get("a") is not None
    after.channel.process(519.9)
    assert after.book.lease_count == 1
    after.channel.process(520.0)
    assert after.book.lease_count == 0 and after.channel.timeout_count == 3
    sink = after.consume()
    assert bodies(sink) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m.attempts for m in sink.got] == [2, 2, 2, 1, 1], "the lease counted as a delivery"
    with pytest.raises(LeaseError) as err:
        after.book.finish("a", 521.0)
    assert err.value.code == "LEASE_REQUEUED"


def test_a_lease_expired_while_down_is_requeued_at_the_first_scan(node: Node) -> None:
    node.lease()
    after = node.crash(seconds=TTL + 5)
    assert after.channel.process(after.clock.now)
    assert after.channel.timeout_count == 3
    assert bodies(after.consume()) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_finished_lease_does_not_come_back(node: Node) -> None:
    node.lease()
    node.book.finish("a", node.clock.now)
    after = node.crash()
    assert bodies(after.consume()) == [b"m3", b"m4"], "its replayed records are dropped"
    assert (after.channel.depth, after.channel.in_flight_count) == (0, 2)
    with pytest.raises(LeaseError) as err:
        after.lease()
    assert err.value.code == "LEASE_FINISHED", "remembered for its ttl, as before the crash"
    assert after.book.finish("a", after.clock.now).state == FINISHED


def test_a_restored_lease_finished_before_its_records_are_read(node: Node) -> None:
    node.lease()
    after = node.crash()
    after.book.finish("a", after.clock.now)
    assert after.channel.in_flight_count == 0
    assert bodies(after.consume()) == [b"m3", b"m4"]
    assert after.channel.depth == 0
    assert bodies(after.crash().consume()) == [b"m3", b"m4"], "FINs of others are not durable"


def test_a_requeued_lease_is_remembered_and_its_messages_delivered(node: Node) -> None:
    node.lease()
    node.book.requeue("a", 0.0, node.clock.now)
    after = node.crash()
    with pytest.raises(LeaseError) as err:
        after.lease()
    assert err.value.code == "LEASE_REQUEUED"
    assert sorted(bodies(after.consume())) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_restored_lease_requeued_before_its_records_are_read(node: Node) -> None:
    node.lease()
    after = node.crash()
    after.book.requeue("a", 0.0, after.clock.now)
    assert after.book.requeue("a", 0.0, after.clock.now).state == REQUEUED
    sink = after.consume()
    assert bodies(sink) == [b"m0", b"m1", b"m2", b"m3", b"m4"], "each once, in order"
    assert [m.attempts for m in sink.got] == [2, 2, 2, 1, 1]


def test_a_restored_lease_still_claims_once_the_book_is_asked_again(node: Node) -> None:
    """A second crash before the records were read: the lease comes back once more."""
    before = snapshot(node.lease())
    twice = node.crash().crash()
    assert snapshot(twice.lease(count=None)) == before
    assert bodies(twice.consume()) == [b"m3", b"m4"]


def test_a_clean_stop_keeps_the_lease(node: Node) -> None:
    before = snapshot(node.lease())
    after = node.stop()
    assert snapshot(after.lease(count=None)) == before
    sink = after.consume()
    assert bodies(sink) == [b"m3", b"m4"], "written back at the stop, claimed when read"
    assert (after.channel.depth, after.channel.in_flight_count) == (0, 5)
    after.book.finish("a", after.clock.now)
    for msg in sink.got:
        after.channel.finish(sink.state, msg.id, after.clock.now)
    assert bodies(after.stop().consume()) == []


def test_empty_drops_the_leases(node: Node) -> None:
    node.lease()
    node.channel.empty(node.clock.now)
    after = node.crash()
    assert after.book.lease_count == 0
    publish(after.broker, after.clock, "t", b"new")
    assert bodies(after.consume()) == [b"new"]


def test_a_deleted_channel_takes_its_leases_along(node: Node) -> None:
    node.lease()
    topic = node.broker.topics["t"]
    node.broker.delete_channel(topic, "c")
    after = node.crash()  # the channel exists again (created anew): none of the old leases
    assert after.book.lease_count == 0 and after.book.get("a") is None


def test_a_lease_of_a_channel_gone_meanwhile_is_let_go(tmp_path: Path) -> None:
    clock = Clock()
    node = Node(tmp_path, clock)
    other = node.broker.get_channel(node.broker.topics["t"], "other", clock.now)
    publish(node.broker, clock, "t", b"x")
    LeaseBook.of(other).lease("o", 1, None, ttl=TTL, wait=0.0, now=clock.now)
    assert journal_holds(node.journal) == 2, "the SEAL and its message"
    after = node.crash()  # nsqd.dat lost "other": only t:c is created again
    assert journal_holds(after.journal) == 0


def test_a_seal_cut_short_is_not_restored(node: Node) -> None:
    node.lease()
    seal = Seal("t:c", "torn", 0, 10**9, 5, 0, 2)
    node.journal.queue.put([lease_records.encode_seal(seal)])  # and no message after it
    after = node.crash()
    assert after.book.get("torn") is None and after.book.get("a") is not None


def test_the_journal_lets_go_of_forgotten_leases(node: Node) -> None:
    node.lease()
    node.book.finish("a", node.clock.now)
    node.lease("b", count=1)
    node.book.requeue("b", 0.0, node.clock.now)
    assert journal_holds(node.journal) == 4 + 2 + 2, "SEALs, messages and CLOSEs"
    node.clock.now += TTL
    node.channel.process(node.clock.now)
    assert not node.book.closed
    assert journal_holds(node.journal) == 0, "a restart would read nothing back"
    after = node.crash()
    assert not after.book.closed and after.book.get("a") is None


def test_a_non_durable_channel_has_no_journal(tmp_path: Path) -> None:
    clock = Clock()
    broker = make_broker(clock, backends=disk_queues(tmp_path))
    channel = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    assert LeaseBook.of(channel).journal is None
    assert not list(tmp_path.glob(f"{QUEUE_NAME}*"))


def journal_holds(journal: LeaseJournal) -> int:
    """How many journal records a restart would read back now (its metadata's depth)."""
    queue = journal.queue
    queue.sync_now()
    meta = Path(queue.data_path, f"{QUEUE_NAME}.diskqueue.meta.dat").read_text()
    return int(meta.split("\n")[0])


# -- the records ---------------------------------------------------------------------------------


def test_records_round_trip() -> None:
    seal = Seal("topic:chan", "b17-p0", 1_700_000_000 * 10**9, 60 * 10**9, 500, 1 << 20, 3)
    close = Close("topic:chan", "b17-p0", REQUEUED, 1_700_000_060 * 10**9, 60 * 10**9)
    drop = Drop("t:c")
    for record, encode in (
        (seal, lease_records.encode_seal),
        (close, lease_records.encode_close),
        (drop, lease_records.encode_drop),
    ):
        data = encode(record)  # type: ignore[operator]
        assert len(data) >= 26 and lease_records.is_header(data)
        assert lease_records.decode(data) == record


@pytest.mark.parametrize(
    "data",
    [
        b"\x00" * 40,  # a message record
        lease_records.MAGIC + b"X" + b"\x00" * 30,  # an unknown kind
        lease_records.encode_seal(Seal("t:c", "a", 0, 0, 1, 0, 1))[:30],  # cut short
        lease_records.encode_close(Close("t:c", "a", FINISHED, 0, 0)).replace(b"CF", b"CZ"),
    ],
)
def test_bad_records_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        lease_records.decode(data)


def test_rebuilding_nsqd_dat_from_queue_files_passes_the_journal_by(node: Node) -> None:
    node.lease()
    assert list(node.path.glob(f"{QUEUE_NAME}.diskqueue.*.dat"))
    topics = metadata.recover_from_queue_files(str(node.path))
    assert [(t.name, [c.name for c in t.channels]) for t in topics] == [("t", ["c"])]

"""Channel and topic domain logic with an injected clock: no daemon, no sleeps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from nsqpy.nsqd.core.backend import Backend, DiskHooks
from nsqpy.nsqd.core.broker import Broker, BrokerConfig
from nsqpy.nsqd.core.channel import TURN, Channel
from nsqpy.nsqd.core.client import STATE_CLOSING, ClientState
from nsqpy.nsqd.core.errors import InFlightError, QueueFull, TooManyConsumers
from nsqpy.nsqd.core.message import Message
from nsqpy.nsqd.storage.diskqueue import DiskQueue


class Sink:
    """A client whose deliveries are recorded instead of written to a socket."""

    _ids = 0

    def __init__(self, msg_timeout: float = 60.0) -> None:
        Sink._ids += 1
        self.got: list[Message] = []
        self.attempts: list[int] = []  # attempts as they were at each delivery
        self.state = ClientState(Sink._ids, self._deliver, msg_timeout=msg_timeout)

    def _deliver(self, m: Message) -> None:
        self.got.append(m)
        self.attempts.append(m.attempts)


def make_channel(mem: int = 100, max_msg_timeout: float = 900.0, **kw: int) -> Channel:
    return Channel("t", "c", mem_queue_size=mem, max_msg_timeout=max_msg_timeout, **kw)


def msg(n: int) -> Message:
    return Message(b"%016x" % n, b"body%d" % n, 0)


def subscribe(ch: Channel, rdy: int, msg_timeout: float = 60.0, now: float = 0.0) -> Sink:
    sink = Sink(msg_timeout)
    ch.add_client(sink.state)
    ch.set_rdy(sink.state, rdy, now)
    return sink


def test_messages_wait_in_queue_until_a_client_is_ready() -> None:
    ch = make_channel()
    ch.put(msg(1), 0.0)
    sink = subscribe(ch, 0)
    assert ch.depth == 1 and sink.got == []
    ch.set_rdy(sink.state, 1, 0.0)
    assert [m.id for m in sink.got] == [msg(1).id]
    assert sink.got[0].attempts == 1
    assert ch.depth == 0 and ch.in_flight_count == 1


def test_rdy_is_a_window_not_a_counter() -> None:
    ch = make_channel()
    sink = subscribe(ch, 2)
    for n in range(5):
        ch.put(msg(n), 0.0)
    assert len(sink.got) == 2 and ch.depth == 3
    ch.finish(sink.state, sink.got[0].id, 0.0)
    assert len(sink.got) == 3  # one finished, one more delivered: window stays 2
    assert sink.state.rdy == 2


def test_messages_spread_round_robin_over_ready_clients() -> None:
    ch = make_channel()
    a, b = subscribe(ch, 10), subscribe(ch, 10)
    for n in range(10):
        ch.put(msg(n), 0.0)
    assert len(a.got) == 5 and len(b.got) == 5


def test_in_flight_timeout_requeues_and_counts() -> None:
    ch = make_channel()
    sink = subscribe(ch, 1, msg_timeout=60.0)
    ch.put(msg(1), 0.0)
    assert not ch.process(59.9)
    assert ch.process(60.0)
    assert ch.timeout_count == 1
    # redelivered to the same (only) client with attempts incremented
    assert sink.attempts == [1, 2]
    assert ch.in_flight_count == 1


def test_fin_errors() -> None:
    ch = make_channel()
    a, b = subscribe(ch, 1), subscribe(ch, 0)
    ch.put(msg(1), 0.0)
    with pytest.raises(InFlightError, match="client does not own message"):
        ch.finish(b.state, a.got[0].id, 0.0)
    with pytest.raises(InFlightError, match="ID not in flight"):
        ch.finish(a.state, b"f" * 16, 0.0)


def test_req_now_and_deferred() -> None:
    ch = make_channel()
    sink = subscribe(ch, 1)
    ch.put(msg(1), 0.0)
    ch.requeue(sink.state, sink.got[0].id, 0.0, 1.0)
    assert len(sink.got) == 2 and ch.requeue_count == 1 and sink.state.requeue_count == 1
    ch.requeue(sink.state, sink.got[1].id, 5.0, 2.0)
    assert ch.deferred_count == 1 and ch.in_flight_count == 0
    assert not ch.process(6.9)
    assert ch.process(7.0)
    assert len(sink.got) == 3 and sink.attempts == [1, 2, 3]


def test_touch_extends_but_is_capped_by_max_msg_timeout() -> None:
    ch = make_channel(max_msg_timeout=100.0)
    sink = subscribe(ch, 1, msg_timeout=60.0)
    ch.put(msg(1), 0.0)
    ch.touch(sink.state, sink.got[0].id, 50.0)  # deadline 110 -> capped at 100
    assert not ch.process(99.0)
    assert ch.process(100.0)
    assert ch.timeout_count == 1


def test_touch_moves_deadline_later() -> None:
    ch = make_channel()
    sink = subscribe(ch, 2, msg_timeout=10.0)
    ch.put(msg(1), 0.0)
    ch.put(msg(2), 1.0)
    ch.touch(sink.state, sink.got[0].id, 5.0)  # msg 1 now due at 15, msg 2 at 11
    ch.process(11.0)
    assert ch.timeout_count == 1
    assert sink.got[-1].id == msg(2).id


def test_disconnect_requeues_in_flight_at_once() -> None:
    ch = make_channel()
    a = subscribe(ch, 5)
    for n in range(3):
        ch.put(msg(n), 0.0)
    b = subscribe(ch, 0)
    assert ch.remove_client(a.state, 1.0) is False
    assert ch.in_flight_count == 0 and ch.depth == 3 and ch.timeout_count == 3
    ch.set_rdy(b.state, 10, 1.0)
    assert len(b.got) == 3


def test_ephemeral_channel_reports_last_client_gone() -> None:
    ch = Channel("t", "c#ephemeral", mem_queue_size=2, max_msg_timeout=900.0)
    sink = subscribe(ch, 0)
    for n in range(5):
        ch.put(msg(n), 0.0)
    assert ch.depth == 2  # overflow of an ephemeral channel is dropped, as in nsqd
    assert ch.remove_client(sink.state, 0.0) is True


def test_max_consumers() -> None:
    ch = make_channel(max_consumers=1)
    subscribe(ch, 0)
    with pytest.raises(TooManyConsumers, match="consumers for t:c exceeds limit of 1"):
        subscribe(ch, 0)


def test_pause_holds_messages_and_unpause_delivers() -> None:
    ch = make_channel()
    sink = subscribe(ch, 5)
    ch.pause()
    ch.put(msg(1), 0.0)
    assert sink.got == [] and ch.depth == 1
    ch.unpause(0.0)
    assert len(sink.got) == 1


def test_empty_drops_queued_in_flight_and_deferred() -> None:
    ch = make_channel()
    sink = subscribe(ch, 1)
    ch.put(msg(1), 0.0)
    ch.put(msg(2), 0.0)
    ch.put_deferred(msg(3), 10.0, 0.0)
    ch.empty(0.0)
    assert (ch.depth, ch.in_flight_count, ch.deferred_count) == (0, 0, 0)
    assert sink.state.in_flight == {}


def test_closing_client_ignores_rdy() -> None:
    ch = make_channel()
    sink = subscribe(ch, 0)
    sink.state.state = STATE_CLOSING
    ch.set_rdy(sink.state, 5, 0.0)
    ch.put(msg(1), 0.0)
    assert sink.got == []


def test_unwritable_client_gets_nothing_until_resumed() -> None:
    ch = make_channel()
    sink = subscribe(ch, 5)
    sink.state.writable = False
    ch.put(msg(1), 0.0)
    assert sink.got == [] and ch.depth == 1
    sink.state.writable = True
    ch.client_ready(sink.state, 0.0)
    assert len(sink.got) == 1


def test_sample_rate_drops_some_messages() -> None:
    ch = make_channel(mem=1000)
    sink = subscribe(ch, 1000)
    sink.state.sample_rate = 10
    for n in range(500):
        ch.put(msg(n), 0.0)
    assert 10 < len(sink.got) < 150
    assert ch.depth == 0


# -- topics through the broker -------------------------------------------------------------
NOW_NS = 1_700_000_000_000_000_000


def broker(mem: int = 100) -> Broker:
    return Broker(BrokerConfig(node_id=1, mem_queue_size=mem))


def publish(b: Broker, topic: str, *bodies: bytes, defer: float = 0.0) -> None:
    ids = b.guid.new_ids(len(bodies), NOW_NS)
    b.get_topic(topic).put(list(bodies), ids, NOW_NS, 0.0, defer)


def test_topic_holds_messages_until_first_channel() -> None:
    b = broker()
    publish(b, "t", b"a", b"b")
    topic = b.topics["t"]
    assert topic.depth == 2 and topic.message_count == 2 and topic.message_bytes == 2
    ch = b.get_channel(topic, "c", 0.0)
    assert topic.depth == 0 and ch.depth == 2


def test_every_channel_gets_a_copy() -> None:
    b = broker()
    topic = b.get_topic("t")
    c1, c2 = b.get_channel(topic, "c1", 0.0), b.get_channel(topic, "c2", 0.0)
    publish(b, "t", b"x")
    assert c1.depth == 1 and c2.depth == 1
    assert c1.queue[0] is c2.queue[0]  # queued entries are immutable and shared
    s1, s2 = subscribe(c1, 1), subscribe(c2, 1)
    (m1,), (m2,) = s1.got, s2.got
    assert m1 is not m2  # each channel delivers (and counts attempts on) its own message
    assert m1.id == m2.id and m1.body is m2.body


def test_full_queue_refuses_whole_batch_and_drops_nothing() -> None:
    b = broker(mem=3)
    topic = b.get_topic("t")
    ch = b.get_channel(topic, "c", 0.0)
    publish(b, "t", b"1", b"2")
    with pytest.raises(QueueFull):
        publish(b, "t", b"3", b"4")
    assert ch.depth == 2 and topic.message_count == 2


def test_deferred_publish_goes_to_deferred_queue() -> None:
    b = broker()
    topic = b.get_topic("t")
    ch = b.get_channel(topic, "c", 0.0)
    publish(b, "t", b"later", defer=5.0)
    assert ch.deferred_count == 1 and ch.depth == 0 and ch.message_count == 1
    ch.process(5.0)
    assert ch.depth == 1


def test_ephemeral_topic_goes_with_its_last_channel() -> None:
    b = broker()
    topic = b.get_topic("t#ephemeral")
    ch = b.get_channel(topic, "c#ephemeral", 0.0)
    sink = Sink()
    ch.add_client(sink.state)
    b.remove_client(sink.state, 0.0)
    assert "t#ephemeral" not in b.topics


def test_delete_topic_returns_clients_and_notifies() -> None:
    b = broker()
    events: list[tuple[str, str, str]] = []
    b.listeners.append(lambda *e: events.append(e))
    topic = b.get_topic("t")
    ch = b.get_channel(topic, "c", 0.0)
    sink = Sink()
    ch.add_client(sink.state)
    assert b.delete_topic("t") == [sink.state]
    assert events == [
        ("topic_created", "t", ""),
        ("channel_created", "t", "c"),
        ("channel_deleted", "t", "c"),
        ("topic_deleted", "t", ""),
    ]


def test_guid_unique_and_increasing_even_past_4096_per_tick() -> None:
    b = broker()
    ids = b.guid.new_ids(10000, NOW_NS) + b.guid.new_ids(5, NOW_NS)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(i) == 16 for i in ids)


def test_guid_layout_matches_nsqd() -> None:
    """((ts - epoch) << 22) | (node << 12) | sequence, as 16 hex digits."""
    from nsqpy.nsqd.core.guid import EPOCH, GuidFactory

    now_ns = NOW_NS
    first, second = GuidFactory(5).new_ids(2, now_ns)
    expected = ((now_ns >> 20) - EPOCH) << 22 | 5 << 12
    assert first == b"%016x" % expected
    assert second == b"%016x" % (expected + 1)


def test_held_messages_keep_their_deferral_when_a_channel_appears() -> None:
    b = broker()
    publish(b, "t", b"now")
    publish(b, "t", b"later", defer=5.0)
    ch = b.get_channel(b.topics["t"], "c", 0.0)
    assert ch.depth == 1 and ch.deferred_count == 1 and ch.message_count == 2


def test_backlog_keeps_flowing_after_a_full_transport_listed_the_client() -> None:
    """A write that fills the transport lists the client as ready; once resume_writing has
    filled its window that listing is stale, and answers must still pour the backlog."""
    ch = make_channel(mem=1000)
    sink = subscribe(ch, 0)
    window = TURN + 10
    for n in range(window + 30):
        ch.put(msg(n), 0.0)
    runs: list[int] = []

    def deliver_until_full(msgs: list[Message]) -> None:
        for m in msgs:
            sink._deliver(m)
        runs.append(len(msgs))
        if len(runs) == 1:
            sink.state.writable = False  # the transport's buffer crossed its high-water mark

    sink.state.write_messages = deliver_until_full
    ch.set_rdy(sink.state, window, 0.0)
    # the first run (TURN messages) filled the transport: no more until it drains
    assert runs == [TURN] and sink.state.in_ready
    sink.state.writable = True  # resume_writing
    ch.client_ready(sink.state, 0.0)
    assert len(sink.got) == window  # window full, listing now stale
    for m in list(sink.got[:10]):
        ch.finish(sink.state, m.id, 0.0)
    assert len(sink.got) == window + 10
    ch.finish_many(sink.state, [m.id for m in sink.got[10:30]], 0.0)
    assert len(sink.got) == window + 30 and ch.depth == 0


def test_a_backlog_goes_out_in_runs_of_at_most_turn() -> None:
    ch = make_channel(mem=1000)
    sink = subscribe(ch, 0)
    for n in range(600):
        ch.put(msg(n), 0.0)
    runs: list[int] = []

    def record(msgs: list[Message]) -> None:
        runs.append(len(msgs))
        for m in msgs:
            sink._deliver(m)

    sink.state.write_messages = record
    ch.set_rdy(sink.state, 550, 0.0)
    assert runs == [TURN, TURN, 550 - 2 * TURN]
    assert [m.id for m in sink.got] == [msg(n).id for n in range(550)]  # in order
    assert ch.depth == 50 and ch.in_flight_count == 550


# -- a disk backlog, read back in batches ----------------------------------------------------
class CountingHooks(DiskHooks):
    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self.touches = 0

    def touched(self, backend: Backend) -> None:
        self.touches += 1


class CountingQueue(DiskQueue):
    def __init__(self, path: Path, durable: bool) -> None:
        super().__init__(
            "t", str(path), max_bytes_per_file=4096, max_record_size=1024,
            sync_every=1 << 30, track_acks=durable, log=logging.getLogger("test"),
        )
        self.batches = 0

    def read_many(self, limit: int) -> tuple[list[bytes], range]:
        self.batches += 1
        return super().read_many(limit)


@pytest.mark.parametrize("durable", [False, True])
def test_a_disk_backlog_is_delivered_in_order_exactly_once(tmp_path: Path, durable: bool) -> None:
    backend = CountingQueue(tmp_path, durable)
    hooks = CountingHooks(durable)
    ch = Channel("t", "c", mem_queue_size=10, max_msg_timeout=900.0, backend=backend, hooks=hooks)
    total = 3000
    for start in range(0, total, 200):
        ch.put_many([msg(n) for n in range(start, start + 200)], 0.0)
    assert ch.depth == total and backend.depth == (total if durable else total - 10)
    sink = subscribe(ch, 250)
    fin_runs = 0
    while True:
        ids = list(sink.state.in_flight)
        if not ids:
            break
        assert len(ids) <= 250
        assert ch.finish_many(sink.state, ids, 0.0) == []
        fin_runs += 1
    assert [m.id for m in sink.got] == [b"%016x" % n for n in range(total)]
    assert sink.attempts == [1] * total
    assert ch.depth == 0 and backend.depth == 0 and ch.in_flight_count == 0
    # one disk read and one position report per window, not one per message
    assert 0 < backend.batches <= 2 * total // 250
    # durable: + one per run of FINs (its records finished in one call), not one per FIN
    assert hooks.touches == backend.batches + (fin_runs if durable else 0)
    backend.sync_now()
    backend.close()
    again = CountingQueue(tmp_path, durable)
    assert again.depth == 0 and again.read() is None  # durable: every record finished on FIN
    again.close()


class HoldingHooks(DiskHooks):
    """A durable store whose commit waits (as the linger makes it) until the test ends it."""

    durable = True

    def __init__(self) -> None:
        self.hold = True
        self.waiting: list[Callable[[float], None]] = []

    def holding(self) -> bool:
        return self.hold

    def after_hold(self, callback: Callable[[float], None]) -> None:
        self.waiting.append(callback)

    def end_hold(self, now: float) -> None:
        self.hold = False
        callbacks, self.waiting = self.waiting, []
        for callback in callbacks:
            callback(now)


def held_channel(tmp_path: Path) -> tuple[Channel, CountingQueue, HoldingHooks]:
    backend, hooks = CountingQueue(tmp_path, True), HoldingHooks()
    ch = Channel("t", "c", mem_queue_size=0, max_msg_timeout=900.0, backend=backend, hooks=hooks)
    return ch, backend, hooks


def test_a_durable_batch_whose_commit_is_held_goes_out_when_the_hold_ends(tmp_path: Path) -> None:
    """While another publisher's write is awaited, the taken messages wait with the commit:
    counted in depth, in order, handed out (with their tokens) once the hold ends."""
    ch, backend, hooks = held_channel(tmp_path)
    sink = subscribe(ch, 250)
    ch.put_many([msg(n) for n in range(100)], 1.0)
    ch.put_many([msg(n) for n in range(100, 200)], 1.0)
    assert sink.got == [] and ch.in_flight_count == 0
    assert ch.depth == 200 and backend.depth == 0  # taken off the disk queue, held in memory
    assert len(hooks.waiting) == 1  # one call back for the hold, not one per batch
    hooks.end_hold(2.0)
    assert [m.id for m in sink.got] == [msg(n).id for n in range(200)]
    assert all(m.deadline == 62.0 for m in sink.got)  # delivered at the hold's end
    assert ch.depth == 0 and ch.in_flight_count == 200
    ch.put_many([msg(200)], 3.0)  # nothing held: out at once
    assert sink.got[-1].id == msg(200).id and not hooks.waiting
    assert ch.finish_many(sink.state, [m.id for m in sink.got], 4.0) == []
    backend.sync_now()
    backend.close()
    again = CountingQueue(tmp_path, True)
    assert again.depth == 0  # every token finished its record
    again.close()


def test_a_hold_takes_no_more_than_the_window_and_the_rest_follows_in_order(
    tmp_path: Path,
) -> None:
    ch, backend, hooks = held_channel(tmp_path)
    sink = subscribe(ch, 150)
    ch.put_many([msg(n) for n in range(100)], 1.0)
    ch.put_many([msg(n) for n in range(100, 200)], 1.0)  # room for 50 besides the 100 held
    assert ch.depth == 200 and backend.depth == 50
    hooks.end_hold(2.0)
    assert [m.id for m in sink.got] == [msg(n).id for n in range(150)]
    assert ch.finish_many(sink.state, [m.id for m in sink.got], 3.0) == []
    assert [m.id for m in sink.got[150:]] == [msg(n).id for n in range(150, 200)]  # from disk
    assert ch.depth == 0
    backend.close()


def test_held_messages_of_a_channel_deleted_meanwhile_stay_on_disk(tmp_path: Path) -> None:
    ch, backend, hooks = held_channel(tmp_path)
    sink = subscribe(ch, 250)
    ch.put_many([msg(n) for n in range(10)], 1.0)
    ch.exiting = True
    hooks.end_hold(2.0)
    assert sink.got == []
    backend.sync_now()
    backend.close()
    again = CountingQueue(tmp_path, True)
    assert again.depth == 10  # unfinished: read again on a restart
    again.close()


def _entries(n: int) -> list[tuple[bytes, bytes, int]]:
    return [(b"%016x" % k, b"body%d" % k, 1000 + k) for k in range(n)]


def test_a_published_batch_is_shared_out_in_runs_among_ready_clients() -> None:
    """A batch goes out in runs, one per client turn: an equal share of what is left, as
    far as the client's window has room (one write call per run, not per message)."""
    ch = make_channel(mem=1000)
    a, b = subscribe(ch, 2500), subscribe(ch, 2500)
    batch = _entries(200)
    ch.put_many(batch, 1.0)
    assert [m.id for m in a.got] == [e[0] for e in batch[:100]]
    assert [m.id for m in b.got] == [e[0] for e in batch[100:]]
    assert ch.in_flight_count == 200 and ch.depth == 0
    assert all(m.attempts == 1 and m.deadline == 61.0 for m in a.got + b.got)


def test_a_run_stops_at_the_clients_window_and_the_rest_goes_to_the_others() -> None:
    ch = make_channel(mem=1000)
    small, big = subscribe(ch, 10), subscribe(ch, 2500)
    batch = _entries(200)
    ch.put_many(batch, 1.0)
    assert [m.id for m in small.got] == [e[0] for e in batch[:10]]
    assert [m.id for m in big.got] == [e[0] for e in batch[10:]]
    assert not small.state.in_ready  # its window is full: out of the ready rotation


def test_one_message_at_a_time_still_goes_round_the_ready_clients() -> None:
    ch = make_channel(mem=1000)
    sinks = [subscribe(ch, 100) for _ in range(3)]
    for entry in _entries(6):
        ch.put_many([entry], 1.0)
    assert [len(s.got) for s in sinks] == [2, 2, 2]

"""Dead letters, TTL and redrive in the broker domain, with injected clocks: no daemon."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from test_channel import Sink

from nsqpy._internal.duration import SECOND
from nsqpy.nsqd.core.backend import DiskHooks
from nsqpy.nsqd.core.broker import Broker, BrokerConfig
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.message import DeadLetter, Message, materialize
from nsqpy.nsqd.core.policy import NodeDefaults
from nsqpy.nsqd.core.redrive import Redrive
from nsqpy.nsqd.core.topic import Topic
from nsqpy.nsqd.options import NsqdOptions
from nsqpy.nsqd.storage.diskqueue import DiskQueue

T0 = 1_700_000_000 * SECOND


class Clock:
    """Wall-clock ns for message timestamps and TTL; ``now`` is the loop's monotonic time."""

    def __init__(self) -> None:
        self.wall = T0
        self.now = 0.0

    def __call__(self) -> int:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.wall += int(seconds * SECOND)
        self.now += seconds


def make_broker(
    clock: Clock,
    mem: int = 100,
    *,
    backends: Callable[[str], DiskQueue] | None = None,
    hooks: DiskHooks | None = None,
    **policy: object,
) -> Broker:
    config = BrokerConfig(mem_queue_size=mem, policy=NodeDefaults(**policy))  # type: ignore[arg-type]
    return Broker(config, backends=backends, hooks=hooks, wall_ns=clock)


def publish(broker: Broker, clock: Clock, topic: str, *bodies: bytes) -> None:
    ids = broker.guid.new_ids(len(bodies), clock.wall)
    broker.get_topic(topic).put(list(bodies), ids, clock.wall, clock.now)


def subscribe(broker: Broker, topic: str, channel: str, rdy: int, clock: Clock) -> Sink:
    ch = broker.get_channel(broker.get_topic(topic), channel, clock.now)
    sink = Sink(msg_timeout=60.0)
    ch.add_client(sink.state)
    ch.set_rdy(sink.state, rdy, clock.now)
    return sink


def channel(broker: Broker, topic: str, name: str) -> Channel:
    return broker.topics[topic].channels[name]


def held(topic: Topic) -> list[Message]:
    """What a topic holds in memory, as messages."""
    return [materialize(item) for item in topic.queue]


# -- attempts --------------------------------------------------------------------------------


def test_attempts_count_across_req_and_timeout() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=3)
    sink = subscribe(broker, "orders", "billing", 1, clock)
    ch = channel(broker, "orders", "billing")
    publish(broker, clock, "orders", b"pay")
    original = sink.got[-1]
    assert sink.attempts == [1]
    ch.requeue(sink.state, original.id, 0.0, clock.now)  # REQ
    assert sink.attempts == [1, 2]
    clock.advance(60)
    ch.process(clock.now)  # the in-flight timeout
    assert sink.attempts == [1, 2, 3]
    ch.requeue(sink.state, original.id, 0.0, clock.now)
    assert sink.attempts == [1, 2, 3], "a 4th delivery is past max_attempts"
    assert (ch.dead_letter_count, ch.expired_count, ch.requeue_count) == (1, 0, 2)
    assert ch.depth == 0 and ch.in_flight_count == 0
    assert not broker.topics.get("orders.dead"), "moved only when the broker flushes"
    assert broker.flush_dead_letters(clock.now, clock.wall) == 1
    (letter,) = held(broker.topics["orders.dead"])
    assert isinstance(letter, DeadLetter) and letter.origin == "orders:billing"
    assert letter.body == b"pay" and letter.attempts == 0
    assert letter.id != original.id and letter.timestamp == clock.wall
    assert broker.topics["orders.dead"].message_count == 1


def test_out_of_attempts_req_with_a_delay_dead_letters_at_once() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    sink = subscribe(broker, "t", "c", 1, clock)
    publish(broker, clock, "t", b"x")
    ch = channel(broker, "t", "c")
    ch.requeue(sink.state, sink.got[0].id, 30.0, clock.now)
    assert ch.deferred_count == 0 and ch.dead_letter_count == 1


def test_a_lowered_limit_applies_to_messages_already_requeued() -> None:
    clock = Clock()
    broker = make_broker(clock)
    sink = subscribe(broker, "t", "c", 1, clock)
    ch = channel(broker, "t", "c")
    publish(broker, clock, "t", b"x")
    ch.requeue(sink.state, sink.got[0].id, 0.0, clock.now)
    ch.requeue(sink.state, sink.got[0].id, 0.0, clock.now)
    assert sink.attempts == [1, 2, 3]
    ch.set_rdy(sink.state, 0, clock.now)
    ch.requeue(sink.state, sink.got[0].id, 0.0, clock.now)  # waits in the queue: attempts 3
    broker.set_channel_settings(ch, {"max_attempts": 2})
    ch.set_rdy(sink.state, 1, clock.now)
    assert sink.attempts == [1, 2, 3] and ch.dead_letter_count == 1


def test_a_disconnect_counts_like_a_timeout() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    sink = subscribe(broker, "t", "c", 1, clock)
    publish(broker, clock, "t", b"x")
    broker.remove_client(sink.state, clock.now)
    assert channel(broker, "t", "c").dead_letter_count == 1


def test_each_channel_counts_its_own_attempts_and_letters_get_their_own_ids() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    a = subscribe(broker, "t", "a", 1, clock)
    b = subscribe(broker, "t", "b", 1, clock)
    publish(broker, clock, "t", b"x")
    channel(broker, "t", "a").requeue(a.state, a.got[0].id, 0.0, clock.now)
    channel(broker, "t", "b").requeue(b.state, b.got[0].id, 0.0, clock.now)
    broker.flush_dead_letters(clock.now, clock.wall)
    letters = held(broker.topics["t.dead"])
    assert sorted(m.origin for m in letters) == ["t:a", "t:b"]
    assert len({m.id for m in letters}) == 2


# -- the defer limit -----------------------------------------------------------------------------

HOUR = 3600 * SECOND


def test_the_defer_limit_is_separate_from_the_req_clamp() -> None:
    opts = NsqdOptions(max_req_timeout=HOUR, max_defer_timeout=24 * HOUR)
    assert opts.defer_allowed(0) and opts.defer_allowed(24 * HOUR)
    assert not opts.defer_allowed(24 * HOUR + 1) and not opts.defer_allowed(-1)
    assert opts.req_delay(24 * HOUR) == HOUR and opts.req_delay(-5) == 0
    assert not NsqdOptions(max_req_timeout=HOUR).defer_allowed(HOUR + 1)  # unset: REQ's limit

    clock = Clock()
    broker = make_broker(clock)
    sink = subscribe(broker, "jobs", "worker", 2, clock)
    ch = channel(broker, "jobs", "worker")
    ids = broker.guid.new_ids(1, clock.wall)
    broker.get_topic("jobs").put([b"tomorrow"], ids, clock.wall, clock.now, defer=24 * 3600.0)
    publish(broker, clock, "jobs", b"now")
    first = sink.got[-1]
    ch.requeue(sink.state, first.id, opts.req_delay(24 * HOUR) / SECOND, clock.now)
    clock.advance(3600)
    ch.process(clock.now)
    assert [m.body for m in sink.got] == [b"now", b"now"]  # the REQ was clamped to an hour
    ch.finish(sink.state, first.id, clock.now)
    clock.advance(23 * 3600 - 0.01)
    ch.process(clock.now)
    assert len(sink.got) == 2 and ch.deferred_count == 1  # the DPUB keeps its whole day
    clock.advance(0.02)
    ch.process(clock.now)
    assert [m.body for m in sink.got][2:] == [b"tomorrow"]


# -- TTL ---------------------------------------------------------------------------------------


def test_ttl_at_the_edge() -> None:
    clock = Clock()
    broker = make_broker(clock, message_ttl=10 * SECOND)
    sink = subscribe(broker, "t", "c", 0, clock)
    ch = channel(broker, "t", "c")
    publish(broker, clock, "t", b"old", b"older")
    clock.wall += 10 * SECOND  # exactly the TTL: still deliverable
    ch.set_rdy(sink.state, 1, clock.now)
    assert [m.body for m in sink.got] == [b"old"]
    clock.wall += 1  # one ns past it
    ch.finish(sink.state, sink.got[0].id, clock.now)
    assert [m.body for m in sink.got] == [b"old"]
    assert ch.expired_count == 1 and ch.dead_letter_count == 0 and ch.depth == 0
    assert not broker.pending, "no dead-letter topic: dropped"


def test_expired_messages_go_to_a_dead_letter_topic_when_there_is_one() -> None:
    clock = Clock()
    broker = make_broker(clock, message_ttl=SECOND)
    ch = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    broker.set_channel_settings(ch, {"dead_letter_topic": "t.expired"})
    publish(broker, clock, "t", b"x")
    clock.advance(2)
    subscribe(broker, "t", "c", 5, clock)
    assert (ch.expired_count, ch.dead_letter_count) == (1, 1)
    broker.flush_dead_letters(clock.now, clock.wall)
    assert [m.origin for m in held(broker.topics["t.expired"])] == ["t:c"]


def test_a_message_held_at_the_topic_expires_once_a_channel_takes_it() -> None:
    clock = Clock()
    broker = make_broker(clock, message_ttl=SECOND)
    publish(broker, clock, "t", b"x")  # no channel yet: the topic holds it
    clock.advance(5)
    sink = subscribe(broker, "t", "c", 1, clock)
    assert sink.got == [] and channel(broker, "t", "c").expired_count == 1


def test_sweep_expires_while_the_channel_is_paused() -> None:
    clock = Clock()
    broker = make_broker(clock, message_ttl=SECOND)
    sink = subscribe(broker, "t", "c", 10, clock)
    ch = channel(broker, "t", "c")
    ch.pause()
    publish(broker, clock, "t", b"a", b"b")
    clock.advance(0.5)
    publish(broker, clock, "t", b"c")
    assert ch.depth == 3
    clock.advance(0.6)  # a and b are 1.1s old, c 0.6s
    assert ch.process(clock.now)
    assert ch.depth == 1 and ch.expired_count == 2
    assert not ch.process(clock.now), "nothing else has expired"
    ch.unpause(clock.now)
    assert [m.body for m in sink.got] == [b"c"]


def test_sweep_looks_at_the_disk_head_too(tmp_path: Path) -> None:
    clock = Clock()
    broker = make_broker(clock, mem=1, backends=disk_queues(tmp_path), message_ttl=SECOND)
    ch = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    publish(broker, clock, "t", b"a", b"b", b"c")  # one in memory, two on disk
    assert ch.backend_depth == 2
    clock.advance(2)
    ch.process(clock.now)
    assert ch.expired_count == 3 and ch.depth == 0


def test_topic_ttl_is_the_default_for_its_channels_and_the_channel_can_opt_out() -> None:
    clock = Clock()
    broker = make_broker(clock)
    topic = broker.get_topic("t")
    broker.set_topic_settings(topic, {"message_ttl": SECOND})
    keeper = broker.get_channel(topic, "keeper", clock.now)
    broker.set_channel_settings(keeper, {"message_ttl": 0})
    other = broker.get_channel(topic, "other", clock.now)
    assert (other.message_ttl, keeper.message_ttl) == (SECOND, 0)
    publish(broker, clock, "t", b"x")
    clock.advance(2)
    assert other.process(clock.now) and not keeper.process(clock.now)
    assert keeper.depth == 1 and other.depth == 0


# -- the policy and its defaults -----------------------------------------------------------------


def test_off_by_default_and_nothing_shows() -> None:
    clock = Clock()
    broker = make_broker(clock)
    ch = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    assert not ch.policed and not ch.shows_policy


def test_dead_letter_topics_are_not_policed_by_node_defaults() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=2, message_ttl=SECOND)
    assert broker.get_channel(broker.get_topic("t"), "c", clock.now).policed
    assert not broker.get_channel(broker.get_topic("t.dead"), "c", clock.now).policed
    # a topic named as a dead-letter topic by a setting is one too
    source = broker.get_topic("s")
    broker.set_topic_settings(source, {"dead_letter_topic": "failures"})
    assert not broker.get_channel(broker.get_topic("failures"), "c", clock.now).policed


def test_refused_settings_change_nothing() -> None:
    from nsqpy.nsqd.core.policy import SettingsError

    clock = Clock()
    broker = make_broker(clock)
    long_topic = broker.get_topic("x" * 62)
    ch = broker.get_channel(long_topic, "c", clock.now)
    with pytest.raises(SettingsError, match="INVALID_DEAD_LETTER_TOPIC"):
        broker.set_channel_settings(ch, {"max_attempts": 3})
    with pytest.raises(SettingsError, match="INVALID_DEAD_LETTER_TOPIC"):
        broker.set_topic_settings(long_topic, {"max_attempts": 3})
    assert ch.settings.empty and long_topic.settings.empty and not ch.policed
    broker.set_channel_settings(ch, {"max_attempts": 3, "dead_letter_topic": "long.dead"})
    assert ch.policed and ch.dead_letter_topic == "long.dead"


def test_a_dead_letter_topic_refusing_letters_gets_them_again_later() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    sink = subscribe(broker, "t", "c", 1, clock)
    publish(broker, clock, "t", b"x")
    ch = channel(broker, "t", "c")
    ch.requeue(sink.state, sink.got[0].id, 0.0, clock.now)
    broker.get_topic("t.dead").exiting = True  # refuses with "exiting"
    assert broker.flush_dead_letters(clock.now, clock.wall) == 0
    assert ch.deferred_count == 1, "held back, not lost"
    broker.topics["t.dead"].exiting = False
    clock.advance(1.5)
    ch.process(clock.now)  # due again: diverted again
    assert broker.flush_dead_letters(clock.now, clock.wall) == 1
    assert len(held(broker.topics["t.dead"])) == 1


# -- durable: the source record goes only once the letter is committed --------------------------


class ManualCommits(DiskHooks):
    """Durable hooks whose commit rounds the test completes by hand."""

    durable = True

    def __init__(self) -> None:
        self.waiting: list[Callable[[bool], None]] = []

    def after_commit(self, callback: Callable[[bool], None]) -> None:
        self.waiting.append(callback)

    def commit(self, ok: bool = True) -> None:
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback(ok)


def disk_queues(tmp_path: Path, *, acks: bool = False) -> Callable[[str], DiskQueue]:
    def open_queue(name: str) -> DiskQueue:
        return DiskQueue(
            name, str(tmp_path), max_bytes_per_file=1 << 20, max_record_size=1 << 16,
            sync_every=1 << 30, track_acks=acks, log=logging.getLogger("test"),
        )  # fmt: skip

    return open_queue


def read_position(ch: Channel, tmp_path: Path) -> str:
    """The read position a restart would start from (the oldest unfinished record)."""
    assert isinstance(ch.backend, DiskQueue)
    ch.backend.sync_now()
    meta = (tmp_path / f"{ch.topic_name}:{ch.name}.diskqueue.meta.dat").read_text()
    return meta.split("\n")[1]


def dead_letter_durably(tmp_path: Path) -> tuple[Broker, Channel, ManualCommits]:
    """A durable max_attempts=1 channel whose one message has just been dead-lettered, with
    the commit of the letter's write still to come."""
    clock = Clock()
    hooks = ManualCommits()
    broker = make_broker(
        clock, backends=disk_queues(tmp_path, acks=True), hooks=hooks, max_attempts=1
    )
    ch = broker.get_channel(broker.get_topic("t"), "c", clock.now)
    publish(broker, clock, "t", b"x")
    sink = subscribe(broker, "t", "c", 1, clock)
    assert sink.got[0].token >= 0
    ch.requeue(sink.state, sink.got[0].id, 0.0, clock.now)
    broker.flush_dead_letters(clock.now, clock.wall)
    return broker, ch, hooks


def test_durable_source_record_is_released_only_after_the_commit(tmp_path: Path) -> None:
    broker, ch, hooks = dead_letter_durably(tmp_path)
    assert read_position(ch, tmp_path) == "0,0", "the record is still unfinished"
    hooks.commit()
    assert read_position(ch, tmp_path) != "0,0"
    dead = broker.topics["t.dead"]
    assert dead.backend_depth == 1, "durable: the letter is on disk"


def test_a_failed_commit_keeps_the_source_record(tmp_path: Path) -> None:
    _, ch, hooks = dead_letter_durably(tmp_path)
    hooks.commit(ok=False)
    assert read_position(ch, tmp_path) == "0,0"


# -- redrive ---------------------------------------------------------------------------------------


def two_channels_with_letters(clock: Clock, broker: Broker) -> tuple[Sink, Sink]:
    a = subscribe(broker, "t", "a", 10, clock)
    b = subscribe(broker, "t", "b", 10, clock)
    publish(broker, clock, "t", b"one", b"two")
    for name, sink in (("a", a), ("b", b)):
        for msg in list(sink.got):
            channel(broker, "t", name).requeue(sink.state, msg.id, 0.0, clock.now)
    broker.flush_dead_letters(clock.now, clock.wall)
    return a, b


def run(job: Redrive, clock: Clock, limit: int = 1000) -> Redrive:
    steps = 0
    while job.step(clock.now, clock.wall, limit):
        steps += 1
        assert steps < 10_000
    return job


def test_redrive_one_channel_then_the_rest() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    a, b = two_channels_with_letters(clock, broker)
    dead = broker.topics["t.dead"]
    assert len(dead.queue) == 4
    a.got.clear()
    b.got.clear()
    job = run(Redrive(broker, dead, "t:a"), clock)
    assert (job.redriven, job.kept) == (2, 2)
    assert sorted(m.body for m in a.got) == [b"one", b"two"] and b.got == []
    assert all(m.attempts == 1 for m in a.got), "fresh: attempts start again"
    assert all(m.timestamp == clock.wall for m in a.got)
    assert [m.origin for m in held(dead)] == ["t:b", "t:b"]
    job = run(Redrive(broker, dead), clock)
    assert (job.redriven, job.kept) == (2, 0)
    assert sorted(m.body for m in b.got) == [b"one", b"two"] and not dead.queue


def test_redrive_in_small_batches_from_disk(tmp_path: Path) -> None:
    clock = Clock()
    broker = make_broker(clock, mem=1, backends=disk_queues(tmp_path), max_attempts=1)
    a, _ = two_channels_with_letters(clock, broker)
    dead = broker.topics["t.dead"]
    assert len(dead.queue) == 1 and dead.backend_depth == 3
    a.got.clear()
    job = run(Redrive(broker, dead, "t:a"), clock, limit=1)
    assert job.redriven == 2 and job.kept == 2
    assert sorted(m.body for m in a.got) == [b"one", b"two"]
    assert dead.depth == 2


def test_redrive_moves_a_message_once_when_letter_channels_hold_copies() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    dead = broker.get_topic("t.dead")
    broker.get_channel(dead, "inspect", clock.now)
    broker.get_channel(dead, "audit", clock.now)
    a = subscribe(broker, "t", "a", 10, clock)
    publish(broker, clock, "t", b"x")
    channel(broker, "t", "a").requeue(a.state, a.got[0].id, 0.0, clock.now)
    broker.flush_dead_letters(clock.now, clock.wall)
    assert [len(c.queue) for c in dead.channels.values()] == [1, 1]
    a.got.clear()
    job = run(Redrive(broker, dead), clock)
    assert job.redriven == 1 and [m.body for m in a.got] == [b"x"]
    assert all(not c.queue for c in dead.channels.values())


def test_letters_whose_channel_is_gone_stay() -> None:
    clock = Clock()
    broker = make_broker(clock, max_attempts=1)
    two_channels_with_letters(clock, broker)
    broker.delete_channel(broker.topics["t"], "b")
    job = run(Redrive(broker, broker.topics["t.dead"]), clock)
    assert (job.redriven, job.kept) == (2, 2)
    assert [m.origin for m in held(broker.topics["t.dead"])] == ["t:b", "t:b"]


def test_plain_messages_in_a_dead_letter_topic_stay() -> None:
    clock = Clock()
    broker = make_broker(clock)
    publish(broker, clock, "t.dead", b"published by hand")
    job = run(Redrive(broker, broker.topics["t.dead"]), clock)
    assert (job.redriven, job.kept) == (0, 1)
    assert broker.topics["t.dead"].depth == 1

"""DiskStore's group commit in durable mode: overlapping sync rounds, answered in order.

The fsync workers are swapped for a gated one the test opens, so the order in which rounds
end is the test's choice; the queue is a real disk queue.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import NsqdFactory, wait_for
from v2client import RawV2

from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.storage import fsyncers, persistence
from nsqpy.nsqd.storage.diskqueue import DiskQueue, SyncJob
from nsqpy.protocol.commands import mpub_body


class Gates:
    """Stands in for ``fsyncers.serve``: the requests of round n (ids count from 1) are
    synced once gate n opens and then answered as failed with ``errors[n]`` (an errno; 0: as
    it went). A round may come as several requests (a new segment's directory goes apart)."""

    def __init__(self) -> None:
        self.gates = [threading.Event() for _ in range(4)]
        self.errors = [0] * 4
        self.seen: set[int] = set()
        self.finished: list[int] = []
        self.lock = threading.Lock()

    @property
    def started(self) -> int:
        return len(self.seen)

    def serve(self, work: int, done: int, bell: int, ready: bytearray) -> None:
        size = fsyncers.REQUEST_INTS * 4
        while os.read(bell, 8) and len(data := os.read(work, size)) == size:
            fields = fsyncers._REQUEST.unpack(data)
            if fields[0] == 0:
                return
            n = fields[0] - 1
            with self.lock:
                self.seen.add(n)
            assert self.gates[n].wait(10)
            failed = fsyncers.sync_all(fields[2 : 2 + fields[1]]) or self.errors[n]
            with self.lock:
                self.finished.append(n)
            os.write(done, fsyncers._ANSWER.pack(fields[0], failed))
            ready[0] = 1


@pytest.fixture
def gates(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gates]:
    g = Gates()
    monkeypatch.setattr(fsyncers, "serve", g.serve)
    yield g
    for gate in g.gates:
        gate.set()


async def start(
    tmp_path: Path,
    sync_every: int = 1000,
    *,
    sync_timeout: float = 60.0,
    position_gap: float = persistence.POSITION_GAP,
    commit_linger: float = 0.0,
) -> tuple[persistence.DiskStore, DiskQueue, list[str]]:
    store = persistence.DiskStore(
        asyncio.get_running_loop(),
        str(tmp_path),
        max_bytes_per_file=1 << 20,
        max_msg_size=1024,
        sync_every=sync_every,
        sync_timeout=sync_timeout,
        durable=True,
        set_health=lambda _: None,
        position_gap=position_gap,
        commit_linger=commit_linger,
    )
    return store, store.open_queue("t"), []


def due_back(store: persistence.DiskStore, key: int, at: float | None = None) -> None:
    """Publisher ``key``: once answered and back 0.1 ms later, then answered again at ``at``
    (now by default): a quick publisher, due back."""
    now = store.loop.time()
    store.publisher_answered(key, now - 10.0)
    store.publisher_heard(key, now - 10.0 + 0.0001)
    store.publisher_answered(key, now if at is None else at)


def publish(store: persistence.DiskStore, queue: DiskQueue, answers: list[str], name: str) -> None:
    """What a durable publish does: write, report it, wait for the commit."""
    queue.put([name.encode().ljust(40, b".")])
    store.wrote(queue)
    store.after_commit(lambda ok: answers.append(f"{name}:{ok}"))


async def test_a_publish_does_not_wait_for_the_round_under_way(
    tmp_path: Path, gates: Gates
) -> None:
    store, queue, answers = await start(tmp_path)
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")  # round 1 still runs: b gets a round of its own
    await wait_for(lambda: gates.started == 2)
    gates.gates[1].set()
    await wait_for(lambda: store._rounds[-1].done)  # the loop has seen b's round end
    assert answers == []  # but a is answered first
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    assert answers == ["a:True", "b:True"]
    await store.close([queue])


async def test_a_write_starts_its_commit_and_the_publisher_joins_that_round(
    tmp_path: Path, gates: Gates
) -> None:
    """The fsync starts when the queue is written, not when the publisher (which first hands
    its messages to consumers) asks; asking then joins that round instead of adding one."""
    store, queue, answers = await start(tmp_path)
    queue.put([b"a".ljust(40, b".")])
    store.wrote(queue)
    await wait_for(lambda: gates.started == 1)  # under way before anyone waits for it
    store.after_commit(lambda ok: answers.append(f"a:{ok}"))
    assert len(store._rounds) == 1  # joined, no round of its own
    await asyncio.sleep(0)
    assert answers == []  # not before its fsync
    gates.gates[0].set()
    await wait_for(lambda: answers == ["a:True"])
    assert gates.started == 1
    await store.close([queue])


async def test_a_failed_round_fails_the_rounds_that_started_while_it_ran(
    tmp_path: Path, gates: Gates
) -> None:
    store, queue, answers = await start(tmp_path)
    gates.errors[0] = errno.ENOSPC
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")
    await wait_for(lambda: gates.started == 2)
    gates.gates[1].set()  # b's own fsync worked, but a's round may have held what b needs
    await wait_for(lambda: gates.finished == [1])
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    assert answers == ["a:False", "b:False"]
    gates.gates[2].set()
    publish(store, queue, answers, "c")  # a round started after the failure is on its own
    await wait_for(lambda: len(answers) == 3)
    assert answers[2] == "c:True"
    await store.close([queue])


async def test_close_waits_for_every_round_under_way(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers = await start(tmp_path)
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")
    await wait_for(lambda: gates.started == 2)
    closing = asyncio.ensure_future(store.close([queue]))
    gates.gates[1].set()
    await wait_for(lambda: store._rounds[-1].done)
    assert not closing.done()
    gates.gates[0].set()
    await closing
    assert answers == ["a:True", "b:True"]


async def test_a_position_write_does_not_delay_a_waiting_publisher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable mode: the metadata (--sync-every) goes to a lane nobody waits for; a publish is
    answered on its data fsync while a position write is stuck."""
    lane_open = threading.Event()
    lane_ran: list[int] = []
    real_run_jobs = persistence._run_jobs

    def stuck_run_jobs(jobs: list[SyncJob]) -> list[Exception]:
        assert lane_open.wait(10)
        lane_ran.append(len(jobs))
        return real_run_jobs(jobs)

    monkeypatch.setattr(persistence, "_run_jobs", stuck_run_jobs)
    store, queue, answers = await start(tmp_path, sync_every=1)  # every put is due
    publish(store, queue, answers, "a")
    await wait_for(lambda: store._lane_busy)  # the position job is under way, stuck
    await wait_for(lambda: answers == ["a:True"])
    publish(store, queue, answers, "b")
    await wait_for(lambda: answers == ["a:True", "b:True"])
    assert lane_ran == [] and not meta_exists(tmp_path)
    lane_open.set()
    await wait_for(lambda: len(lane_ran) >= 1 and not store._lane_busy)
    assert meta_exists(tmp_path)
    await store.close([queue])


def meta_exists(path: Path) -> bool:
    return (path / "t.diskqueue.meta.dat").exists()


def count_lane_rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The position rounds run so far (jobs in each), as the lane runs them."""
    ran: list[int] = []
    real_run_jobs = persistence._run_jobs

    def counted(jobs: list[SyncJob]) -> list[Exception]:
        ran.append(len(jobs))
        return real_run_jobs(jobs)

    monkeypatch.setattr(persistence, "_run_jobs", counted)
    return ran


async def test_position_rounds_asked_by_sync_every_keep_their_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable mode: reads and FINs count toward --sync-every, so under load it asked for a
    position round every few hundred microseconds; the next one now waits out the gap."""
    ran = count_lane_rounds(monkeypatch)
    store, queue, answers = await start(tmp_path, sync_every=1, position_gap=3600.0)
    publish(store, queue, answers, "a")
    await wait_for(lambda: len(ran) == 1 and not store._lane_busy)
    publish(store, queue, answers, "b")  # due again at once (sync_every=1)
    await wait_for(lambda: answers == ["a:True", "b:True"])
    assert store._lane_timer is not None  # the next round is set for the gap's end
    assert len(ran) == 1 and not store._lane_busy
    await store.close([queue])
    assert store._lane_timer.cancelled()


async def test_a_position_round_waits_for_the_gap_then_starts_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = count_lane_rounds(monkeypatch)
    store, queue, answers = await start(tmp_path, sync_every=1, position_gap=0.05)
    publish(store, queue, answers, "a")
    await wait_for(lambda: len(ran) == 1 and not store._lane_busy)
    publish(store, queue, answers, "b")
    await wait_for(lambda: len(ran) == 2)  # nothing else happens: the gap's timer starts it
    await wait_for(lambda: not store._lane_busy)
    assert meta_exists(tmp_path)
    await store.close([queue])


async def test_the_sync_timeout_tick_does_not_wait_for_the_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = count_lane_rounds(monkeypatch)
    store, queue, answers = await start(
        tmp_path, sync_every=1, sync_timeout=0.05, position_gap=3600.0
    )
    store.start()
    publish(store, queue, answers, "a")
    await wait_for(lambda: len(ran) == 1 and not store._lane_busy)
    publish(store, queue, answers, "b")
    await wait_for(lambda: len(ran) == 2)  # the tick's round, an hour before the gap ends
    await store.close([queue])


async def test_a_reply_goes_out_as_soon_as_its_commit_ends(
    nsqd_factory: NsqdFactory, gates: Gates
) -> None:
    """A pipelining durable publisher gets the OK of a committed PUB while the commit of its
    next PUB is still out (the OK used to wait in the output for that later commit)."""
    nsqd = await nsqd_factory(durable=True)
    conn = await RawV2.connect(nsqd.tcp_port)
    conn.cmd("PUB t", b"a")
    await wait_for(lambda: gates.started == 1)
    conn.cmd("PUB t", b"b")  # round 1 still runs: b's commit is round 2
    await wait_for(lambda: gates.started == 2)
    gates.gates[0].set()
    assert await conn.response() == b"OK"  # a's, with round 2 held
    assert gates.finished == [0]
    gates.gates[1].set()
    assert await conn.response() == b"OK"


async def test_a_commit_answered_during_the_loop_turn_is_taken_at_the_end_of_a_read(
    nsqd_factory: NsqdFactory, gates: Gates
) -> None:
    """A worker's answer is taken (and its publisher answered) at the end of any
    connection's read, without waiting for the loop to poll the done pipe or flush."""
    nsqd = await nsqd_factory(durable=True)
    workers = nsqd.store._fsyncers
    assert workers is not None
    workers.loop.remove_reader(workers._done_r)  # the loop no longer watches the answers
    try:
        publisher = await RawV2.connect(nsqd.tcp_port)
        publisher.cmd("PUB t", b"a")
        await wait_for(lambda: gates.started == 1)
        gates.gates[0].set()
        await wait_for(workers.answers_ready)
        other = await RawV2.connect(nsqd.tcp_port)
        other.send(b"NO")  # part of a command: a read with no reply and no flush
        assert await publisher.response() == b"OK"
    finally:  # watched again, so that the daemon's stop can take the answers
        workers.loop.add_reader(workers._done_r, workers.read_answers)


# -- the commit linger (storage.linger) -----------------------------------------------------------


async def test_a_commit_waits_for_a_publisher_due_back_and_covers_both(
    tmp_path: Path, gates: Gates
) -> None:
    """Publisher 2 was just answered: a's commit waits for it (the linger is long, so only
    its write can end the wait), and one round answers both."""
    store, queue, answers = await start(tmp_path, commit_linger=60.0)
    due_back(store, 2)
    publish(store, queue, answers, "a")
    assert not store._rounds and store._linger_timer is not None  # waiting for 2
    store.publisher_heard(2, store.loop.time())
    publish(store, queue, answers, "b")
    await wait_for(lambda: gates.started == 1)
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    assert answers == ["a:True", "b:True"]
    assert gates.started == 1  # one round for both
    assert store._linger_timer is None
    await store.close([queue])


async def test_a_commit_waits_no_longer_than_the_linger(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers = await start(tmp_path, commit_linger=0.05)
    due_back(store, 2)
    publish(store, queue, answers, "a")
    started = store.loop.time()
    assert gates.started == 0 and store._linger_timer is not None
    await wait_for(lambda: gates.started == 1)  # 2 never came
    assert store.loop.time() - started >= 0.05 * 0.9  # the loop's timer may fire a bit early
    gates.gates[0].set()
    await wait_for(lambda: answers == ["a:True"])
    await store.close([queue])


async def test_a_write_nobody_waits_for_is_committed_after_the_linger(
    tmp_path: Path, gates: Gates
) -> None:
    store, queue, _ = await start(tmp_path, commit_linger=0.02)
    due_back(store, 2)
    queue.put([b"r".ljust(40, b".")])  # a write with no publisher waiting for it
    store.wrote(queue)
    assert gates.started == 0
    await wait_for(lambda: gates.started == 1)
    gates.gates[0].set()
    await wait_for(lambda: store._rounds == deque())
    await store.close([queue])


async def test_nobody_due_back_no_wait(tmp_path: Path, gates: Gates) -> None:
    """A lone publisher, or one that went quiet after its reply, is not waited for."""
    store, queue, answers = await start(tmp_path, commit_linger=60.0)
    due_back(store, 2, store.loop.time() - 1.0)  # answered a second ago: went quiet
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    assert store._linger_timer is None
    gates.gates[0].set()
    await wait_for(lambda: answers == ["a:True"])
    await store.close([queue])


async def test_close_commits_what_the_linger_held(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers = await start(tmp_path, commit_linger=60.0)
    due_back(store, 2)
    publish(store, queue, answers, "a")
    assert gates.started == 0
    gates.gates[0].set()
    await store.close([queue])
    assert answers == ["a:True"]  # committed, not failed as a publish after close would be


async def test_what_channels_held_goes_out_as_the_held_round_starts(
    tmp_path: Path, gates: Gates
) -> None:
    """A channel holds back the messages of a write whose commit the linger holds; it hears
    when that round has started (the fsync is requested), before the round ends."""
    store, queue, answers = await start(tmp_path, commit_linger=60.0)
    assert not store.holding()
    due_back(store, 2)
    publish(store, queue, answers, "a")
    assert store.holding()
    ended: list[tuple[float, int]] = []
    store.after_hold(lambda now: ended.append((now, len(store._rounds))))
    store.publisher_heard(2, store.loop.time())
    publish(store, queue, answers, "b")
    assert len(ended) == 1 and ended[0][1] == 1  # the round was under way by then
    assert ended[0][0] == pytest.approx(store.loop.time(), abs=1.0)  # the loop's clock
    assert not store.holding() and answers == []  # not answered before its flush
    await wait_for(lambda: gates.started == 1)
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    await store.close([queue])


async def held(
    tmp_path: Path, linger: float
) -> tuple[persistence.DiskStore, DiskQueue, list[str], list[float]]:
    """A store whose linger holds a's commit for publisher 2, and when the hold ended."""
    store, queue, answers = await start(tmp_path, commit_linger=linger)
    due_back(store, 2)
    publish(store, queue, answers, "a")
    ended: list[float] = []
    store.after_hold(ended.append)
    return store, queue, answers, ended


async def test_held_messages_go_out_when_the_linger_runs_out(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers, ended = await held(tmp_path, 0.02)
    await wait_for(lambda: ended != [])  # 2 never came
    assert len(store._rounds) == 1  # the round the linger held started (its gate is shut)
    gates.gates[0].set()
    await wait_for(lambda: answers == ["a:True"])
    await store.close([queue])


async def test_close_ends_a_hold(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers, ended = await held(tmp_path, 60.0)
    gates.gates[0].set()
    await store.close([queue])
    assert len(ended) == 1 and answers == ["a:True"]


async def test_durable_publishers_whose_commits_are_held_lose_nothing(
    nsqd_factory: NsqdFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two publishers in step (as bench_writer's are) and a consumer on each of two channels:
    the linger holds commits, each channel holds its copy of the messages, and every message
    arrives once on each channel, each publisher's in order."""
    holds: list[str] = []
    ended = Channel._hold_ended

    def spy(self: Channel, now: float) -> None:
        holds.append(self.name)
        ended(self, now)

    monkeypatch.setattr(Channel, "_hold_ended", spy)
    nsqd = await nsqd_factory(durable=True)
    channels = ("c", "d")
    consumers = [await RawV2.connect(nsqd.tcp_port) for _ in channels]
    for consumer, name in zip(consumers, channels, strict=True):
        await consumer.sub("t", name, rdy=2500)
    publishers = [await RawV2.connect(nsqd.tcp_port) for _ in range(2)]
    rounds, batch = 40, 10

    async def publish(conn: RawV2, key: int) -> None:
        for n in range(rounds):
            conn.cmd("MPUB t", mpub_body([b"%d-%d" % (key, n * batch + i) for i in range(batch)]))
            assert await conn.response() == b"OK"

    async def receive(consumer: RawV2) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < 2 * rounds * batch:
            msg = await consumer.message()
            consumer.cmd(f"FIN {msg.id.decode()}")
            got.append(msg.body)
        return got

    *_, got_c, got_d = await asyncio.gather(
        publish(publishers[0], 0), publish(publishers[1], 1), *map(receive, consumers)
    )
    for got in (got_c, got_d):
        for key in (0, 1):
            mine = [body for body in got if body.startswith(b"%d-" % key)]
            assert mine == [b"%d-%d" % (key, n) for n in range(rounds * batch)]
    assert set(holds) == set(channels)  # the path under test was taken, by both channels
    topic = nsqd.broker.topics["t"]
    await wait_for(lambda: all(topic.channels[name].depth == 0 for name in channels))


async def test_the_linger_is_durable_modes_only(tmp_path: Path) -> None:
    store = persistence.DiskStore(
        asyncio.get_running_loop(),
        str(tmp_path),
        max_bytes_per_file=1 << 20,
        max_msg_size=1024,
        sync_every=1000,
        sync_timeout=60.0,
        durable=False,
        set_health=lambda _: None,
        commit_linger=60.0,
    )
    due_back(store, 2)
    assert not store._linger.expected(store.loop.time())
    await store.close([])


async def test_a_durable_publisher_is_waited_for_between_its_ok_and_its_next_command(
    nsqd_factory: NsqdFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TCP adapter tells the store when a publisher got its OK and when it spoke again
    (or went away): that is what the linger waits on."""
    calls: list[tuple[str, int]] = []
    answered = persistence.DiskStore.publisher_answered
    heard = persistence.DiskStore.publisher_heard
    gone = persistence.DiskStore.publisher_gone

    def spy_answered(self: persistence.DiskStore, key: int, now: float) -> None:
        calls.append(("answered", key))
        answered(self, key, now)

    def spy_heard(self: persistence.DiskStore, key: int, now: float) -> None:
        calls.append(("heard", key))
        heard(self, key, now)

    def spy_gone(self: persistence.DiskStore, key: int) -> None:
        calls.append(("gone", key))
        gone(self, key)

    monkeypatch.setattr(persistence.DiskStore, "publisher_answered", spy_answered)
    monkeypatch.setattr(persistence.DiskStore, "publisher_heard", spy_heard)
    monkeypatch.setattr(persistence.DiskStore, "publisher_gone", spy_gone)
    nsqd = await nsqd_factory(durable=True)
    conn = await RawV2.connect(nsqd.tcp_port)
    conn.cmd("PUB t", b"a")
    assert await conn.response() == b"OK"
    await wait_for(lambda: calls == [("answered", calls[0][1])])
    key = calls[0][1]
    conn.cmd("NOP")
    await wait_for(lambda: calls[1:] == [("heard", key)])
    assert key in nsqd.store._linger._turnaround  # measured
    conn.cmd("PUB t", b"b")
    assert await conn.response() == b"OK"
    await wait_for(lambda: calls[2:] == [("answered", key)])
    await conn.close()
    await wait_for(lambda: calls[3:] == [("gone", key)])
    assert key not in nsqd.store._linger._turnaround

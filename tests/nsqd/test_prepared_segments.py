"""Durable mode's prepared segments: zeros written ahead, so commits fdatasync overwrites.

The write segment is a file of ``max_bytes_per_file`` zeros prepared (and synced) before the
roll that renames it into place; completed segments are cut to their exact length; after an
unclean stop a segment may end in zeros, which recovery treats as the end of its data.
Expected segment contents are framed by hand from the format, never with the writer.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_diskqueue import (
    AckedQueueMachine,
    Corruptions,
    drain,
    drain_fresh,
    frame,
    meta_file,
    names,
    open_q,
    rec,
    seg,
    write_meta,
)
from test_persistence import BODIES, Daemons, consume, daemons, publish

from nsqpy.nsqd.storage import diskqueue, persistence
from nsqpy.nsqd.storage.diskqueue import (
    PREPARE_LEAD,
    PREPARE_PATIENCE,
    PREPARE_PAUSE,
    DiskQueue,
    PrepareJob,
    RemoveJob,
)

__all__ = ["daemons"]  # the fixture, imported for the tests below

SEGMENT = 2048
RECORD = 100  # framed: 104 bytes, 19 to a segment


def prepared(tmp_path: Path, name: str = "t") -> Path:
    return tmp_path / f"{name}.diskqueue.next.tmp"


def open_prepared(tmp_path: Path, **kw: Any) -> DiskQueue:
    return open_q(tmp_path, max_bytes_per_file=SEGMENT, prepare_segments=True, **kw)


def prepare(q: DiskQueue) -> None:
    """What the daemon does on its preparing thread, inline."""
    assert q.needs_prepare
    job = q.prepare_job()
    assert not q.needs_prepare  # one at a time
    job.run()
    q.prepare_done(job)


def records(start: int, count: int) -> list[bytes]:
    return [rec(i, RECORD) for i in range(start, start + count)]


def framed(recs: list[bytes]) -> bytes:
    return b"".join(frame(r) for r in recs)


def segment_store(tmp_path: Path, durable: bool = True) -> persistence.DiskStore:
    """A store of ``SEGMENT``-byte segments on the running loop."""
    return persistence.DiskStore(
        asyncio.get_running_loop(),
        str(tmp_path),
        max_bytes_per_file=SEGMENT,
        max_msg_size=1024,
        sync_every=1000,
        sync_timeout=60.0,
        durable=durable,
        set_health=lambda _: None,
    )


def no_bad_files(tmp_path: Path) -> bool:
    return not any(n.endswith(".bad") for n in names(tmp_path))


def test_writes_overwrite_a_prepared_segment_and_completed_ones_are_exact(tmp_path: Path) -> None:
    q = open_prepared(tmp_path)
    q.put(records(0, 3))  # 312 bytes: past an eighth of the segment
    assert seg(tmp_path, 0).stat().st_size == 312  # the first segment appends
    prepare(q)
    assert prepared(tmp_path).read_bytes() == bytes(SEGMENT)
    q.put(records(3, 5))  # the appending segment rolls on to the prepared one at once
    assert not prepared(tmp_path).exists()  # renamed into place
    assert seg(tmp_path, 0).read_bytes() == framed(records(0, 3))  # exact
    assert seg(tmp_path, 1).read_bytes() == framed(records(3, 5)) + bytes(SEGMENT - 5 * 104)
    q.put(records(8, 20))  # 14 fill segment 1 (19 records), 6 go to a new one, appended
    assert seg(tmp_path, 1).read_bytes() == framed(records(3, 19))  # cut to its records
    assert seg(tmp_path, 2).stat().st_size == 6 * 104
    prepare(q)
    q.put(records(28, 1))
    assert seg(tmp_path, 2).read_bytes() == framed(records(22, 6))
    assert seg(tmp_path, 3).stat().st_size == SEGMENT  # ahead of writePos while written
    q.close()
    assert seg(tmp_path, 3).read_bytes() == framed(records(28, 1))  # a clean close cuts too
    assert meta_file(tmp_path).read_bytes() == b"29\n0,0\n3,104\n"
    again = open_prepared(tmp_path)
    assert drain(again) == records(0, 29)
    again.close()
    assert no_bad_files(tmp_path)


def test_a_roll_before_the_prepared_segment_is_ready_appends(tmp_path: Path) -> None:
    q = open_prepared(tmp_path)
    q.put(records(0, 3))
    job = q.prepare_job()  # handed out, not run yet: the roll must not wait for it
    q.put(records(3, 20))
    assert seg(tmp_path, 1).stat().st_size == 4 * 104  # appended
    job.run()
    q.prepare_done(job)
    q.put(records(23, 30))  # rolls on to it at once, fills it, then appends again
    assert seg(tmp_path, 1).read_bytes() == framed(records(19, 4))
    assert seg(tmp_path, 2).read_bytes() == framed(records(23, 19))
    assert seg(tmp_path, 3).stat().st_size == 11 * 104
    q.close()
    assert not prepared(tmp_path).exists()
    again = open_prepared(tmp_path)
    assert drain(again) == records(0, 53)
    again.close()


def test_closing_with_a_prepare_job_under_way_leaves_no_file(tmp_path: Path) -> None:
    q = open_prepared(tmp_path)
    q.put(records(0, 3))
    job = q.prepare_job()
    q.close()
    job.run()  # the queue is closed: the job removes what it wrote (or writes nothing)
    q.prepare_done(job)
    assert not prepared(tmp_path).exists()
    q = open_prepared(tmp_path)
    q.put(records(3, 3))
    prepare(q)
    q.delete()
    assert names(tmp_path) == set()


# -- recycled segments --------------------------------------------------------------------
def spare(tmp_path: Path, name: str = "t") -> Path:
    return tmp_path / f"{name}.diskqueue.spare.tmp"


def rolled_on_to_a_prepared_segment(tmp_path: Path, **kw: Any) -> DiskQueue:
    """Segment 0 (appended, 3 records) rolled away from, segment 1 the prepared write
    segment, and no prepared file left: reading past record 2 consumes segment 0."""
    q = open_prepared(tmp_path, **kw)
    q.put(records(0, 3))
    prepare(q)
    q.put(records(3, 1))  # rolls on to the prepared segment 1
    assert not prepared(tmp_path).exists()
    return q


def test_a_consumed_segment_is_the_spare_that_the_next_preparation_zeros(tmp_path: Path) -> None:
    q = rolled_on_to_a_prepared_segment(tmp_path)
    inode = seg(tmp_path, 0).stat().st_ino
    assert [q.read() is not None for _ in range(4)] == [True] * 4  # reading left segment 0
    assert not seg(tmp_path, 0).exists()
    assert spare(tmp_path).stat().st_ino == inode
    assert spare(tmp_path).read_bytes() == framed(records(0, 3))  # renamed as it was
    q.put(records(4, 2))  # segment 1 past an eighth: its successor is due
    prepare(q)
    assert not spare(tmp_path).exists()
    assert prepared(tmp_path).stat().st_ino == inode  # the same blocks...
    assert prepared(tmp_path).read_bytes() == bytes(SEGMENT)  # ...zeros to the full size
    q.put(records(6, 30))  # fills segment 1, rolls on to the recycled file
    assert seg(tmp_path, 2).stat().st_ino == inode
    q.close()
    assert not spare(tmp_path).exists() and not prepared(tmp_path).exists()
    assert drain_fresh(tmp_path, max_bytes_per_file=SEGMENT, prepare_segments=True) == records(
        4, 32
    )
    assert no_bad_files(tmp_path)


def test_no_spare_while_a_prepared_file_or_another_spare_exists(tmp_path: Path) -> None:
    q = rolled_on_to_a_prepared_segment(tmp_path)
    q.put(records(4, 2))
    prepare(q)  # a new file: there is no spare yet
    for _ in range(6):
        assert q.read() is not None
    assert not seg(tmp_path, 0).exists() and not spare(tmp_path).exists()  # deleted
    q.close()
    (tmp_path / "b").mkdir()
    q = rolled_on_to_a_prepared_segment(tmp_path / "b")
    spare(tmp_path / "b").write_bytes(b"x")
    for _ in range(4):
        assert q.read() is not None
    assert not seg(tmp_path / "b", 0).exists()
    assert spare(tmp_path / "b").read_bytes() == b"x"  # one spare at most
    q.close()


def test_a_spare_longer_than_a_segment_is_cut_and_zeroed(tmp_path: Path) -> None:
    q = open_prepared(tmp_path)
    q.put(records(0, 3))
    spare(tmp_path).write_bytes(b"\xff" * (SEGMENT * 3))
    prepare(q)
    assert prepared(tmp_path).read_bytes() == bytes(SEGMENT)
    assert not spare(tmp_path).exists()
    q.close()


def test_a_spare_goes_on_close_and_a_stale_one_on_open(tmp_path: Path) -> None:
    q = rolled_on_to_a_prepared_segment(tmp_path)
    for _ in range(4):
        assert q.read() is not None
    assert spare(tmp_path).exists()
    q.close()
    assert not spare(tmp_path).exists()
    spare(tmp_path).write_bytes(b"left by a crash")
    q = open_prepared(tmp_path)
    assert not spare(tmp_path).exists()
    q.delete()
    assert names(tmp_path) == set()


def test_a_removal_run_after_close_deletes(tmp_path: Path) -> None:
    jobs: list[RemoveJob] = []
    q = rolled_on_to_a_prepared_segment(tmp_path, remove_later=jobs.append)
    for _ in range(4):
        assert q.read() is not None
    assert len(jobs) == 1 and seg(tmp_path, 0).exists()  # not run yet
    q.close()
    jobs[0].run()
    assert not seg(tmp_path, 0).exists() and not spare(tmp_path).exists()


def test_disk_mode_queues_delete_consumed_segments(tmp_path: Path) -> None:
    q = open_q(tmp_path, max_bytes_per_file=SEGMENT)
    q.put(records(0, 25))
    for _ in range(20):
        assert q.read() is not None
    assert not seg(tmp_path, 0).exists()
    assert not spare(tmp_path).exists()
    q.close()


STEP = 1 << 20  # a prepare job writes (and syncs) its zeros a MiB at a time
BIG = 4 * STEP  # segments of four steps, for the paced jobs below
CHUNK = (64 << 10) - 4  # records of 64 KiB framed


class Paced:
    """A paced job's clock and sleep, faked: every pause notes (zeros written, the writer's
    position) and then runs ``on_pause``, e.g. the writer writing on."""

    def __init__(self, job: PrepareJob, path: Path, pos: int, on_pause: Any = None) -> None:
        self.now = 0.0
        self.pos = pos  # the writer's position, as the test moves it
        self.pauses: list[tuple[int, int]] = []
        self._path = path
        self._on_pause = on_pause
        job.clock = lambda: self.now
        job.sleep = self.sleep

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.pauses.append((self._path.stat().st_size, self.pos))
        if self._on_pause is not None:
            self._on_pause(self)

    def leads(self) -> list[float]:
        return [zeros / BIG - pos / BIG for zeros, pos in self.pauses]


def big_records(start: int, count: int) -> list[bytes]:
    return [rec(i, CHUNK) for i in range(start, start + count)]


def writing_a_prepared_segment(tmp_path: Path) -> DiskQueue:
    """A queue of BIG segments whose writes have reached an eighth of a prepared segment."""
    q = open_q(tmp_path, max_bytes_per_file=BIG, max_record_size=CHUNK, prepare_segments=True)
    q.put(big_records(0, 8))  # an eighth of the first segment, which appends
    prepare(q)
    q.put(big_records(8, 9))  # rolls on to the prepared segment 1, past an eighth of it
    assert q.needs_prepare
    return q


def test_a_paced_prepare_keeps_its_lead_over_the_writer(tmp_path: Path) -> None:
    q = writing_a_prepared_segment(tmp_path)
    job = q.prepare_job(others_waiting=lambda: False)
    written = iter(range(17, 200))

    def write_on(paced: Paced) -> None:
        q.put(big_records(next(written), 1))
        paced.pos += CHUNK + 4

    paced = Paced(job, prepared(tmp_path), 9 * (CHUNK + 4), write_on)
    job.run()
    q.prepare_done(job)
    assert job.completed
    assert prepared(tmp_path).read_bytes() == bytes(BIG)
    leads = paced.leads()
    assert leads, "the job never waited for the writer"
    assert all(lead > PREPARE_LEAD for lead in leads)  # it waits only while ahead...
    assert max(leads) <= PREPARE_LEAD + STEP / BIG  # ...by at most one step more than the lead
    assert paced.now < PREPARE_PATIENCE
    q.close()


def test_a_paced_prepare_whose_writer_stops_waits_only_its_patience(tmp_path: Path) -> None:
    q = writing_a_prepared_segment(tmp_path)
    job = q.prepare_job(others_waiting=lambda: False)
    paced = Paced(job, prepared(tmp_path), 9 * (CHUNK + 4))
    job.run()
    q.prepare_done(job)
    assert job.completed
    assert prepared(tmp_path).read_bytes() == bytes(BIG)
    assert PREPARE_PATIENCE <= paced.now < PREPARE_PATIENCE + PREPARE_PAUSE
    assert {zeros for zeros, _ in paced.pauses} == {2 * STEP}  # its first lead past a quarter
    q.close()


def test_a_prepare_is_not_paced_when_others_wait_the_writer_appends_or_no_pace_is_asked(
    tmp_path: Path,
) -> None:
    for sub in ("others", "unpaced"):
        (tmp_path / sub).mkdir()
    q = writing_a_prepared_segment(tmp_path / "others")
    job = q.prepare_job(others_waiting=lambda: True)  # more jobs for its thread
    others = Paced(job, prepared(tmp_path / "others"), 0)
    job.run()
    q.close()
    q = writing_a_prepared_segment(tmp_path / "unpaced")
    job = q.prepare_job()  # no pace (a job run inline)
    unpaced = Paced(job, prepared(tmp_path / "unpaced"), 0)
    job.run()
    q.close()
    q = open_q(tmp_path, max_bytes_per_file=BIG, max_record_size=CHUNK, prepare_segments=True)
    q.put(big_records(0, 8))  # an eighth of the first segment, which appends
    job = q.prepare_job(others_waiting=lambda: False)
    appending = Paced(job, prepared(tmp_path), 0)
    job.run()
    q.close()
    assert (others.pauses, unpaced.pauses, appending.pauses) == ([], [], [])


def test_a_paced_prepare_ends_once_its_queue_is_closed(tmp_path: Path) -> None:
    q = writing_a_prepared_segment(tmp_path)
    job = q.prepare_job(others_waiting=lambda: False)
    paced = Paced(job, prepared(tmp_path), 9 * (CHUNK + 4), lambda _: q.close())
    job.run()
    q.prepare_done(job)
    assert len(paced.pauses) == 1
    assert not job.completed
    assert not prepared(tmp_path).exists()


async def test_the_daemons_prepare_jobs_are_paced_and_counted_on_the_files_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store asks for paced jobs, telling them whether other file jobs wait for their
    thread (a paced job must not hold those up)."""
    asked: list[Any] = []
    original = DiskQueue.prepare_job

    def spy(self: DiskQueue, others_waiting: Any = None) -> PrepareJob:
        asked.append(others_waiting)
        return original(self, others_waiting)

    monkeypatch.setattr(DiskQueue, "prepare_job", spy)
    store = segment_store(tmp_path)
    queue = store.open_queue("t")
    gate = threading.Event()

    def hold() -> None:  # the files thread, until the gate opens
        assert gate.wait(10)

    store._file_job(hold)
    queue.put(records(0, 3))  # past an eighth of the segment
    store.wrote(queue)
    assert asked == [store._file_jobs_waiting]
    assert store._file_jobs_waiting()  # the prepare job waits behind the first one
    gate.set()
    await wait_for(lambda: store._file_jobs == 0)
    assert not store._file_jobs_waiting()
    assert prepared(tmp_path).read_bytes() == bytes(SEGMENT)
    await store.close([queue])


def test_non_durable_queues_never_prepare(tmp_path: Path) -> None:
    q = open_q(tmp_path, max_bytes_per_file=SEGMENT)
    for i in range(0, 60, 3):
        q.put(records(i, 3))
        assert not q.needs_prepare
        assert all(not n.endswith(".tmp") for n in names(tmp_path))
    assert seg(tmp_path, 3).stat().st_size == 3 * 104  # appended: size == writePos
    q.close()


def kill_snapshot(src: Path, dst: Path) -> Path:
    """The files as a kill -9 would leave them now (the page cache survives a kill)."""
    shutil.copytree(src, dst)
    return dst


def test_reopen_after_an_unclean_stop_reads_up_to_the_zeros(tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    q = open_prepared(live)
    q.put(records(0, 3))
    prepare(q)
    q.put(records(3, 10))  # segment 1, prepared, is being written
    q.sync_now()  # positions on disk: writePos inside segment 1
    q.put(records(13, 5))  # written (and, in durable mode, committed) after the positions
    crashed = kill_snapshot(live, tmp_path / "crashed")
    q.close()
    assert seg(crashed, 1).stat().st_size == SEGMENT
    corruptions = Corruptions()
    again = open_prepared(crashed, on_corruption=corruptions)
    assert again.depth == 18
    assert seg(crashed, 1).read_bytes() == framed(records(3, 15))  # zeros cut off
    assert drain(again) == records(0, 18)
    again.put(records(18, 2))
    again.close()
    assert drain(open_prepared(crashed)) == records(18, 2)
    assert corruptions.messages == []
    assert no_bad_files(crashed)


def test_a_rolled_segment_still_ending_in_zeros_is_read_to_its_last_record(
    tmp_path: Path,
) -> None:
    # a roll's truncation had not reached the disk, but positions past it had
    seg(tmp_path, 0).write_bytes(framed(records(0, 19)) + bytes(60))
    seg(tmp_path, 1).write_bytes(framed(records(19, 2)) + bytes(SEGMENT - 208))
    write_meta(tmp_path, 21, 0, 0, 1, 208)
    corruptions = Corruptions()
    q = open_prepared(tmp_path, on_corruption=corruptions)
    assert q.peek(8) == records(0, 1)[0][:8]
    out, tokens = q.read_many(100)  # reads on in the next segment
    assert out == records(0, 21) and len(tokens) == 21
    q.close()
    assert corruptions.messages == []
    assert no_bad_files(tmp_path)
    assert seg(tmp_path, 1).stat().st_size == 208


def test_segments_the_metadata_does_not_name_yet_are_read_not_overwritten(
    tmp_path: Path,
) -> None:
    # killed after rolling on (its commit made the records durable), before the positions
    seg(tmp_path, 0).write_bytes(framed(records(0, 19)))
    seg(tmp_path, 1).write_bytes(framed(records(19, 19)))
    seg(tmp_path, 2).write_bytes(framed(records(38, 4)) + bytes(SEGMENT - 416))
    write_meta(tmp_path, 10, 0, 0, 0, 10 * 104)
    corruptions = Corruptions()
    q = open_prepared(tmp_path, on_corruption=corruptions)
    assert q.depth == 42
    q.put(records(42, 1))  # goes after them
    assert drain(q) == records(0, 43)
    q.close()
    assert corruptions.messages == []
    assert no_bad_files(tmp_path)


def test_without_metadata_the_segments_are_recovered_up_to_the_zeros(tmp_path: Path) -> None:
    seg(tmp_path, 0).write_bytes(framed(records(0, 19)) + bytes(3))  # under a length's size
    seg(tmp_path, 1).write_bytes(framed(records(19, 5)) + bytes(SEGMENT - 520))
    prepared(tmp_path).write_bytes(bytes(100))  # a preparation cut short
    q = open_prepared(tmp_path)
    assert not prepared(tmp_path).exists()
    assert q.depth == 24
    assert drain(q) == records(0, 24)
    q.close()
    assert no_bad_files(tmp_path)


def test_zeros_followed_by_data_are_still_damage(tmp_path: Path) -> None:
    seg(tmp_path, 0).write_bytes(framed(records(0, 2)) + bytes(8) + framed(records(2, 1)))
    seg(tmp_path, 1).write_bytes(framed(records(3, 1)))
    write_meta(tmp_path, 4, 0, 0, 1, 104)
    corruptions = Corruptions()
    q = open_prepared(tmp_path, on_corruption=corruptions)
    assert drain(q) == records(0, 2) + records(3, 1)
    q.close()
    assert len(corruptions.messages) == 1
    assert names(tmp_path) >= {seg(tmp_path, 0).name + ".bad"}


# -- the daemon ------------------------------------------------------------------------------
async def test_durable_daemon_prepares_segments_and_leaves_exact_ones(daemons: Daemons) -> None:
    nsqd = await daemons.start(durable=True, max_bytes_per_file=4096)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    data = daemons.data_path
    await publish(nsqd, "t", BODIES[:20])  # ~ 720 bytes: past an eighth of a segment
    await wait_for(lambda: prepared(data, "t:c").exists())
    backend = nsqd.broker.topics["t"].channels["c"].backend
    assert isinstance(backend, DiskQueue)
    for start in range(20, 300, 20):
        # each roll finds the next segment prepared (they are quick here; in general a roll
        # that comes first appends)
        await wait_for(lambda: not backend.needs_prepare and backend._prepare_state != 1)
        await publish(nsqd, "t", BODIES[start : start + 20])
    segments = sorted(p for p in data.iterdir() if p.name.startswith("t:c.diskqueue.0"))
    assert len(segments) >= 3
    assert segments[-1].stat().st_size == 4096  # the write segment: zeros ahead of writePos
    await daemons.stop(nsqd)
    assert not [p.name for p in data.iterdir() if p.name.endswith(".tmp")]
    total = 0
    for path in segments:  # every segment is exact: records end where the file ends
        content, pos = path.read_bytes(), 0
        while pos < len(content):
            size = int.from_bytes(content[pos : pos + 4], "big")
            assert 26 < size < 100
            pos += 4 + size
            total += 1
        assert pos == len(content)
    assert total == 300
    nsqd = await daemons.start(durable=True, max_bytes_per_file=4096)
    assert await consume(nsqd, "t", "c", 300) == BODIES


async def test_a_durable_daemon_prepares_over_consumed_segments(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Published and consumed in rounds: consumed segments become the spare on the files
    thread, and a later preparation opens that spare; nothing is lost or replayed."""
    kept: list[str] = []  # the threads a consumed segment was kept as the spare on
    opened: list[bool] = []  # per preparation: whether it found a spare to reuse
    keep, open_ = diskqueue.Recycling.keep, PrepareJob._open

    def spy_keep(self: diskqueue.Recycling, path: str) -> bool:
        if result := keep(self, path):
            kept.append(threading.current_thread().name)
        return result

    def spy_open(self: PrepareJob) -> int:
        opened.append(self._spare is not None and os.path.exists(self._spare))
        return open_(self)

    monkeypatch.setattr(diskqueue.Recycling, "keep", spy_keep)
    monkeypatch.setattr(PrepareJob, "_open", spy_open)
    nsqd = await daemons.start(durable=True, max_bytes_per_file=4096)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    rounds = 0
    while not any(opened):
        assert rounds < 500, "no preparation reused a consumed segment"
        bodies = [b"%d-" % rounds + body for body in BODIES[:20]]
        await publish(nsqd, "t", bodies)
        assert await consume(nsqd, "t", "c", 20) == bodies
        rounds += 1
    assert kept and {name.rsplit("_", 1)[0] for name in kept} == {"nsqd-files"}
    await daemons.stop(nsqd)
    data = daemons.data_path
    assert not [p.name for p in data.iterdir() if p.name.endswith(".tmp")]
    nsqd = await daemons.start(durable=True, max_bytes_per_file=4096)
    await publish(nsqd, "t", BODIES[:5])
    assert await consume(nsqd, "t", "c", 5) == BODIES[:5]  # nothing older comes back


async def test_memory_and_disk_mode_do_not_prepare(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=0, max_bytes_per_file=4096)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    for start in range(0, 300, 20):
        await publish(nsqd, "t", BODIES[start : start + 20])
    assert not prepared(daemons.data_path, "t:c").exists()
    backend = nsqd.broker.topics["t"].channels["c"].backend
    assert isinstance(backend, DiskQueue) and not backend.prepare_segments
    await daemons.stop(nsqd)
    segments = sorted(daemons.data_path.glob("t:c.diskqueue.0*.dat"))
    assert len(segments) >= 3
    assert sum(p.stat().st_size for p in segments) == 300 * 36  # nothing but the records


# -- any sequence ----------------------------------------------------------------------------
class PreparedQueueMachine(AckedQueueMachine):
    """Durable mode's queue: the acked machine's rules plus preparations that finish at any
    time (or never), and kill -9 snapshots reopened: never a loss, never a .bad file."""

    def __init__(self) -> None:
        self.job: PrepareJob | None = None
        self.snapshots = 0
        super().__init__()
        self.base = self.dir

    def open(self) -> DiskQueue:
        return open_q(
            Path(self.dir), max_bytes_per_file=400, track_acks=True, prepare_segments=True
        )

    @rule(now=st.booleans())
    def prepare(self, now: bool) -> None:
        """Hand a job out if one is due; run the one handed out now or leave it for later."""
        if self.job is None and self.q.needs_prepare:
            self.job = self.q.prepare_job()
        if now and self.job is not None:
            job, self.job = self.job, None
            job.run()
            self.q.prepare_done(job)

    @rule(n=st.integers(1, 5))
    def prepare_and_put(self, n: int) -> None:
        """The usual case: the preparation is quick, the next write rolls on to it."""
        if self.job is None and self.q.needs_prepare:
            self.job = self.q.prepare_job()
        self.prepare(True)
        self.put(n)

    @rule()
    def kill_and_reopen(self) -> None:
        """Reopen the files as a kill -9 leaves them; everything from the oldest unfinished
        record on comes back (and maybe some before it, as duplicates), in order."""
        self.snapshots += 1
        crashed = f"{self.base}-kill{self.snapshots}"
        shutil.copytree(self.dir, crashed)
        self.q.close()
        if self.job is not None:  # its thread died with the process
            self.job = None
        shutil.rmtree(self.dir)
        self.dir = crashed
        self.q = self.open()
        oldest = min(self.outstanding.values(), default=self.next_read)
        got, tokens = self.q.read_many(len(self.records) + 1)
        assert got == self.records[len(self.records) - len(got) :]  # the newest, in order
        assert len(self.records) - len(got) <= oldest  # nothing unfinished is missing
        self.outstanding = {t: len(self.records) - len(got) + i for i, t in enumerate(tokens)}
        self.next_read = len(self.records)
        assert not [n for n in os.listdir(self.dir) if n.endswith(".bad")]

    @rule()
    def reopen(self) -> None:
        self.job = None  # close removes the prepared file; a job left over does nothing
        super().reopen()


TestPreparedQueueMachine = PreparedQueueMachine.TestCase
TestPreparedQueueMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

"""Durable mode's store-wide prepared segments (``segment_pool``): consumed segments a queue
cannot keep are zeroed in steps, while no commit runs, and a new queue starts on one.

Expected segment contents are framed by hand from the format, never with the writer.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from conftest import wait_for
from test_diskqueue import drain, names, seg
from test_prepared_segments import (
    SEGMENT,
    framed,
    no_bad_files,
    open_prepared,
    prepare,
    prepared,
    records,
    segment_store,
    spare,
)

from nsqpy.nsqd.storage import persistence
from nsqpy.nsqd.storage.segment_pool import STEP, SegmentPool


def offered(tmp_path: Path, pool: SegmentPool, name: str, data: bytes) -> int:
    """A consumed segment ``name`` holding ``data``, offered: its inode."""
    path = tmp_path / name
    path.write_bytes(data)
    inode = path.stat().st_ino
    assert pool.offer(str(path))
    assert not path.exists()
    return inode


def pooled(pool: SegmentPool, slot: int = 0) -> tuple[int, bytes]:
    """The pooled file's inode and contents."""
    path = Path(pool.paths[slot])
    return path.stat().st_ino, path.read_bytes()


def filled(pool: SegmentPool) -> None:
    while pool.filling:
        pool.fill_step()


def test_an_offered_segment_is_zeroed_step_by_step_then_taken_renamed(tmp_path: Path) -> None:
    size = 2 * STEP + 100
    pool = SegmentPool(str(tmp_path), size)
    inode = offered(tmp_path, pool, "a", b"\xff" * (STEP + 500))  # shorter than a segment
    pooled = Path(pool.paths[0])
    assert pooled.stat().st_ino == inode and pool.filling and not pool.ready
    assert not pool.take(str(tmp_path / "early"))  # not before its zeros are synced
    pool.fill_step()
    data = pooled.read_bytes()
    assert data[:STEP] == bytes(STEP) and data[STEP:] == b"\xff" * 500  # one step only
    pool.fill_step()
    pool.fill_step()
    assert not pool.filling and pool.ready == 1
    assert pooled.read_bytes() == bytes(size)  # extended with zeros to the full size
    target = tmp_path / "t.diskqueue.000000.dat"
    assert pool.take(str(target))
    assert target.stat().st_ino == inode and target.stat().st_size == size
    assert not pooled.exists() and pool.ready == 0


def test_a_segment_longer_than_the_pools_is_cut(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT)
    offered(tmp_path, pool, "a", b"\xff" * (SEGMENT * 3))
    filled(pool)
    assert Path(pool.paths[0]).read_bytes() == bytes(SEGMENT)


def test_offers_beyond_the_slots_are_refused_and_close_removes_every_file(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT, count=2)
    offered(tmp_path, pool, "a", b"a" * 10)
    offered(tmp_path, pool, "b", b"b" * 10)
    (tmp_path / "c").write_bytes(b"c")
    assert not pool.offer(str(tmp_path / "c"))
    assert (tmp_path / "c").read_bytes() == b"c"  # left for its queue to delete
    filled(pool)
    assert pool.ready == 2
    pool.close()
    assert names(tmp_path) == {"c"}
    (tmp_path / "d").write_bytes(b"d")
    assert not pool.offer(str(tmp_path / "d"))
    assert not pool.take(str(tmp_path / "e"))


def test_a_take_never_replaces_a_file(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT)
    offered(tmp_path, pool, "a", b"a")
    filled(pool)
    target = tmp_path / "t.diskqueue.000000.dat"
    target.write_bytes(b"records")
    assert not pool.take(str(target))
    assert target.read_bytes() == b"records"
    assert pool.ready == 1  # still there for the next taker
    Path(pool.paths[0]).unlink()
    assert not pool.take(str(tmp_path / "other"))
    assert pool.ready == 0  # a lost file empties its slot


def test_stale_pooled_files_go_when_a_pool_opens_and_only_they(tmp_path: Path) -> None:
    for name in ("nsqd.segment.0.tmp", "nsqd.segment.7.tmp"):
        (tmp_path / name).write_bytes(b"left by a crash")
    kept = {"nsqd.segment.1.tmp.diskqueue.000000.dat", "nsqd.segment.tmp", "nsqd.dat"}
    for name in kept:  # a topic may be named "nsqd.segment.1.tmp"
        (tmp_path / name).write_bytes(b"x")
    SegmentPool(str(tmp_path), SEGMENT)
    assert names(tmp_path) == kept


def test_a_failed_step_empties_its_slot(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT, count=1)
    offered(tmp_path, pool, "a", b"a")
    Path(pool.paths[0]).unlink()  # the disk lost it
    with pytest.raises(OSError):
        pool.fill_step()
    assert not pool.filling and not pool.ready
    offered(tmp_path, pool, "b", b"b")  # the slot takes the next one


# -- queues -------------------------------------------------------------------------------
def ready_pool(tmp_path: Path, size: int = SEGMENT) -> tuple[SegmentPool, int]:
    pool = SegmentPool(str(tmp_path), size)
    inode = offered(tmp_path, pool, "consumed", b"\xff" * size)
    filled(pool)
    return pool, inode


def test_a_new_queue_starts_on_a_pooled_segment_and_recovers_from_a_crash(tmp_path: Path) -> None:
    pool, inode = ready_pool(tmp_path)
    q = open_prepared(tmp_path, pool=pool)
    q.put(records(0, 3))
    assert seg(tmp_path, 0).stat().st_ino == inode and pool.ready == 0
    assert seg(tmp_path, 0).read_bytes() == framed(records(0, 3)) + bytes(SEGMENT - 312)
    crashed = tmp_path / "crashed"  # the files as an unclean stop leaves them
    crashed.mkdir()
    shutil.copy(seg(tmp_path, 0), seg(crashed, 0))
    again = open_prepared(crashed)
    assert drain(again) == records(0, 3)  # the zeros end the data, they are not damage
    again.close()
    assert no_bad_files(crashed)
    q.close()
    assert seg(tmp_path, 0).read_bytes() == framed(records(0, 3))  # a clean close cuts
    assert drain(open_prepared(tmp_path)) == records(0, 3)


def test_a_queue_with_no_spare_takes_a_pooled_segment_as_its_next(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT)
    q = open_prepared(tmp_path, pool=pool)
    q.put(records(0, 3))  # nothing pooled yet: the first segment appends
    assert seg(tmp_path, 0).stat().st_size == 312
    inode = offered(tmp_path, pool, "consumed", b"\xff" * 10)
    filled(pool)
    assert q.needs_prepare and q.prepare_from_pool()
    assert prepared(tmp_path).stat().st_ino == inode and not q.needs_prepare
    q.put(records(3, 1))  # rolls on to it at once
    assert seg(tmp_path, 1).stat().st_ino == inode
    assert seg(tmp_path, 1).read_bytes() == framed(records(3, 1)) + bytes(SEGMENT - 104)
    q.close()
    assert drain(open_prepared(tmp_path)) == records(0, 4)


def test_a_queue_with_a_spare_of_its_own_leaves_the_pool_alone(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT)
    q = open_prepared(tmp_path, pool=pool)
    q.put(records(0, 3))  # nothing pooled yet: the first segment appends
    offered(tmp_path, pool, "consumed", b"\xff")
    filled(pool)
    spare(tmp_path).write_bytes(b"a consumed segment of its own")
    assert q.needs_prepare and not q.prepare_from_pool()
    assert pool.ready == 1 and q.needs_prepare  # its own job zeros its spare
    q.close()


def test_a_pool_of_another_size_is_not_used(tmp_path: Path) -> None:
    pool, _ = ready_pool(tmp_path, SEGMENT * 2)
    q = open_prepared(tmp_path, pool=pool)
    q.put(records(0, 3))
    assert seg(tmp_path, 0).stat().st_size == 312 and pool.ready == 1
    assert not q.prepare_from_pool()
    q.close()


def test_a_consumed_segment_the_queue_cannot_keep_goes_to_the_pool(tmp_path: Path) -> None:
    pool = SegmentPool(str(tmp_path), SEGMENT, count=1)
    q = open_prepared(tmp_path, pool=pool)
    q.put(records(0, 3))
    prepare(q)
    q.put(records(3, 3))  # segment 1, the prepared one, past an eighth: the next is due
    prepare(q)
    inode = seg(tmp_path, 0).stat().st_ino
    assert [q.read() is not None for _ in range(4)] == [True] * 4  # segment 0 consumed
    assert not seg(tmp_path, 0).exists() and not spare(tmp_path).exists()
    assert Path(pool.paths[0]).stat().st_ino == inode and pool.filling
    q.put(records(6, 30))  # fills segment 1, the rest go to segment 2 (prepared)
    assert [q.read() is not None for _ in range(19)] == [True] * 19  # segment 1 consumed
    assert not seg(tmp_path, 1).exists()
    assert spare(tmp_path).exists()  # kept as its own spare: no prepared file by then
    q.close()


# -- the store ----------------------------------------------------------------------------
async def test_the_store_zeros_a_segment_a_queue_could_not_keep_for_the_next_new_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistence, "POOL_QUIET", 0.01)
    store = segment_store(tmp_path)
    q = store.open_queue("t")
    q.put(records(0, 25))  # segment 0 appended full, segment 1 appended
    spare(tmp_path).write_bytes(b"its own spare")  # so it cannot keep another
    inode = seg(tmp_path, 0).stat().st_ino
    read = [q.read() for _ in range(20)]
    q.finish_many([item[1] for item in read if item is not None])
    assert None not in read
    q.sync_now()  # the position past segment 0 is on disk: its removal job goes out
    pool = store._pool
    assert pool is not None
    await wait_for(lambda: pool.ready == 1)
    assert pooled(pool) == (inode, bytes(SEGMENT))
    u = store.open_queue("u")
    u.put(records(0, 1))
    assert seg(tmp_path, 0, "u").stat().st_ino == inode
    await store.close([q, u])
    assert not any(n.startswith("nsqd.segment.") for n in names(tmp_path))
    assert seg(tmp_path, 0, "u").read_bytes() == framed(records(0, 1))


async def test_the_store_writes_no_zeros_while_commits_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistence, "POOL_QUIET", 60.0)  # the test fires the timer itself
    store = segment_store(tmp_path)
    q = store.open_queue("t")
    pool = store._pool
    assert pool is not None
    offered(tmp_path, pool, "consumed", b"\xff" * SEGMENT)

    def quiet_ends() -> None:  # POOL_QUIET ran out: what its timer does
        timer = store._pool_timer
        assert timer is not None and not store._pool_stepping  # waiting, no step under way
        timer.cancel()
        store._pool_resume()

    answers: list[bool] = []

    async def commit() -> None:
        q.put([b"m" * 40])
        store.wrote(q)
        store.after_commit(answers.append)
        await wait_for(lambda: len(answers) == 1)
        assert answers.pop()

    store._fill_pool()  # the first look: it has not seen the disk quiet yet
    first = store._pool_timer
    store._fill_pool()  # another removal done meanwhile: still the one look, and no step
    assert first is not None and store._pool_timer is first and not store._pool_stepping
    for _ in range(3):  # a commit started within each quiet wait: no step
        await commit()
        quiet_ends()
        assert pool.filling and pooled(pool)[1] == b"\xff" * SEGMENT
    quiet_ends()  # no commit since the last look: the zeros go
    await wait_for(lambda: pool.ready == 1)
    assert pooled(pool)[1] == bytes(SEGMENT)
    offered(tmp_path, pool, "another", b"\xff" * SEGMENT)
    await commit()
    store._fill_pool()
    assert store._pool_timer is not None  # a look due when the store closes...
    await store.close([q])
    assert store._pool_timer is None  # ...is called off
    assert not any(n.startswith("nsqd.segment.") for n in names(tmp_path))  # not kept


def test_a_disk_mode_store_removes_stale_pooled_files_and_keeps_none(tmp_path: Path) -> None:
    (tmp_path / "nsqd.segment.0.tmp").write_bytes(b"left by a durable run")
    asyncio.run(disk_mode_store_closed(tmp_path))
    assert names(tmp_path) == set()


async def disk_mode_store_closed(tmp_path: Path) -> None:
    store = segment_store(tmp_path, durable=False)
    assert store._pool is None
    await store.close([])


async def test_a_failed_step_does_not_stop_the_store_filling_the_other_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(persistence, "POOL_QUIET", 0.01)
    store = segment_store(tmp_path)
    pool = store._pool
    assert pool is not None
    offered(tmp_path, pool, "lost", b"\xff" * SEGMENT)
    inode = offered(tmp_path, pool, "kept", b"\xff" * SEGMENT)
    os.unlink(pool.paths[0])  # the disk lost the first
    store._fill_pool()
    await wait_for(lambda: pool.ready == 1)
    assert pooled(pool, 1) == (inode, bytes(SEGMENT))
    assert "failed to prepare a pooled segment" in caplog.text
    await store.close([])

"""The stream reader's offset and batch bookkeeping, on a scripted inbox (no Spark, no nsqd)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from nsqpy.spark import payload
from nsqpy.spark.ingest import IngestStats
from nsqpy.spark.offsets import Offset
from nsqpy.spark.options import parse_read_options
from nsqpy.spark.stream_core import Limits, StreamCore

ALL = Limits(max_count=1 << 30, max_bytes=1 << 30)


@dataclass
class FakeMessage:
    body: bytes
    id: bytes = b"0123456789abcdef"
    timestamp: int = 1_700_000_000_123_456_789
    attempts: int = 1
    nsqd_address: str = "127.0.0.1:4150"


@dataclass
class FakeIngest:
    """Stands in for Ingest: an inbox the test fills, and a record of what was FINished."""

    inbox: deque[FakeMessage] = field(default_factory=deque)
    finished: list[FakeMessage] = field(default_factory=list)
    stats: IngestStats = field(default_factory=IngestStats)
    started: bool = True  # never start: no connections, no SIGTERM handler in pytest
    fail_finish: bool = False
    waits: list[float] = field(default_factory=list)

    def take(self, max_count: int, max_bytes: int, wait: float, cut_ns: Any = None) -> list[Any]:
        self.waits.append(wait)
        return [self.inbox.popleft() for _ in range(min(max_count, len(self.inbox)))]

    def available(self) -> int:
        return len(self.inbox)

    def finish(self, msgs: list[FakeMessage]) -> None:
        if self.fail_finish:
            raise RuntimeError("event loop is closed")
        self.finished.extend(msgs)

    def shutdown(self, *, requeue: bool, timeout: float = 2.0) -> None:
        pass


def core(**options: str) -> tuple[StreamCore, FakeIngest]:
    fake = FakeIngest()
    opts = parse_read_options({"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c", **options})
    return StreamCore(opts, fake), fake  # type: ignore[arg-type]


def fill(fake: FakeIngest, n: int, prefix: str = "m") -> None:
    fake.inbox.extend(FakeMessage(f"{prefix}{i}".encode()) for i in range(n))


def test_batches_are_numbered_held_and_finished_on_the_next_commit() -> None:
    c, fake = core()
    fill(fake, 5)
    start = Offset()
    end = c.latest(start, Limits(3, 1 << 30))
    assert end == Offset(3, 0)
    parts = c.partitions(start, end)
    assert sum(p.count for p in parts) == 3
    assert fake.finished == []  # not before Spark commits
    end2 = c.latest(end, ALL)
    assert end2 == Offset(5, 0)
    c.commit(end)  # Spark commits batch 0 while planning batch 1
    assert [m.body for m in fake.finished] == [b"m0", b"m1", b"m2"]
    c.commit(end2)
    assert len(fake.finished) == 5 and c.pending == {}


def test_tick_forces_a_batch_only_while_one_waits_for_its_commit() -> None:
    c, fake = core()
    fill(fake, 2)
    end = c.latest(Offset(), ALL)
    ticked = c.latest(end, ALL)  # nothing new, batch (0, 2] uncommitted
    assert ticked == Offset(2, 1)
    assert fake.waits[-1] == 0  # no waiting when a commit is due
    assert c.partitions(end, ticked) == []  # start.seq == end.seq: an empty batch
    c.commit(ticked)
    assert len(fake.finished) == 2
    assert c.latest(ticked, ALL) == ticked  # idle and nothing to commit: no batch
    assert fake.waits[-1] == c.opts.poll_timeout


def test_without_commit_tick_an_idle_source_leaves_the_batch_waiting() -> None:
    c, fake = core(commitTick="false")
    fill(fake, 2)
    end = c.latest(Offset(), ALL)
    assert c.latest(end, ALL) == end


def test_replayed_unknown_batch_is_empty_and_counted() -> None:
    c, _ = core()
    assert c.partitions(Offset(100, 0), Offset(250, 0)) == []
    assert c.replay_unknown == 1


def test_asked_again_for_the_same_start_returns_the_same_batch() -> None:
    c, fake = core()
    fill(fake, 4)
    end = c.latest(Offset(7, 2), ALL)
    fill(fake, 4, "n")
    assert c.latest(Offset(7, 2), ALL) == end == Offset(11, 2)
    assert len(fake.inbox) == 4  # the second call took nothing


def test_min_records_wait_for_more_until_the_max_trigger_delay() -> None:
    c, fake = core(minRecordsPerBatch="10", maxTriggerDelay="1h")
    fill(fake, 9)
    limits = Limits(100, 1 << 30, min_count=10)
    assert c.latest(Offset(), limits) == Offset()
    fill(fake, 1, "x")
    assert c.latest(Offset(), limits) == Offset(10, 0)

    c2, fake2 = core(minRecordsPerBatch="10", maxTriggerDelay="0s")
    fill(fake2, 3)
    assert c2.latest(Offset(), limits) == Offset(3, 0)  # the delay has passed: take what is there


def test_commit_never_raises() -> None:
    c, fake = core()
    fill(fake, 3)
    end = c.latest(Offset(), ALL)
    fake.fail_finish = True
    c.commit(end)
    assert fake.stats.fin_failed == 3


def test_partitions_split_by_count_and_carry_every_column() -> None:
    c, fake = core(numPartitions="3")
    fill(fake, 10)
    end = c.latest(Offset(), ALL)
    parts = c.partitions(Offset(), end)
    assert [p.count for p in parts] == [4, 4, 2]
    first = parts[0]
    assert first.bodies == b"m0m1m2m3"
    assert first.nsqd_names == ("127.0.0.1:4150",)
    assert (first.topic, first.channel) == ("t", "c")


def test_payload_becomes_the_arrow_batch_spark_expects() -> None:
    pa = pytest.importorskip("pyarrow")
    msgs = [FakeMessage(b"", nsqd_address="a:1"), FakeMessage(b"x" * 300, attempts=7,
                                                             nsqd_address="b:2")]
    batch = payload.to_record_batch(payload.build(msgs, "topic", "chan"))  # type: ignore[arg-type]
    assert batch.schema.equals(payload.arrow_schema())
    assert batch.column("body").to_pylist() == [b"", b"x" * 300]
    assert batch.column("id").to_pylist() == ["0123456789abcdef"] * 2
    assert batch.column("attempts").to_pylist() == [1, 7]
    assert batch.column("nsqd").to_pylist() == ["a:1", "b:2"]
    assert batch.column("topic").to_pylist() == ["topic"] * 2
    stamp = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamp == [1_700_000_000_123_456] * 2  # ns -> us


def test_spark_read_limits_map_onto_the_options() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        ReadMinRows,
    )

    from nsqpy.spark.stream_reader import limits_for

    opts = parse_read_options({"nsqd": "a:1", "topic": "t", "channel": "c", "maxInFlight": "900",
                               "maxBytesPerBatch": "5000", "minRecordsPerBatch": "7"})
    assert limits_for(ReadMaxRows(50), opts) == Limits(50, 5000, 7)
    assert limits_for(ReadMaxBytes(100), opts) == Limits(300, 100, 7)
    assert limits_for(ReadMinRows(9), opts) == Limits(300, 5000, 9)
    # AvailableNow: everything held, min records ignored (the run must end)
    assert limits_for(ReadAllAvailable(), opts) == Limits(900, 5000, 0)

"""The reader's dispatch between its two ways to read, without Spark running or nsqd.

A query may change its way at a restart (``mode=auto`` decides again): each way must take
over the other's offsets.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from nsqpy.spark.lease_core import Finished, LeaseCore
from nsqpy.spark.lease_plan import LeaseSplit
from nsqpy.spark.offsets import LeaseOffset, LeaseRef, Offset
from nsqpy.spark.options import parse_read_options
from nsqpy.spark.stream_core import StreamCore

from .test_stream_core import FakeIngest, fill

pytest.importorskip("pyspark")

from nsqpy.spark.stream_reader import NsqStreamReader

A = "10.0.0.1:4150"
LEASED = LeaseOffset("q1", 7, (LeaseRef(A, "q1.7.x.0", 3, 30), LeaseRef(A, "q1.7.x.1", 2, 20)))


class RecordingLinks:
    def __init__(self) -> None:
        self.finished: list[str] = []

    def finish(self, leases: Any) -> Finished:
        self.finished.extend(ref.name for ref in leases)
        return Finished(done=len(leases))

    def close(self) -> None:
        pass


def driver_reader(fake: FakeIngest, links: RecordingLinks, mode: str = "driver") -> NsqStreamReader:
    opts = parse_read_options({"nsqd": A, "topic": "t", "channel": "c", "mode": mode})
    reader = NsqStreamReader(opts)
    reader._mode = "driver"  # as _decide would have chosen
    reader._core = StreamCore(opts, fake)  # type: ignore[arg-type]
    reader._leases = LeaseCore(opts, links, "q2")  # type: ignore[arg-type]
    return reader


def test_a_driver_side_run_finishes_the_lease_batch_it_starts_after() -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    fake, links = FakeIngest(), RecordingLinks()
    reader = driver_reader(fake, links, mode="auto")
    start = LEASED.to_json()
    # nothing new: Spark gets its own start back (no batch), and the lease batch is FINished
    assert reader.latestOffset(start, ReadMaxRows(100)) == start
    assert links.finished == ["q1.7.x.0", "q1.7.x.1"]
    fill(fake, 3)
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == Offset(3, 0).to_json()  # driver-side offsets from here on
    assert sum(p.value.count for p in reader.partitions(start, end)) == 3
    assert links.finished == ["q1.7.x.0", "q1.7.x.1"]  # once


def test_a_lease_batch_left_by_an_earlier_run_is_read_and_finished_through_its_leases() -> None:
    fake, links = FakeIngest(), RecordingLinks()
    reader = driver_reader(fake, links)
    parts = reader.partitions(Offset(5, 0).to_json(), LEASED.to_json())
    assert [p.value for p in parts] == [LeaseSplit((LEASED.leases[0],)),
                                        LeaseSplit((LEASED.leases[1],))]  # fmt: skip
    reader.commit(LEASED.to_json())
    assert links.finished == ["q1.7.x.0", "q1.7.x.1"]
    reader.commit(Offset(9, 0).to_json())  # a driver-side end: the driver core's business
    assert fake.finished == []


def test_initial_offsets_and_pickling() -> None:
    opts = parse_read_options({"nsqd": A, "topic": "t", "channel": "c"})
    reader = NsqStreamReader(opts)
    initial = reader.initialOffset()
    assert initial == {"v": 2, "q": reader._token, "batch": 0, "leases": []}
    assert len(reader._token) == 12
    copy = pickle.loads(pickle.dumps(reader))  # the executors' copy: no cores, no connections
    assert (copy._opts, copy._token, copy._core, copy._leases) == (opts, reader._token, None,
                                                                   None)  # fmt: skip
    driver = NsqStreamReader(parse_read_options({"nsqd": A, "topic": "t", "channel": "c",
                                                 "mode": "driver"}))  # fmt: skip
    assert driver.initialOffset() == {"v": 1, "seq": 0, "tick": 0}

"""How the stream chooses its way to read, on a real local Spark.

Through leases with two nsqpy nsqds found through nsqlookupd (exactly once); driver-side with
Go nsqd v1.3.0, which has no leases (at least once); and ``mode=lease`` refusing Go nsqd.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import numbered, publish
from .daemons import GO_NSQD, GoNsqd, Lookupd, Nsqd, wait_until
from .test_stream import parquet_rows, stream, to_parquet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

go_needed = pytest.mark.skipif(
    not GO_NSQD.exists(),
    reason=f"no Go nsqd at {GO_NSQD} (build it with /work/shared/tools/build-go-nsq.sh, or set "
    "NSQPY_GO_NSQD)",
)


@pytest.fixture
def lookupd() -> Iterator[Lookupd]:
    daemon = Lookupd()
    yield daemon
    daemon.stop()


def offset_version(tmp_path: Path) -> int:
    """The version of batch 0's offset: 2 through leases, 1 driver-side."""
    last = (tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[-1]
    return int(json.loads(last)["v"])


def test_two_nsqds_found_through_lookupd_are_read_through_leases_exactly_once(
    spark: SparkSession, lookupd: Lookupd, tmp_path: Path
) -> None:
    registered = (f"--lookupd-tcp-address={lookupd.tcp_address}", "--broadcast-address=127.0.0.1")
    nsqds = [Nsqd(tmp_path / f"nsqd{i}", *registered) for i in range(2)]
    try:
        sent = {n.tcp_address: numbered(1500, prefix=f"n{i}-") for i, n in enumerate(nsqds)}
        for nsqd in nsqds:
            publish(nsqd.tcp_address, "both", sent[nsqd.tcp_address])
        wait_until(lambda: len(lookupd.get("/lookup?topic=both")["producers"]) == 2, 30,
                   "lookupd to list both nsqds")  # fmt: skip
        options = {"lookupd": lookupd.http_address, "topic": "both", "channel": "spark",
                   "maxRecordsPerBatch": "800"}  # fmt: skip
        query = to_parquet(stream(spark, options), tmp_path, availableNow=True)
        assert query.awaitTermination(120), "AvailableNow did not finish"
        assert query.exception() is None

        rows = parquet_rows(spark, tmp_path)
        by_nsqd: dict[str, list[bytes]] = {}
        for row in rows:
            by_nsqd.setdefault(row.nsqd, []).append(bytes(row.body))
        assert {a: Counter(b) for a, b in by_nsqd.items()} == {a: Counter(b)
                                                               for a, b in sent.items()}
        assert len({(r.nsqd, r.id) for r in rows}) == 3000 and {r.attempts for r in rows} == {1}
        assert offset_version(tmp_path) == 2
        batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
        assert max(batches) <= 800 and sum(batches) == 3000
        for nsqd in nsqds:  # every lease FINished, nothing requeued or timed out
            stats = nsqd.channel("both", "spark")
            assert (stats["depth"], stats["in_flight_count"], stats["requeue_count"],
                    stats["timeout_count"]) == (0, 0, 0, 0)  # fmt: skip
    finally:
        for nsqd in nsqds:
            nsqd.stop()


@go_needed
def test_go_nsqd_is_read_driver_side_at_least_once(spark: SparkSession, tmp_path: Path) -> None:
    nsqd = GoNsqd(tmp_path / "go", "--max-rdy-count=5000")
    try:
        bodies = numbered(2000)
        publish(nsqd.tcp_address, "go", bodies)
        options = {"nsqd": nsqd.tcp_address, "topic": "go", "channel": "spark",
                   "maxInFlight": "3000", "maxRecordsPerBatch": "700"}  # fmt: skip
        query = to_parquet(stream(spark, options), tmp_path, availableNow=True)
        assert query.awaitTermination(120), "AvailableNow did not finish"
        assert query.exception() is None
        rows = parquet_rows(spark, tmp_path)
        assert set(Counter(bytes(r.body) for r in rows)) == set(bodies)  # each at least once
        assert offset_version(tmp_path) == 1  # it fell back to the driver-side path
        wait_until(lambda: (s := nsqd.channel("go", "spark"))["depth"] == 0
                   and s["in_flight_count"] == 0, 30, "Go nsqd's channel drained")  # fmt: skip
    finally:
        nsqd.stop()


@go_needed
def test_mode_lease_refuses_go_nsqd_readably(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    nsqd = GoNsqd(tmp_path / "go")
    try:
        publish(nsqd.tcp_address, "go", [b"x"])
        options = {"nsqd": nsqd.tcp_address, "topic": "go", "channel": "spark", "mode": "lease"}
        query = to_parquet(stream(spark, options), tmp_path, availableNow=True)
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(120)
        assert f"nsq source: nsqd {nsqd.tcp_address} has no leases (Go nsqd?)" in str(info.value)
        assert nsqd.topic_depth("go") == 1 and nsqd.channel("go", "spark") == {}  # untouched
    finally:
        nsqd.stop()

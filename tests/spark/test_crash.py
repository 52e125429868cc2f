"""SIGKILL of the whole driver (JVM, source runner, workers) mid-stream, then a restart.

Driver-side reading: at-least-once. (Through leases, exactly-once: test_lease_crash.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import NsqdFactory, numbered, publish
from .daemons import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

DRIVER = Path(__file__).with_name("crash_driver.py")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def test_driver_killed_mid_stream_loses_nothing(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(5000)
    publish(nsqd.tcp_address, "crash", bodies)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with open(tmp_path / "driver.log", "wb") as log:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), nsqd.tcp_address, "crash", str(out), str(checkpoint),
             "--mode", "driver"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until(lambda: _committed(checkpoint) >= 2 or driver.poll() is not None, 150,
                   "two committed batches")
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()
        assert nsqd.channel("crash", "spark")["in_flight_count"] > 0  # mid-stream
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
        wait_until(lambda: not _group_alive(driver.pid), 30, "the whole driver group to die")
    finally:
        if _group_alive(driver.pid):
            os.killpg(driver.pid, signal.SIGKILL)
    killed_at = _committed(checkpoint)
    assert nsqd.channel("crash", "spark")["depth"] > 0  # the kill left work behind

    restarted = (
        spark.readStream.format("nsq")
        .options(nsqd=nsqd.tcp_address, topic="crash", channel="spark", msgTimeout="3s",
                 mode="driver")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out)).option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: (s := nsqd.channel("crash", "spark"))["depth"] == 0
            and s["in_flight_count"] == 0,
            120, "the restarted query to FIN everything",
        )
    finally:
        restarted.stop()
    assert restarted.exception() is None
    assert _committed(checkpoint) > killed_at  # it did continue from the checkpoint

    ids_by_body: dict[bytes, set[tuple[str, str]]] = defaultdict(set)
    for row in spark.read.parquet(str(out)).collect():
        ids_by_body[bytes(row.body)].add((row.nsqd, row.id))
    assert set(ids_by_body) == set(bodies)  # nothing lost
    # a duplicate is a redelivery of the same message: deduplicating by (nsqd, id) is exact
    assert all(len(ids) == 1 for ids in ids_by_body.values())

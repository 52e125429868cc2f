"""Exactly-once through leases: kill -9 mid-batch (an executor's Python worker, or the whole
driver), and every published message is in the Parquet output exactly once.

Each message's ``attempts`` stays 1: no message was delivered twice by nsqd; a retried task or
a restarted query read the same leases again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import NsqdFactory, numbered, publish
from .crash_driver import OPTIONS
from .daemons import Nsqd, wait_until
from .test_crash import DRIVER, _committed, _group_alive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def start_driver(nsqd: Nsqd, topic: str, tmp_path: Path, *extra: str) -> subprocess.Popen[bytes]:
    with open(tmp_path / "driver.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), nsqd.tcp_address, topic, str(tmp_path / "out"),
             str(tmp_path / "checkpoint"), "--mode", "lease", *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def kill_group(driver: subprocess.Popen[bytes]) -> None:
    if _group_alive(driver.pid):
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(30)
    wait_until(lambda: not _group_alive(driver.pid), 30, "the whole driver group to die")


def python_workers(root: int) -> list[int]:
    """Spark's Python task workers under ``root``: processes forked by a ``pyspark.daemon``
    that serves ``pyspark.worker`` (the default). Daemons for other worker modules
    (``pyspark.sql.worker.*``: creating or planning the data source) fork the driver's helpers,
    whose death fails the query instead of a task."""
    procs: dict[int, tuple[int, bytes]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except OSError:
                continue
            procs[int(entry.name)] = (ppid, cmd)
    daemons = {pid for pid, (_, cmd) in procs.items() if _task_daemon(cmd)}

    def under_root(pid: int) -> bool:
        while pid in procs and pid != root:
            pid = procs[pid][0]
        return pid == root

    return [pid for pid in daemons if procs[pid][0] in daemons and under_root(pid)]


def _task_daemon(cmdline: bytes) -> bool:
    args = [arg for arg in cmdline.split(b"\0") if arg]
    if b"pyspark.daemon" not in args:
        return False
    module = args[args.index(b"pyspark.daemon") + 1 :]
    return module in ([], [b"pyspark.worker"])


def kill_workers_until_a_task_is_lost(
    driver: subprocess.Popen[bytes], log: Path, root: int, wait: float
) -> None:
    """kill -9 the task workers under ``root`` (waiting up to ``wait`` s for one) until Spark's
    ``log`` shows a lost task; at most 10 rounds. The driver must live through it. Every worker
    found goes in a round: killed one at a time, none of a CI run's kills had cost a task
    before the query finished (a worker idle between tasks dies unnoticed)."""
    killed = 0
    while "Lost task" not in log.read_text() and killed < 10:
        wait_until(lambda: bool(python_workers(root)) or driver.poll() is not None, wait,
                   "a Python worker running a task")  # fmt: skip
        assert driver.poll() is None, log.read_text()[-3000:]
        for pid in python_workers(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed += 1
        try:  # no task lost (only idle workers died): another round
            wait_until(lambda: "Lost task" in log.read_text(), 3, "a lost task")
        except AssertionError:
            continue
    # Spark words a killed worker's failure in more than one way ("Python worker exited
    # unexpectedly", a reset connection, ...): what counts is that a task was lost to it
    assert "Lost task" in log.read_text(), "no task was lost to the killed workers"


def assert_exactly_once(spark: SparkSession, tmp_path: Path, nsqd: Nsqd, topic: str,
                        bodies: list[bytes]) -> None:  # fmt: skip
    rows = spark.read.parquet(str(tmp_path / "out")).collect()  # honours _spark_metadata
    assert Counter(bytes(r.body) for r in rows) == Counter(bodies)  # none lost, none twice
    assert len({(r.nsqd, r.id) for r in rows}) == len(bodies)
    assert {r.attempts for r in rows} == {1}  # nsqd never delivered a message twice
    stats = nsqd.channel(topic, "spark")
    assert (stats["depth"], stats["in_flight_count"]) == (0, 0)
    assert (stats["requeue_count"], stats["timeout_count"]) == (0, 0)
    first = (tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[-1]
    assert json.loads(first)["v"] == 2  # read through leases


def test_driver_killed_mid_batch_restarts_from_the_checkpoint_exactly_once(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(5000)
    publish(nsqd.tcp_address, "lcrash", bodies)
    checkpoint = tmp_path / "checkpoint"
    driver = start_driver(nsqd, "lcrash", tmp_path)
    try:
        wait_until(lambda: _committed(checkpoint) >= 2 or driver.poll() is not None, 150,
                   "two committed batches")  # fmt: skip
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()
        assert nsqd.channel("lcrash", "spark")["in_flight_count"] > 0  # a batch is leased
    finally:
        kill_group(driver)
    killed_at = _committed(checkpoint)
    assert nsqd.channel("lcrash", "spark")["depth"] > 0  # the kill left work behind

    restarted = (
        spark.readStream.format("nsq")
        .options(nsqd=nsqd.tcp_address, topic="lcrash", mode="lease", **OPTIONS)
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out")).option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: (s := nsqd.channel("lcrash", "spark"))["depth"] == 0
            and s["in_flight_count"] == 0,
            120, "the restarted query to FIN everything",
        )
    finally:
        restarted.stop()
    assert restarted.exception() is None
    assert _committed(checkpoint) > killed_at  # it did continue from the checkpoint
    assert_exactly_once(spark, tmp_path, nsqd, "lcrash", bodies)


def test_executor_worker_killed_mid_batch_is_retried_exactly_once(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(4000)
    publish(nsqd.tcp_address, "lworker", bodies)
    log = tmp_path / "driver.log"
    # local[2,4]: a failed task is tried again up to 4 times, as on a cluster
    driver = start_driver(nsqd, "lworker", tmp_path, "--master", "local[2,4]", "--slow", "0.3",
                          "--available-now")  # fmt: skip
    try:
        kill_workers_until_a_task_is_lost(driver, log, driver.pid, 120)
        assert driver.wait(150) == 0, log.read_text()[-3000:]
    finally:
        kill_group(driver)
    assert "done" in log.read_text()  # AvailableNow drained the topic and ended
    assert_exactly_once(spark, tmp_path, nsqd, "lworker", bodies)

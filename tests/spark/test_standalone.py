"""A Spark standalone cluster from the pyspark package (nsqpy.spark.standalone and
``nsqpy-spark-cluster``), and nsqpy's jobs submitted to it with ``--master spark://...``."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from nsqpy.spark.session import loopback_driver_host
from nsqpy.spark.standalone import (
    ClusterConfig,
    StandaloneCluster,
    group_members,
    memory_mib,
)

from .conftest import NsqdFactory, numbered, publish
from .daemons import wait_until
from .test_crash import DRIVER
from .test_lease_crash import assert_exactly_once, kill_group, kill_workers_until_a_task_is_lost

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CLUSTER_CLI = [sys.executable, "-m", "nsqpy.cli.nsqpy_spark_cluster"]


# ------------------------------------------------------------------------ no Spark needed


@pytest.mark.parametrize(
    ("master", "conf", "env", "expected"),
    [
        ("spark://127.0.0.1:7077", {}, {}, "127.0.0.1"),
        ("spark://localhost:7077", {}, {}, "127.0.0.1"),
        ("spark://127.0.0.2:7077,127.0.0.1:7078", {}, {}, "127.0.0.2"),
        ("spark://[::1]:7077", {}, {}, "::1"),
        ("spark://10.0.0.5:7077", {}, {}, None),  # a real cluster: the user's choice
        ("spark://127.0.0.1:7077,10.0.0.5:7077", {}, {}, None),
        ("local[2]", {}, {}, None),
        ("spark://127.0.0.1:7077", {"spark.driver.host": "10.1.1.1"}, {}, None),
        ("spark://127.0.0.1:7077", {}, {"SPARK_LOCAL_IP": "10.1.1.1"}, None),
    ],
)
def test_driver_advertises_loopback_only_for_a_loopback_master(
    master: str, conf: dict[str, str], env: dict[str, str], expected: str | None
) -> None:
    assert loopback_driver_host(master, conf, env) == expected


def test_worker_memory_sizes() -> None:
    assert memory_mib("512m") == 512
    assert memory_mib("2G") == 2048
    for bad in ("2", "2gb", "0m", "-1g", ""):
        with pytest.raises(ValueError, match="memory must"):
            memory_mib(bad)


def test_config_refuses_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="workers must be at least 1"):
        ClusterConfig(workers=0)
    with pytest.raises(ValueError, match="an address the workers and the driver can reach"):
        ClusterConfig(host="0.0.0.0")
    with pytest.raises(ValueError, match="master_port must be a port number"):
        ClusterConfig(master_port=70000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "must be at least 1, got 0"),
        (["--memory", "lots"], "memory must look like 512m or 2g"),
        (["--master-port", "99999"], "not a port"),
        (["--host", "0.0.0.0"], "an address the workers and the driver can reach"),
    ],
)
def test_cli_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run([*CLUSTER_CLI, *args], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert done.stderr.startswith("usage: nsqpy-spark-cluster")


# ------------------------------------------------------------------------ real clusters

pyspark_needed = pytest.mark.skipif(
    importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed"
)


def processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory`` or below it: the daemons run in the
    work dir and executors in their application directory under it. (A deleted directory
    reads as ``<path> (deleted)``, so the test is on the text.)"""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and (
            cwd == str(directory)
            or cwd.startswith(f"{directory}/")
            or cwd == f"{directory} (deleted)"
        ):
            found.append(int(entry.name))
    return found


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """One master and one 2-core worker on free ports; stopped (and checked) afterwards."""
    work = tmp_path / "spark"
    standalone = StandaloneCluster(ClusterConfig(
        workers=1, cores=2, memory="1g", master_port=0, webui_port=0, work_dir=str(work),
        start_timeout=90,
    ))  # fmt: skip
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()


@pyspark_needed
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_archive_runs_on_a_standalone_cluster(
    cluster: StandaloneCluster, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    assert cluster.master_url.startswith("spark://127.0.0.1:")
    workers = cluster.alive_workers()
    assert [(w["host"], w["cores"], w["memory"]) for w in workers] == [("127.0.0.1", 2, 1024)]
    nsqd = nsqd_proc("--max-rdy-count=2000")
    bodies = numbered(300, prefix="cluster")
    publish(nsqd.tcp_address, "on_cluster", bodies)
    output, checkpoint = tmp_path / "archive", tmp_path / "checkpoint"

    done = subprocess.run(
        [sys.executable, "-m", "nsqpy.cli.nsqpy_archive", "--master", cluster.master_url,
         "--topic", "on_cluster", "--nsqd-tcp-address", nsqd.tcp_address, "--output",
         str(output), "--checkpoint", str(checkpoint), "--available-now",
         "--max-in-flight", "2000"],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    assert "archived 300 messages" in done.stdout, done.stdout
    table = pq.read_table(output)  # the dataset reader skips _spark_metadata
    assert sorted(table.column("body").to_pylist()) == bodies
    assert set(table.column("topic").to_pylist()) == {"on_cluster"}
    channel = nsqd.channel("on_cluster", "nsqpy_archive")
    assert (channel["depth"], channel["in_flight_count"]) == (0, 0)  # FINished: committed
    source_offset = (checkpoint / "offsets" / "0").read_text().splitlines()[-1]
    assert json.loads(source_offset)["v"] == 2  # read through leases
    # It ran on the cluster's executor, not in a local[*] driver...
    apps = cluster.state()["completedapps"]
    assert [(a["name"], a["state"], a["cores"]) for a in apps] == [("nsqpy-archive", "FINISHED", 2)]
    stderr = next((cluster.work_dir / "worker-1").glob("app-*/0/stderr")).read_text()
    assert "Successfully registered with driver" in stderr
    # ... which called the driver back on loopback (build_session set spark.driver.host).
    assert '--driver-url" "spark://CoarseGrainedScheduler@127.0.0.1:' in stderr

    daemons = [cluster.master, *cluster.workers]
    cluster.stop()
    for daemon in daemons:
        assert daemon is not None
        assert daemon.proc.poll() is not None, f"{daemon.name} still running"
        assert group_members(daemon.pid) == [], f"{daemon.name} left processes behind"
    assert processes_in(cluster.work_dir) == []


@pyspark_needed
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_lease_stream_on_a_cluster_survives_a_killed_executor_worker_exactly_once(
    cluster: StandaloneCluster, spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    """The executors of a real cluster fetch their leases from nsqd; a Python worker killed
    mid-batch fails its task, and the retry reads the same leases again."""
    nsqd = nsqd_proc("--max-rdy-count=10000")
    bodies = numbered(3000, prefix="leased")
    publish(nsqd.tcp_address, "on_cluster", bodies)
    worker = cluster.workers[0].pid
    log = tmp_path / "driver.log"
    with open(log, "wb") as out:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), nsqd.tcp_address, "on_cluster", str(tmp_path / "out"),
             str(tmp_path / "checkpoint"), "--mode", "lease", "--master", cluster.master_url,
             "--slow", "0.3", "--available-now"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        kill_workers_until_a_task_is_lost(driver, log, worker, 150)
        assert driver.wait(150) == 0, log.read_text()[-3000:]
    finally:
        kill_group(driver)
    assert_exactly_once(spark, tmp_path, nsqd, "on_cluster", bodies)
    apps = cluster.state()["completedapps"]
    assert [(a["name"], a["state"]) for a in apps] == [("nsqpy-crash-driver", "FINISHED")]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def documented_command() -> list[str]:
    """The arguments of the ``nsqpy-spark-cluster`` line in docs/spark.md, so that the
    documented command is the one tested, verbatim."""
    lines = [line for line in DOCS.read_text().splitlines()
             if line.startswith(".venv/bin/nsqpy-spark-cluster ")]  # fmt: skip
    assert len(lines) == 1, lines
    return lines[0].split("#")[0].split()[1:]


@pyspark_needed
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_documented_cluster_command_starts_then_stops_on_sigterm() -> None:
    args = documented_command()
    assert "--workers" in args
    proc = subprocess.Popen([*CLUSTER_CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.extend(proc.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(line.startswith("run the jobs with: --master spark://")
                               for line in lines) or proc.poll() is not None, 120,
                   "the cluster to be up")  # fmt: skip
        assert proc.poll() is None, (lines, proc.stderr.read() if proc.stderr else "")
        url = next(line.split()[-1] for line in lines if line.startswith("run the jobs with"))
        webui = next(line.split("web UI ")[1].split("/,")[0] for line in lines
                     if line.startswith("master "))  # fmt: skip
        work = Path(next(line.split(maxsplit=2)[2].strip() for line in lines
                         if line.startswith("work dir ")))  # fmt: skip
        with urllib.request.urlopen(f"{webui}/json/", timeout=10) as reply:
            state = json.loads(reply.read())
        assert state["url"] == url
        workers = args[args.index("--workers") + 1]
        assert [w["state"] for w in state["workers"]] == ["ALIVE"] * int(workers)
        assert processes_in(work), "the daemons run in the work dir"

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert "stopping the workers and the master\n" in lines
    assert processes_in(work) == []
    assert not work.exists()  # the temporary work dir is removed
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{webui}/json/", timeout=5)

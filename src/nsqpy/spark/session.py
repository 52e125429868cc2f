"""A SparkSession for nsqpy's jobs: checked environment, right Python, ``nsq`` registered."""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from nsqpy.spark.env import SparkSetupError, check_java, check_packages

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("nsqpy.spark")

DRIVER_HOST: Final = "spark.driver.host"
#: The data source's short name: ``spark.readStream.format(FORMAT)``.
FORMAT: Final = "nsq"


def register(spark: SparkSession) -> None:
    """Make ``format("nsq")`` available in ``spark``.

    The source runs in Spark's Python workers, whose interpreter (``PYSPARK_PYTHON`` when the
    session was made, else ``python3``) is fixed here, at registration. With a local master
    they are this machine's, so one that cannot import nsqpy is replaced by this interpreter;
    on a cluster that would be a guess, so SparkSetupError says what to set instead of a
    ``ModuleNotFoundError`` deep in a worker.
    """
    check_packages()
    context = spark.sparkContext
    problem = worker_python_problem(context.pythonExec)
    if problem is not None:
        if not (context.master or "").startswith("local"):
            raise SparkSetupError(
                f"Spark's Python workers run {context.pythonExec!r}, which {problem}: set "
                "PYSPARK_PYTHON (or spark.pyspark.python) to an interpreter with nsqpy and "
                "pyarrow installed on every node before the SparkSession is created, or make "
                "it with nsqpy.spark.build_session"
            )
        log.info("Python workers: %s %s; using %s", context.pythonExec, problem, sys.executable)
        context.pythonExec = sys.executable
    from nsqpy.spark.source import NsqDataSource

    spark.dataSource.register(NsqDataSource)


def worker_python_problem(python: str) -> str | None:
    """Why ``python`` cannot run the nsq source's worker side (None if it can, or if it is
    not on this machine, where only the cluster's nodes can tell)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return None
    found = shutil.which(python)
    if found is None:
        return None
    try:
        result = subprocess.run(
            [found, "-c", "import nsqpy.spark.source, pyarrow"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"could not be run ({err})"
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines()
    why = lines[-1] if lines else f"exit status {result.returncode}"
    return f"cannot import the nsq source ({why})"


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_driver_host(
    master: str, conf: Mapping[str, str], env: Mapping[str, str]
) -> str | None:
    """The address the driver must advertise for a standalone master on this machine's
    loopback (``spark://127.0.0.1:7077``), or None when nothing needs setting.

    Spark's driver advertises the host name's address, and where that resolves to loopback it
    picks the first other interface instead: executors of a master on 127.0.0.1 would then call
    the driver back on an external address, which a firewall may block. An explicit
    ``spark.driver.host`` or ``SPARK_LOCAL_IP`` is kept.
    """
    if not master.startswith("spark://") or DRIVER_HOST in conf or env.get("SPARK_LOCAL_IP"):
        return None
    hosts = []
    for address in master.removeprefix("spark://").split(","):  # HA: spark://h1:p1,h2:p2
        host = address.rpartition(":")[0] if ":" in address else address
        hosts.append(host.strip("[]"))
    if not hosts or not all(_is_loopback(host) for host in hosts):
        return None
    first = hosts[0]
    return "127.0.0.1" if first.lower() == "localhost" else first


def build_session(
    master: str = "local[*]",
    app_name: str = "nsqpy",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for nsqpy's jobs, with the ``nsq`` format registered.

    Python workers run ``PYSPARK_PYTHON``, else ``python3`` from PATH, which may lack nsqpy and
    pyarrow. With a local master the workers are this machine's, so they run this interpreter;
    on a cluster an existing ``PYSPARK_PYTHON`` (the nodes' interpreter) is kept. For a
    standalone master on loopback the driver advertises loopback too (``loopback_driver_host``).
    """
    check_packages()
    check_java()
    if master.startswith("local") or "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    settings = dict(conf or {})
    host = loopback_driver_host(master, settings, os.environ)
    if host is not None:
        settings[DRIVER_HOST] = host
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark

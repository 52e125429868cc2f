"""A SparkSession for nsqpy's jobs: checked environment, right Python, ``nsq`` registered."""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from nsqpy.spark.env import check_java, check_packages

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER_HOST: Final = "spark.driver.host"
#: The data source's short name: ``spark.readStream.format(FORMAT)``.
FORMAT: Final = "nsq"


def register(spark: SparkSession) -> None:
    """Make ``format("nsq")`` available in ``spark``."""
    check_packages()
    from nsqpy.spark.source import NsqDataSource

    spark.dataSource.register(NsqDataSource)


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

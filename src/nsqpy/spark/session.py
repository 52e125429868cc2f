"""A SparkSession for nsqpy's jobs: checked environment, right Python, ``nsq`` registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from nsqpy.spark.env import check_java, check_packages

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_session(
    master: str = "local[*]",
    app_name: str = "nsqpy",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for nsqpy's jobs, with the ``nsq`` format registered.

    Python workers run ``PYSPARK_PYTHON``, else ``python3`` from PATH, which may lack nsqpy and
    pyarrow. With a local master the workers are this machine's, so they run this interpreter;
    on a cluster an existing ``PYSPARK_PYTHON`` (the nodes' interpreter) is kept.
    """
    check_packages()
    check_java()
    if master.startswith("local") or "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from nsqpy.spark import register

    register(spark)
    return spark

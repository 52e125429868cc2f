"""``nsqpy.spark.register`` on a session the user made: the workers' Python must load nsqpy.

Spark's Python workers run ``PYSPARK_PYTHON`` (else ``python3``), fixed when the source is
registered; one without nsqpy used to fail with ``ModuleNotFoundError`` deep in a worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsqpy.spark.session import worker_python_problem

from .conftest import NsqdFactory, numbered, publish

#: An interpreter on this machine without nsqpy (the venv's base, or Debian's).
BARE_PYTHON = next(
    (
        p
        for p in (getattr(sys, "_base_executable", ""), "/usr/bin/python3")
        if p
        and os.path.realpath(p) != os.path.realpath(sys.executable)
        and subprocess.run([p, "-c", "import nsqpy"], capture_output=True, check=False).returncode
    ),
    None,
)


def test_which_interpreters_can_run_the_source() -> None:
    assert worker_python_problem(sys.executable) is None
    assert worker_python_problem("/nonexistent/python3") is None  # a node's path: not ours to judge
    if BARE_PYTHON is None:
        pytest.skip("no interpreter without nsqpy on this machine")
    problem = worker_python_problem(BARE_PYTHON)
    assert problem is not None
    assert "nsqpy" in problem or "pyarrow" in problem


_USER_SCRIPT = """
import sys
from pyspark.sql import SparkSession
import nsqpy.spark

spark = (SparkSession.builder.master("local[1]").appName("own-session")
         .config("spark.ui.enabled", "false").getOrCreate())
nsqpy.spark.register(spark)
rows = (spark.read.format("nsq").option("nsqd", sys.argv[1]).option("topic", "own")
        .option("channel", "c").option("idleTimeout", "500ms").load().collect())
print("ROWS", sorted(r.body.decode() for r in rows))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.slow
def test_own_session_without_pyspark_python_reads(
    nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    pytest.importorskip("pyspark")
    if BARE_PYTHON is None:
        pytest.skip("no interpreter without nsqpy on this machine")
    nsqd = nsqd_proc()
    nsqd.create_channel("own", "c")
    publish(nsqd.tcp_address, "own", numbered(3))
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(_USER_SCRIPT))
    env = {**os.environ, "PYSPARK_PYTHON": BARE_PYTHON}
    result = subprocess.run(
        [sys.executable, str(script), nsqd.tcp_address],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS ['m000000', 'm000001', 'm000002']" in result.stdout

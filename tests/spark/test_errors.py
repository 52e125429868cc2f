"""Failures a user sees: unreachable nsqd, bad options, the worker interpreter."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_workers_run_this_interpreter(spark: SparkSession) -> None:
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()
    assert seen == [sys.executable]


def test_unreachable_nsqd_fails_the_query_readably(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    address = f"127.0.0.1:{_free_port()}"
    query = (
        spark.readStream.format("nsq")
        .options(nsqd=address, topic="t", channel="c")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(StreamingQueryException, match=f"cannot connect to any nsqd.*{address}"):
        query.awaitTermination(120)
    assert not query.isActive


def test_bad_option_fails_with_its_name(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="'maxInFlight': not an integer: 'many'") as info:
        query = (
            spark.readStream.format("nsq")
            .options(nsqd="127.0.0.1:4150", topic="t", channel="c", maxInFlight="many")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        query.awaitTermination(120)
    assert "ValueError" in str(info.value)
    with pytest.raises(Exception, match="unknown option 'maxrecordperbatch'"):
        spark.read.format("nsq").options(
            nsqd="127.0.0.1:4150", topic="t", channel="c", maxRecordPerBatch="5"
        ).load().collect()

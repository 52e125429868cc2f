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


@pytest.mark.parametrize(
    ("read", "extra", "message"),
    [
        ("readStream", {"fooBar": "1"}, "nsq source: unknown option 'foobar'"),
        ("readStream", {"maxInFlight": "many"},
         "nsq source: option 'maxInFlight': not an integer: 'many'"),
        ("read", {"maxRecordPerBatch": "5"},
         "nsq source: unknown option 'maxrecordperbatch'; did you mean 'maxRecordsPerBatch'?"),
        ("readStream", {"channel": ""}, "nsq source: option 'channel' is required"),
    ],
)  # fmt: skip
def test_a_bad_read_option_fails_load_and_is_the_first_line(
    spark: SparkSession, read: str, extra: dict[str, str], message: str
) -> None:
    from pyspark.errors import AnalysisException

    options = {"nsqd": "127.0.0.1:4150", "topic": "t", "channel": "c", **extra}
    with pytest.raises(AnalysisException) as info:
        getattr(spark, read).format("nsq").options(**options).load()  # not the first trigger
    first_line = str(info.value).splitlines()[0]
    assert message in first_line, str(info.value)
    assert "Traceback" not in str(info.value)


def test_a_bad_write_option_is_the_first_line(spark: SparkSession) -> None:
    from pyspark.errors import AnalysisException

    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(AnalysisException) as info:
        df.write.format("nsq").options(nsqd="127.0.0.1:4150", topic="t", channel="c").mode(
            "append"
        ).save()
    first_line = str(info.value).splitlines()[0]
    assert "nsq sink: unknown option 'channel': it is an option for reading only" in first_line

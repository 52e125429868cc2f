"""The archive's Parquet as outside readers see it, and older (INT96) archives still read.

pyarrow, pandas, DuckDB and Trino read Spark's legacy INT96 timestamps as naive times; the
archive writes INT64 microseconds marked as UTC instead (``layout.PARQUET_WRITE_OPTIONS``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from nsqpy.spark.jobs.archive import ArchiveConfig, run_archive
from nsqpy.spark.jobs.layout import (
    PARQUET_WRITE_OPTIONS,
    PARTITION_COLUMNS,
    read_archive,
    with_archive_columns,
)
from nsqpy.spark.jobs.replay import ReplayConfig, run_replay
from nsqpy.spark.jobs.report import HourRow, run_report
from nsqpy.spark.jobs.selection import Selection

from .conftest import NsqdFactory, numbered, publish
from .test_jobs_replay import consume

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TIMESTAMP_COLUMNS = ("timestamp", "archived_at")
UTC_MICROS = {"Type": "Timestamp", "isAdjustedToUTC": True, "timeUnit": "microseconds"}
INT96 = {"spark.sql.parquet.outputTimestampType": "INT96"}
T0 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def timestamp_encodings(path: Path) -> dict[str, tuple[str, dict[str, object] | None]]:
    """Each timestamp column's physical type and logical type, as the file's footer has them."""
    schema = pq.ParquetFile(path).schema
    out = {}
    for i in range(len(schema)):
        column = schema.column(i)
        if column.name in TIMESTAMP_COLUMNS:
            logical = json.loads(column.logical_type.to_json())  # {} for INT96: none
            kept = {key: logical[key] for key in UTC_MICROS if key in logical}
            out[column.name] = (column.physical_type, kept or None)
    return out


def test_archive_parquet_has_utc_microsecond_timestamps_for_outside_readers(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    nsqd = nsqd_proc()
    before = datetime.now(UTC) - timedelta(seconds=1)
    publish(nsqd.tcp_address, "pq_a", numbered(30))
    after = datetime.now(UTC) + timedelta(seconds=1)
    archive = tmp_path / "archive"
    cfg = ArchiveConfig(
        topics=("pq_a",),
        output=str(archive),
        checkpoint=str(tmp_path / "checkpoint"),
        nsqd_tcp_addresses=(nsqd.tcp_address,),
        available_now=True,
        max_in_flight=1000,
    )
    assert run_archive(spark, cfg, lambda line: None).rows == 30

    files = sorted(archive.glob("topic=pq_a/date=*/hour=*/*.parquet"))
    assert files
    for path in files:
        assert timestamp_encodings(path) == {
            "timestamp": ("INT64", UTC_MICROS),
            "archived_at": ("INT64", UTC_MICROS),
        }, path
        schema = pq.read_schema(path)
        for name in TIMESTAMP_COLUMNS:
            assert schema.field(name).type == pa.timestamp("us", tz="UTC")

    # The whole archive through pyarrow's hive partitioning, as docs/spark.md shows it.
    table = ds.dataset(archive, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 30
    assert table.schema.field("topic").type == pa.string()
    assert table.schema.field("date").type == pa.string()
    assert table.schema.field("hour").type == pa.int32()
    rows = table.to_pylist()
    spark_micros = {
        r["id"]: r["us"]
        for r in read_archive(spark, [str(archive)])
        .selectExpr("id", "unix_micros(timestamp) as us")
        .collect()
    }
    for row in rows:
        published = row["timestamp"]
        assert published.tzinfo is not None and published.utcoffset() == timedelta(0)
        assert before <= published <= after, (before, published, after)
        assert published <= row["archived_at"]
        assert (published - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
            microseconds=1
        ) == spark_micros[row["id"]]
        # The partition directories hold the publish time's UTC date and hour.
        assert row["date"] == published.date().isoformat()
        assert row["hour"] == published.hour

    frame = pd.read_parquet(archive)
    for name in TIMESTAMP_COLUMNS:
        assert str(frame[name].dtype) == "datetime64[us, UTC]"
    assert sorted(frame["body"]) == numbered(30)


def write_part(
    spark: SparkSession,
    path: Path,
    rows: list[tuple[str, bytes, datetime]],
    options: dict[str, str],
) -> None:
    """Append (id, body, published) rows of topic ``old_new`` as nsqpy-archive lays them out."""
    df = spark.createDataFrame(
        [(msg_id, body, ts, 1, "nsqpy_archive", "127.0.0.1:4150", "old_new")
         for msg_id, body, ts in rows],
        "id string, body binary, timestamp timestamp, attempts int, channel string, "
        "nsqd string, topic string",
    )  # fmt: skip
    archived = with_archive_columns(df)
    archived.write.mode("append").options(**options).partitionBy(*PARTITION_COLUMNS).parquet(
        str(path)
    )


def test_older_int96_archives_still_replay_and_report(
    spark: SparkSession, nsqd_proc: NsqdFactory, tmp_path: Path
) -> None:
    """One archive with files from before the change (INT96) and after (UTC micros)."""
    archive = tmp_path / "archive"
    write_part(spark, archive, [
        ("00000000000000a1", b"old before", T0 - timedelta(microseconds=1)),
        ("00000000000000a2", b"old inside", T0 + timedelta(minutes=10)),
    ], INT96)  # fmt: skip
    write_part(spark, archive, [
        ("00000000000000b1", b"new inside", T0 + timedelta(minutes=50)),
        ("00000000000000b2", b"new after", T0 + timedelta(hours=1)),
    ], dict(PARQUET_WRITE_OPTIONS))  # fmt: skip
    encodings = {timestamp_encodings(path)["timestamp"][0] for path in archive.glob("**/*.parquet")}
    assert encodings == {"INT96", "INT64"}  # really both kinds of file

    hour = Selection(start=T0, end=T0 + timedelta(hours=1))
    report = run_report(spark, [str(archive)], hour)
    assert report.hourly == [HourRow("old_new", T0, 2, len(b"old inside") + len(b"new inside"))]
    everything = run_report(spark, [str(archive)], Selection())
    assert (everything.rows, everything.messages) == (4, 4)

    nsqd = nsqd_proc()
    cfg = ReplayConfig(
        inputs=(str(archive),),
        destination_topic="old_new_out",
        nsqd_tcp_addresses=(nsqd.tcp_address,),
        selection=hour,
    )
    assert run_replay(spark, cfg, lambda line: None).messages == 2
    assert nsqd.topic_depth("old_new_out") == 2  # nothing else was published
    assert sorted(m.body for m in consume(nsqd, "old_new_out", 2)) == [
        b"new inside",
        b"old inside",
    ]

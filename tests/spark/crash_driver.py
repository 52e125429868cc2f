"""A streaming query nsq -> Parquet in a process of its own, for the SIGKILL tests.

Usage: crash_driver.py NSQD_ADDRESS TOPIC OUT_DIR CHECKPOINT_DIR [--mode MODE] [--master URL]
[--slow SECONDS] [--available-now] [--option KEY=VALUE ...]. Runs until killed, or with
``--available-now`` until the queue is drained. ``--slow`` adds a pandas UDF that sleeps that
long per task, so that a batch is being read and written most of the time (an executor's
Python worker can then be killed mid-batch); Spark's WARN log then names lost tasks.
"""

# no "from __future__ import annotations": pandas_udf reads the UDF's type hints
import argparse
import sys
import time

from nsqpy.spark import build_session

#: The source options of every run: test_crash.py restarts the query with the same ones.
OPTIONS = {"channel": "spark", "maxInFlight": "1000", "maxRecordsPerBatch": "250",
           "msgTimeout": "3s"}  # fmt: skip


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    for name in ("nsqd", "topic", "out", "checkpoint"):
        ap.add_argument(name)
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--option", action="append", default=[])
    args = ap.parse_args(argv)
    spark = build_session(args.master, "nsqpy-crash-driver",
                          {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("WARN" if args.slow else "ERROR")
    df = (
        spark.readStream.format("nsq")
        .options(nsqd=args.nsqd, topic=args.topic, mode=args.mode, **OPTIONS)
        .options(**dict(kv.split("=", 1) for kv in args.option))
        .load()
    )
    if args.slow:
        df = df.withColumn("slow", slow_udf(args.slow)("id"))
    writer = (
        df.writeStream.format("parquet")
        .option("path", args.out).option("checkpointLocation", args.checkpoint)
    )
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime="200 milliseconds"))  # fmt: skip
    query = writer.start()
    print("started", flush=True)
    query.awaitTermination()
    print("done", flush=True)


def slow_udf(seconds: float):  # type: ignore[no-untyped-def]
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("long")  # type: ignore[call-overload]
    def slow(ids: pd.Series) -> pd.Series:  # type: ignore[type-arg]
        time.sleep(seconds)
        return ids.str.len()

    return slow


if __name__ == "__main__":
    main(sys.argv[1:])

"""A streaming query nsq -> Parquet in a process of its own, for the SIGKILL test.

Usage: crash_driver.py NSQD_ADDRESS TOPIC OUT_DIR CHECKPOINT_DIR. Runs until killed.
"""

from __future__ import annotations

import sys

from nsqpy.spark import build_session


def main(nsqd: str, topic: str, out: str, checkpoint: str) -> None:
    spark = build_session("local[2]", "nsqpy-crash-driver",
                          {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    query = (
        spark.readStream.format("nsq")
        .option("nsqd", nsqd).option("topic", topic).option("channel", "spark")
        .option("maxInFlight", "1000").option("maxRecordsPerBatch", "250")
        .option("msgTimeout", "3s")
        .load()
        .writeStream.format("parquet")
        .option("path", out).option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:5])

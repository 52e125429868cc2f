"""NSQ on Spark: the ``nsq`` data source (streaming and batch reads, batch and streaming writes).

::

    from nsqpy.spark import build_session
    spark = build_session("local[2]")          # checks Java/pyspark, registers "nsq"
    df = (spark.readStream.format("nsq")
          .option("nsqd", "127.0.0.1:4150").option("topic", "events")
          .option("channel", "archive").load())
    query = (df.writeStream.format("parquet").option("path", "out/")
             .option("checkpointLocation", "out/_checkpoint").start())
    stop_when_idle(query)                      # stops once the last batch is FINished

pyspark is imported only when one of these functions runs, so ``import nsqpy.spark`` works (and
explains what is missing) without it. Options and guarantees: docs/spark.md.

The package may import ``client``, ``protocol`` and ``_internal`` (and pyspark, lazily); only
``cli`` imports it.
"""

from __future__ import annotations

from nsqpy.spark.env import SparkSetupError
from nsqpy.spark.session import FORMAT, build_session, register
from nsqpy.spark.stopping import stop_when_idle

__all__ = ["FORMAT", "SparkSetupError", "build_session", "register", "stop_when_idle"]

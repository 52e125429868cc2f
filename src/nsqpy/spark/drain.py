"""The batch read: drain what a channel holds now, bounded by count and idle time.

Runs where Spark plans a batch read (a planner worker on the driver side). That worker
returns the partitions and is done: no later call tells it whether the job using the rows
succeeded. So the drained messages are FINished right after they have been turned into
partition payloads, i.e. when the DataFrame's content is fixed. Every action on that DataFrame
sees exactly these rows; if the job that uses them fails, they are gone (at-most-once). The
streaming source with ``trigger(availableNow=True)`` drains at-least-once instead.
"""

from __future__ import annotations

import dataclasses
import time

from nsqpy.client.message import Message
from nsqpy.spark import payload
from nsqpy.spark.ingest import Ingest
from nsqpy.spark.options import ReadOptions


def drain(opts: ReadOptions) -> list[payload.Payload]:
    """Take up to ``maxRecords`` messages published before now; FIN them; close."""
    cut_ns = time.time_ns()
    # never hold more than the drain may return: the rest stays queued for other readers
    window = min(opts.max_in_flight, opts.max_records)
    ingest = Ingest(dataclasses.replace(opts, max_in_flight=window))
    ingest.start()
    try:
        msgs = _collect(ingest, opts, cut_ns)
        payloads = payload.split(
            msgs, payload.body_bytes(msgs), opts.num_partitions, opts.topic, opts.channel
        )
        # RDY 0 before the FINs: each FIN opens the window and nsqd would fill it again
        ingest.pause()
        ingest.finish(msgs)
    finally:
        # messages held back (published after the cut) go back at once
        ingest.shutdown(requeue=True, timeout=5.0)
    return payloads


def _collect(ingest: Ingest, opts: ReadOptions, cut_ns: int) -> list[Message]:
    out: list[Message] = []
    while len(out) < opts.max_records:
        got = ingest.take(opts.max_records - len(out), opts.max_bytes_per_batch, opts.idle_timeout,
                          cut_ns)
        if not got:
            break
        out.extend(got)
    return out

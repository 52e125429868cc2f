"""A Spark task's ``read()`` in lease mode: fetch its leases from their nsqds, yield Arrow.

The task opens a ``LeaseConnection`` to each nsqd of its leases, asks for all of them at once
(nsqd encodes the next lease while this process turns the previous one into Arrow) and yields
one RecordBatch per lease. A lease arrives column by column in one frame (``LEASE_COLUMNS``),
which becomes Arrow columns with numpy, without a Python loop per row.

A lease that is gone (its TTL passed before the batch was committed, or nsqd restarted) gives
no rows: nsqd has put its messages back, and a later batch reads them. That is logged with
the count. Any other failure fails the task; Spark's retry fetches the same leases again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Final

from nsqpy.client.errors import LeaseError
from nsqpy.client.leases import LeaseConnection
from nsqpy.client.sync import LoopThread
from nsqpy.protocol.lease_columns import LeaseColumns
from nsqpy.spark import payload
from nsqpy.spark.lease_plan import LeaseSplit
from nsqpy.spark.offsets import LeaseRef
from nsqpy.spark.options import ReadOptions

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

log = logging.getLogger("nsqpy.spark")

#: How long a task waits for one lease's frames.
FETCH_TIMEOUT: Final = 120.0


class LeaseReadError(ConnectionError):
    """An nsqd of the batch cannot serve its leases (the task fails; Spark retries it)."""


def read_split(opts: ReadOptions, split: LeaseSplit) -> Iterator[pa.RecordBatch]:
    thread = LoopThread()
    conns: dict[str, LeaseConnection] = {}
    try:
        pending: list[tuple[LeaseRef, Future[LeaseColumns]]] = []
        for ref in split.leases:
            conn = conns.get(ref.nsqd)
            if conn is None:
                conn = conns[ref.nsqd] = thread.run(_open(opts, ref.nsqd))
            fetch = conn.fetch_columns(opts.topic, opts.channel, ref.name)
            pending.append((ref, asyncio.run_coroutine_threadsafe(fetch, thread.loop)))
        for ref, future in pending:
            try:
                columns = future.result(FETCH_TIMEOUT)
            except LeaseError as err:
                if not err.gone:
                    raise
                log.warning("nsq source: lease %s of nsqd %s (%d messages) is gone (%s): no rows "
                            "from it; nsqd delivers its messages again", ref.name, ref.nsqd,
                            ref.count, err.code)  # fmt: skip
                continue
            if columns.count:
                yield payload.to_record_batch(to_payload(columns, opts.topic, opts.channel,
                                                         ref.nsqd))  # fmt: skip
    finally:
        for conn in conns.values():
            thread.call(conn.close)
        thread.stop()


async def _open(opts: ReadOptions, address: str) -> LeaseConnection:
    conn = await LeaseConnection.open(address, opts.client_config())
    if not conn.leases_supported:
        conn.close()
        raise LeaseReadError(f"nsq source: nsqd {address} has no leases (any more?)")
    return conn


def to_payload(columns: LeaseColumns, topic: str, channel: str, nsqd: str) -> payload.Payload:
    """The lease's columns as the flat buffers of a Payload (see payload.py)."""
    import numpy as np

    count = columns.count
    offsets = np.zeros(count + 1, dtype="<i4")
    offsets[1:] = np.frombuffer(columns.ends, dtype="<i8")
    return payload.Payload(
        count=count,
        topic=topic,
        channel=channel,
        ids=bytes(columns.ids),
        bodies=bytes(columns.bodies),
        body_offsets=offsets.tobytes(),
        timestamps_us=(np.frombuffer(columns.timestamps, dtype="<i8") // 1000).tobytes(),
        attempts=np.frombuffer(columns.attempts, dtype="<u2").astype("<i4").tobytes(),
        nsqd_index=bytes(2 * count),
        nsqd_names=(nsqd,),
    )

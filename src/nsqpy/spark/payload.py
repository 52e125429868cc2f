"""Messages on their way from the driver-side runner to the executors, column by column.

The runner (one Python process for the whole stream) does as little per message as it can:
a few list comprehensions and ``b"".join``s turn a batch into flat buffers, which pickle as
plain bytes. The executors then wrap those buffers into one Arrow RecordBatch without a
per-row Python loop. (Building Arrow in the runner, or shipping tuples, was measured slower.)
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Final

from nsqpy.client.message import Message

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

#: The source's fixed schema (DDL), as Spark sees it.
SCHEMA_DDL: Final = (
    "id string, body binary, timestamp timestamp, attempts int, "
    "topic string, channel string, nsqd string"
)
ID_SIZE: Final = 16
#: Split a batch so that no task carries more than this many body bytes.
MAX_PARTITION_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Payload:
    """One partition's messages as flat buffers (the value of an InputPartition)."""

    count: int
    topic: str
    channel: str
    ids: bytes  # 16 bytes per message
    bodies: bytes  # all bodies back to back
    body_offsets: bytes  # int32[count + 1]
    timestamps_us: bytes  # int64[count], microseconds since the epoch
    attempts: bytes  # int32[count]
    nsqd_index: bytes  # uint16[count], into nsqd_names
    nsqd_names: tuple[str, ...]


def build(msgs: Sequence[Message], topic: str, channel: str) -> Payload:
    """Flatten ``msgs`` (all from the same topic and channel) into a Payload."""
    bodies = [m.body for m in msgs]
    offsets = array("i", accumulate(map(len, bodies), initial=0))
    addresses = [m.nsqd_address for m in msgs]
    names = tuple(dict.fromkeys(addresses))
    index = {name: i for i, name in enumerate(names)}
    return Payload(
        count=len(msgs),
        topic=topic,
        channel=channel,
        ids=b"".join([m.id for m in msgs]),
        bodies=b"".join(bodies),
        body_offsets=offsets.tobytes(),
        timestamps_us=array("q", [m.timestamp // 1000 for m in msgs]).tobytes(),
        attempts=array("i", [m.attempts for m in msgs]).tobytes(),
        nsqd_index=array("H", map(index.__getitem__, addresses)).tobytes(),
        nsqd_names=names,
    )


def split(
    msgs: Sequence[Message], nbytes: int, num_partitions: int, topic: str, channel: str
) -> list[Payload]:
    """``num_partitions`` payloads of about equal count (more if the bytes demand it)."""
    if not msgs:
        return []
    parts = max(num_partitions, math.ceil(nbytes / MAX_PARTITION_BYTES))
    parts = min(parts, len(msgs))
    step = math.ceil(len(msgs) / parts)
    return [build(msgs[i : i + step], topic, channel) for i in range(0, len(msgs), step)]


def body_bytes(msgs: Sequence[Message]) -> int:
    return sum(len(m.body) for m in msgs)


# --- executor side ------------------------------------------------------------------------------


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for SCHEMA_DDL (timestamps in UTC microseconds)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("body", pa.binary()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("attempts", pa.int32()),
            pa.field("topic", pa.string()),
            pa.field("channel", pa.string()),
            pa.field("nsqd", pa.string()),
        ]
    )


def to_record_batch(p: Payload) -> pa.RecordBatch:
    """Wrap the payload's buffers as Arrow columns (no per-row Python work but two ranges)."""
    import pyarrow as pa

    n = p.count
    buf = pa.py_buffer
    id_offsets = array("i", range(0, ID_SIZE * n + 1, ID_SIZE)).tobytes()
    columns = [
        pa.Array.from_buffers(pa.string(), n, [None, buf(id_offsets), buf(p.ids)]),
        pa.Array.from_buffers(pa.binary(), n, [None, buf(p.body_offsets), buf(p.bodies)]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, buf(p.timestamps_us)]),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(p.attempts)]),
        _constant(p.topic, n),
        _constant(p.channel, n),
        pa.array(p.nsqd_names, pa.string()).take(
            pa.Array.from_buffers(pa.uint16(), n, [None, buf(p.nsqd_index)])
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def _constant(text: str, n: int) -> pa.Array:
    import pyarrow as pa

    data = text.encode()
    offsets = array("i", range(0, len(data) * n + 1, len(data))).tobytes()
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data * n)]
    return pa.Array.from_buffers(pa.string(), n, buffers)

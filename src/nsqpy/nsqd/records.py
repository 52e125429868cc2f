"""Messages as disk-queue records.

NSQ's record payload is the wire encoding of a message::

    [8-byte int64 timestamp ns][2-byte uint16 attempts][16-byte hex id][body]

nsqd forgets a deferred message's delay when it writes one to disk (NSQ issue #1107). nsqpy
keeps it with an extended record, written only for messages that are deferred::

    [8-byte magic \\xffnsqpyD\\x01][8-byte int64 due time, unix ns][NSQ payload]

A real timestamp never starts with 0xff (that would be a negative time), so plain NSQ records
and extended ones cannot be confused, and every record nsqd v1.3.0 wrote reads unchanged.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

DEFERRED_MAGIC: Final = b"\xffnsqpyD\x01"
_HEADER: Final = struct.Struct(">qH")
_DUE: Final = struct.Struct(">q")
#: An extended record is this much longer than the NSQ payload it wraps.
EXTENSION_SIZE: Final = len(DEFERRED_MAGIC) + _DUE.size


class Record(NamedTuple):
    timestamp: int
    attempts: int
    id: bytes
    body: bytes
    due_ns: int  # wall-clock unix ns when a deferred message becomes due; 0 if not deferred


def encode(timestamp: int, attempts: int, msg_id: bytes, body: bytes, due_ns: int = 0) -> bytes:
    payload = _HEADER.pack(timestamp, attempts & 0xFFFF) + msg_id + body
    if due_ns:
        return DEFERRED_MAGIC + _DUE.pack(due_ns) + payload
    return payload


def encode_plain(timestamp: int, msg_id: bytes, body: bytes) -> bytes:
    """``encode`` for a message never delivered and not deferred (the common case)."""
    return _HEADER.pack(timestamp, 0) + msg_id + body


def decode(data: bytes) -> Record:
    """Decode a record; raises ValueError for one too short to be a message."""
    due = 0
    if data[:8] == DEFERRED_MAGIC:
        (due,) = _DUE.unpack_from(data, 8)
        data = data[EXTENSION_SIZE:]
    if len(data) < 26:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    timestamp, attempts = _HEADER.unpack_from(data)
    return Record(timestamp, attempts, data[10:26], data[26:], due)

"""Messages as disk-queue records.

NSQ's record payload is the wire encoding of a message::

    [8-byte int64 timestamp ns][2-byte uint16 attempts][16-byte hex id][body]

nsqd forgets a deferred message's delay when it writes one to disk (NSQ issue #1107). nsqpy
keeps it with an extended record, written only for messages that are deferred::

    [8-byte magic \\xffnsqpyD\\x01][8-byte int64 due time, unix ns][NSQ payload]

A dead letter (see ``nsqpy.nsqd.core.policy``) also remembers the channel it came from, so that a
redrive can send it back there; its record is::

    [8-byte magic \xffnsqpyO\x01][8-byte int64 due time or 0][1-byte n][n bytes "topic:channel"]
    [NSQ payload]

A real timestamp never starts with 0xff (that would be a negative time), so plain NSQ records
and extended ones cannot be confused, and every record nsqd v1.3.0 wrote reads unchanged.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

DEFERRED_MAGIC: Final = b"\xffnsqpyD\x01"
ORIGIN_MAGIC: Final = b"\xffnsqpyO\x01"
_HEADER: Final = struct.Struct(">qH")
_DUE: Final = struct.Struct(">q")
#: A deferred record is this much longer than the NSQ payload it wraps.
EXTENSION_SIZE: Final = len(DEFERRED_MAGIC) + _DUE.size
#: The most any extension adds (an origin is two names of at most 64 bytes and a colon).
MAX_EXTENSION_SIZE: Final = EXTENSION_SIZE + 1 + 129
#: Enough of a record's first bytes to find its timestamp (``head_timestamp``).
HEAD_SIZE: Final = MAX_EXTENSION_SIZE + _DUE.size


class Record(NamedTuple):
    timestamp: int
    attempts: int
    id: bytes
    body: bytes
    due_ns: int  # wall-clock unix ns when a deferred message becomes due; 0 if not deferred
    origin: str = ""  # a dead letter's "topic:channel"


def encode(
    timestamp: int, attempts: int, msg_id: bytes, body: bytes, due_ns: int = 0, origin: str = ""
) -> bytes:
    payload = _HEADER.pack(timestamp, attempts & 0xFFFF) + msg_id + body
    if origin:
        name = origin.encode("ascii")
        return ORIGIN_MAGIC + _DUE.pack(due_ns) + bytes((len(name),)) + name + payload
    if due_ns:
        return DEFERRED_MAGIC + _DUE.pack(due_ns) + payload
    return payload


def encode_plain(timestamp: int, msg_id: bytes, body: bytes) -> bytes:
    """``encode`` for a message never delivered and not deferred (the common case)."""
    return _HEADER.pack(timestamp, 0) + msg_id + body


def decode(data: bytes) -> Record:
    """Decode a record; raises ValueError for one too short to be a message."""
    due = 0
    origin = ""
    if data[:1] == b"\xff":  # plain records, the common case, pay this one test
        offset, due, origin = _extension(data)
        data = data[offset:]
    if len(data) < 26:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    timestamp, attempts = _HEADER.unpack_from(data)
    return Record(timestamp, attempts, data[10:26], data[26:], due, origin)


def _extension(data: bytes) -> tuple[int, int, str]:
    """``(payload offset, due_ns, origin)`` of an extended record; ``(0, 0, "")`` when the
    bytes are not one."""
    magic = data[:8]
    if magic == DEFERRED_MAGIC and len(data) >= EXTENSION_SIZE:
        return EXTENSION_SIZE, _DUE.unpack_from(data, 8)[0], ""
    if magic == ORIGIN_MAGIC and len(data) > EXTENSION_SIZE:
        end = EXTENSION_SIZE + 1 + data[EXTENSION_SIZE]
        origin = data[EXTENSION_SIZE + 1 : end].decode("ascii", "replace")
        return end, _DUE.unpack_from(data, 8)[0], origin
    return 0, 0, ""


def head_timestamp(head: bytes) -> int | None:
    """The publish timestamp from a record's first bytes (``HEAD_SIZE`` always suffice);
    None if they are too few."""
    offset = _extension(head)[0] if head[:1] == b"\xff" else 0
    if len(head) < offset + _DUE.size:
        return None
    return int(_DUE.unpack_from(head, offset)[0])

"""The records of the lease journal (``nsqpy.nsqd.storage.lease_journal``).

Each is one record of a disk queue (so at least 26 bytes, as any record there). Three kinds,
each opening with the same 8-byte magic and a kind byte::

    SEAL   \\xffnsqpyJ\\x01 b"S" [8 deadline, unix ns][8 ttl ns][4 count][8 max_bytes]
           [4 n][1+k "topic:channel"][1+l lease name]          then n message records
    CLOSE  \\xffnsqpyJ\\x01 b"C" [1 state][8 closed_until, unix ns][8 ttl ns]
           [1+k "topic:channel"][1+l lease name]
    DROP   \\xffnsqpyJ\\x01 b"D" [1+k "topic:channel"]  (zero-padded to 26 bytes)

The n message records after a SEAL are the channel's own record format (``core.records``),
with the attempts the lease gave them. The magic starts with 0xff and differs from the channel
records' extensions, so a header is never mistaken for a message.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from nsqpy.nsqd.core.lease import EXPIRED, FINISHED, REQUEUED

MAGIC: Final = b"\xffnsqpyJ\x01"
SEAL: Final = b"S"
CLOSE: Final = b"C"
DROP: Final = b"D"
_SEAL: Final = struct.Struct(">qqIQI")
_CLOSE: Final = struct.Struct(">cqq")
_MIN_SIZE: Final = 26


class Seal(NamedTuple):
    channel: str  # "topic:channel"
    name: str
    deadline_ns: int
    ttl_ns: int
    max_count: int  # the lease's count (``count`` is tuple's)
    max_bytes: int
    messages: int  # how many message records follow


class Close(NamedTuple):
    channel: str
    name: str
    state: str  # FINISHED, REQUEUED or EXPIRED (nsqpy.nsqd.core.lease)
    closed_until_ns: int
    ttl_ns: int


class Drop(NamedTuple):
    channel: str


#: The lease states a CLOSE records, by their byte on disk.
_STATES: Final = {b"F": FINISHED, b"R": REQUEUED, b"E": EXPIRED}
_STATE_BYTES: Final = {state: code for code, state in _STATES.items()}


def is_header(data: bytes) -> bool:
    return data[:8] == MAGIC


def encode_seal(seal: Seal) -> bytes:
    fixed = _SEAL.pack(seal.deadline_ns, seal.ttl_ns, seal.max_count, seal.max_bytes, seal.messages)
    return MAGIC + SEAL + fixed + _names(seal.channel, seal.name)


def encode_close(close: Close) -> bytes:
    state = _STATE_BYTES[close.state]
    fixed = _CLOSE.pack(state, close.closed_until_ns, close.ttl_ns)
    return MAGIC + CLOSE + fixed + _names(close.channel, close.name)


def encode_drop(drop: Drop) -> bytes:
    return _padded(MAGIC + DROP + _short(drop.channel))


def decode(data: bytes) -> Seal | Close | Drop:
    """A journal header; ValueError if ``data`` is not one."""
    if not is_header(data) or len(data) < _MIN_SIZE:
        raise ValueError("not a lease journal record")
    kind, body = data[8:9], data[9:]
    try:
        if kind == SEAL:
            deadline, ttl, count, max_bytes, n = _SEAL.unpack_from(body)
            channel, name, _ = _read_names(body, _SEAL.size)
            return Seal(channel, name, deadline, ttl, count, max_bytes, n)
        if kind == CLOSE:
            state, until, ttl = _CLOSE.unpack_from(body)
            channel, name, _ = _read_names(body, _CLOSE.size)
            if state not in _STATES:
                raise ValueError(f"unknown lease state {state!r}")
            return Close(channel, name, _STATES[state], until, ttl)
        if kind == DROP:
            channel, _ = _read_short(body, 0)
            return Drop(channel)
    except (struct.error, UnicodeDecodeError, IndexError) as err:
        raise ValueError(f"bad lease journal record - {err}") from err
    raise ValueError(f"unknown lease journal record kind {kind!r}")


def _short(text: str) -> bytes:
    raw = text.encode("ascii")
    return bytes((len(raw),)) + raw


def _names(channel: str, name: str) -> bytes:
    return _short(channel) + _short(name)


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (_MIN_SIZE - len(data)) if len(data) < _MIN_SIZE else data


def _read_short(body: bytes, at: int) -> tuple[str, int]:
    size = body[at]
    end = at + 1 + size
    if end > len(body):
        raise IndexError("name past the end")
    return body[at + 1 : end].decode("ascii"), end


def _read_names(body: bytes, at: int) -> tuple[str, str, int]:
    channel, at = _read_short(body, at)
    name, at = _read_short(body, at)
    return channel, name, at

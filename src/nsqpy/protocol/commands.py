"""Client-to-server V2 commands, encoded to exact wire bytes.

::

    line command:  NAME [param ...]\\n
    body command:  NAME [param ...]\\n[4-byte int32 size][body]
    MPUB body:     [4-byte int32 count]([4-byte int32 size][message])*

Pure functions: topic, channel and id arguments are bytes or str (ASCII); numbers are ints.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Final

_SIZE: Final = struct.Struct(">i")

NOP: Final = b"NOP\n"
CLS: Final = b"CLS\n"


def _b(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("ascii")


def _with_body(line: bytes, body: bytes) -> bytes:
    return line + _SIZE.pack(len(body)) + body


def identify(fields: Mapping[str, object]) -> bytes:
    """IDENTIFY with a JSON body (keys as nsqd's ``identifyDataV2``)."""
    return _with_body(b"IDENTIFY\n", json.dumps(fields, separators=(",", ":")).encode())


def auth(secret: bytes | str) -> bytes:
    return _with_body(b"AUTH\n", _b(secret) if isinstance(secret, str) else secret)


def sub(topic: bytes | str, channel: bytes | str) -> bytes:
    return b"SUB %s %s\n" % (_b(topic), _b(channel))


def pub(topic: bytes | str, body: bytes) -> bytes:
    return _with_body(b"PUB %s\n" % _b(topic), body)


def dpub(topic: bytes | str, delay_ms: int, body: bytes) -> bytes:
    return _with_body(b"DPUB %s %d\n" % (_b(topic), delay_ms), body)


def mpub_body(bodies: Sequence[bytes]) -> bytes:
    """The MPUB payload: a count then each message with its size."""
    parts = [_SIZE.pack(len(bodies))]
    pack = _SIZE.pack
    for body in bodies:
        parts.append(pack(len(body)))
        parts.append(body)
    return b"".join(parts)


def mpub(topic: bytes | str, bodies: Sequence[bytes]) -> bytes:
    return _with_body(b"MPUB %s\n" % _b(topic), mpub_body(bodies))


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(msg_id: bytes) -> bytes:
    return b"FIN %s\n" % msg_id


def req(msg_id: bytes, delay_ms: int) -> bytes:
    return b"REQ %s %d\n" % (msg_id, delay_ms)


def touch(msg_id: bytes) -> bytes:
    return b"TOUCH %s\n" % msg_id


# nsqpy's lease commands (an nsqd extension, negotiated with IDENTIFY "leases": true)


def lease(topic: bytes | str, channel: bytes | str, name: bytes | str) -> bytes:
    """LEASE of a lease that exists: its message frames, then ``LEASED <name> <n> <bytes>``."""
    return b"LEASE %s %s %s\n" % (_b(topic), _b(channel), _b(name))


def lease_reserve(
    topic: bytes | str,
    channel: bytes | str,
    name: bytes | str,
    count: int,
    max_bytes: int,
    wait_ms: int,
    ttl_ms: int,
    before_ns: int = 0,
) -> bytes:
    """LEASE_RESERVE of a new lease (or the same again): answered ``LEASED`` alone."""
    return b"LEASE_RESERVE %s %s %s %d %d %d %d %d\n" % (
        _b(topic), _b(channel), _b(name), count, max_bytes, wait_ms, ttl_ms, before_ns,
    )  # fmt: skip


def lease_reserved(topic: bytes | str, channel: bytes | str, name: bytes | str) -> bytes:
    """LEASE_RESERVE of a lease that exists: ``LEASED <name> <n> <bytes>`` again."""
    return b"LEASE_RESERVE %s %s %s\n" % (_b(topic), _b(channel), _b(name))


def lease_columns(topic: bytes | str, channel: bytes | str, name: bytes | str) -> bytes:
    """LEASE_COLUMNS of a lease that exists: one frame, its messages column by column."""
    return b"LEASE_COLUMNS %s %s %s\n" % (_b(topic), _b(channel), _b(name))


def lease_fin(topic: bytes | str, channel: bytes | str, name: bytes | str) -> bytes:
    return b"LEASE_FIN %s %s %s\n" % (_b(topic), _b(channel), _b(name))


def lease_req(topic: bytes | str, channel: bytes | str, name: bytes | str, delay_ms: int) -> bytes:
    return b"LEASE_REQ %s %s %s %d\n" % (_b(topic), _b(channel), _b(name), delay_ms)

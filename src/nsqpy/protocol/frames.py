"""Server-to-client frames.

::

    frame:   [4-byte int32 size = 4 + len(data)][4-byte int32 frame type][data]
    message: [8-byte int64 timestamp ns][2-byte uint16 attempts][16-byte hex id][body]

Frame types: 0 response, 1 error, 2 message. All integers are big-endian.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, Protocol

from nsqpy._internal.compiled import load
from nsqpy.protocol.constants import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MIN_VALID_MSG_LENGTH,
    OK,
)

_FRAME_HEADER: Final = struct.Struct(">ii")
#: size, frame type, timestamp, attempts: everything of a message frame before its id.
MESSAGE_HEADER: Final = struct.Struct(">iiqH")
#: Bytes a message frame adds around its body: size, type, timestamp, attempts, id.
MESSAGE_FRAME_OVERHEAD: Final = 4 + 4 + 8 + 2 + 16
_pack_header = MESSAGE_HEADER.pack


def encode_frame(frame_type: int, data: bytes) -> bytes:
    return _FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_RESPONSE, data)


def encode_error(data: bytes) -> bytes:
    return encode_frame(FRAME_TYPE_ERROR, data)


def encode_message(timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    """A complete message frame (the broker's hot path builds the same bytes inline)."""
    size = MESSAGE_FRAME_OVERHEAD - 4 + len(body)
    return MESSAGE_HEADER.pack(size, FRAME_TYPE_MESSAGE, timestamp, attempts) + msg_id + body


class Framed(Protocol):
    """What a message frame is made of (nsqd's channel messages are such)."""

    @property
    def id(self) -> bytes: ...

    @property
    def body(self) -> bytes: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def attempts(self) -> int: ...


class SinkOwner(Protocol):
    """A connection's output side, as a :class:`MessageSink` fills it (no I/O here)."""

    _out: bytearray
    flush_pending: bool

    def flush(self) -> None: ...

    def request_flush(self) -> None: ...


class Sink(Protocol):
    def write(self, msg: Framed) -> None: ...

    def write_many(self, msgs: Sequence[Framed]) -> None: ...


class PyMessageSink:
    """Frames delivered messages into ``owner._out``: ``write(msg)`` appends a message frame,
    then has the owner flush at ``flush_at`` bytes, or schedule a flush if none is pending.

    The broker hands ``write`` to the channel as the client's ``write_message``; it runs once
    per delivered message.
    """

    __slots__ = ("_flush_at", "_owner")

    def __init__(self, owner: SinkOwner, flush_at: int) -> None:
        self._owner = owner
        self._flush_at = flush_at

    def write(self, msg: Framed) -> None:
        owner = self._owner
        out = owner._out
        body = msg.body
        out += _pack_header(
            len(body) + 30, FRAME_TYPE_MESSAGE, msg.timestamp, msg.attempts & 0xFFFF
        )
        out += msg.id
        out += body
        if len(out) >= self._flush_at:
            owner.flush()
        elif not owner.flush_pending:
            owner.request_flush()

    def write_many(self, msgs: Sequence[Framed]) -> None:
        """``write`` for each of ``msgs`` (a run of deliveries to one client), the owner
        looked up once: a flush at ``flush_at`` bytes, else one flush requested at the end
        if none is pending."""
        owner = self._owner
        out = owner._out
        flush_at = self._flush_at
        for msg in msgs:
            body = msg.body
            out += _pack_header(
                len(body) + 30, FRAME_TYPE_MESSAGE, msg.timestamp, msg.attempts & 0xFFFF
            )
            out += msg.id
            out += body
            if len(out) >= flush_at:
                owner.flush()
                out = owner._out  # the flush handed the old buffer to the transport
        if out and not owner.flush_pending:
            owner.request_flush()


OK_FRAME: Final = encode_response(OK)
HEARTBEAT_FRAME: Final = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME: Final = encode_response(CLOSE_WAIT)


class Frame(NamedTuple):
    frame_type: int
    data: bytes


class Message(NamedTuple):
    timestamp: int
    attempts: int
    id: bytes
    body: bytes


def decode_message(data: bytes) -> Message:
    """Decode the data of a message frame."""
    if len(data) < MIN_VALID_MSG_LENGTH:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    timestamp, attempts = struct.unpack_from(">qH", data)
    return Message(timestamp, attempts, bytes(data[10:26]), bytes(data[26:]))


class FrameDecoder:
    """Incremental frame reader for clients: ``feed(bytes)`` then ``next()`` until None."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> Frame | None:
        buf = self._buf
        if len(buf) < 8:
            return None
        size, frame_type = _FRAME_HEADER.unpack_from(buf)
        if size < 4:
            raise ValueError(f"invalid frame size {size}")
        if len(buf) < 4 + size:
            return None
        data = bytes(buf[8 : 4 + size])
        del buf[: 4 + size]
        return Frame(frame_type, data)

    def frames(self) -> list[Frame]:
        """Every complete frame buffered so far."""
        out = []
        while (frame := self.next()) is not None:
            out.append(frame)
        return out


# The compiled twin (nsqpy.protocol._cwire), unless NSQPY_PURE_PYTHON=1 or not built.
_cwire = load("nsqpy.protocol._cwire")
MessageSink: Callable[[SinkOwner, int], Sink] = (
    PyMessageSink if _cwire is None else _cwire.MessageSink
)

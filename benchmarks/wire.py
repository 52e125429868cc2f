"""Just enough of the NSQ TCP protocol V2 for load generation.

Client -> server commands are newline-terminated lines, some followed by a ``[4B size][body]``.
Server -> client data arrives as frames ``[4B size][4B type][data]`` where ``size`` counts the type
field plus the data. A message frame's data is ``[8B timestamp ns][2B attempts][16B id][body]``.
All integers are big-endian.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator

MAGIC_V2 = b"  V2"

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

OK = b"OK"
HEARTBEAT = b"_heartbeat_"
NOP = b"NOP\n"

FRAME_HEADER = struct.Struct(">ii")  # size (type + data), frame type
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
MESSAGE_PREFIX = struct.Struct(">qH16s")  # timestamp, attempts, id

HEADER_LEN = FRAME_HEADER.size
ID_LEN = 16
# Offsets inside a message frame, counted from the frame's first byte.
TIMESTAMP_AT = HEADER_LEN
ID_AT = HEADER_LEN + 8 + 2
BODY_AT = ID_AT + ID_LEN


class ProtocolError(Exception):
    """The peer sent an error frame or something this module cannot parse."""


# --- client -> server -------------------------------------------------------------------------


def make_body(size: int) -> bytes:
    """A printable message body of exactly ``size`` bytes."""
    pattern = b"nsqpy-bench-0123456789abcdefghijklmnopqrstuvwxyz."
    return (pattern * (size // len(pattern) + 1))[:size]


def mpub(topic: str, body: bytes, count: int) -> bytes:
    """A complete MPUB command carrying ``count`` copies of ``body``, encoded once up front."""
    one = U32.pack(len(body)) + body
    payload = U32.pack(count) + one * count
    return b"MPUB " + topic.encode() + b"\n" + U32.pack(len(payload)) + payload


def pub(topic: str, body: bytes) -> bytes:
    return b"PUB " + topic.encode() + b"\n" + U32.pack(len(body)) + body


def identify(data: dict[str, object]) -> bytes:
    raw = json.dumps(data).encode()
    return b"IDENTIFY\n" + U32.pack(len(raw)) + raw


def sub(topic: str, channel: str) -> bytes:
    return f"SUB {topic} {channel}\n".encode()


def rdy(count: int) -> bytes:
    return b"RDY %d\n" % count


def fin(msg_id: bytes) -> bytes:
    return b"FIN " + msg_id + b"\n"


def fin_many(ids: list[bytearray]) -> bytes:
    """One buffer holding a FIN line per id (a single join instead of one concat per id)."""
    return b"FIN " + b"\nFIN ".join(ids) + b"\n"


# --- server -> client -------------------------------------------------------------------------


def frame(frame_type: int, data: bytes) -> bytes:
    return FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def message_frame(timestamp_ns: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    return frame(FRAME_MESSAGE, MESSAGE_PREFIX.pack(timestamp_ns, attempts, msg_id) + body)


OK_FRAME = frame(FRAME_RESPONSE, OK)


class FrameReader:
    """A receive buffer that parses frames in place.

    Bytes live in one bytearray between ``start`` and ``end``; each recv appends after ``end`` and
    the unparsed tail (less than one frame) is moved to the front first, so the buffer never grows
    unless a single frame is bigger than it.
    """

    __slots__ = ("buf", "end", "start")

    def __init__(self, capacity: int = 1 << 20) -> None:
        self.buf = bytearray(capacity)
        self.start = 0
        self.end = 0

    def recv(self, sock: socket.socket) -> int:
        """Receive once into the free space; return the byte count (0 means the peer closed)."""
        self._make_room()
        with memoryview(self.buf) as view:
            n = sock.recv_into(view[self.end :])
        self.end += n
        return n

    def _make_room(self) -> None:
        pending = self.end - self.start
        if self.start:
            self.buf[:pending] = self.buf[self.start : self.end]
            self.start, self.end = 0, pending
        if self.end == len(self.buf):
            # One frame is larger than the whole buffer: double it.
            self.buf.extend(bytes(len(self.buf)))

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """Yield ``(frame_type, data)`` for each complete frame; for control traffic, not hot."""
        buf, pos, end = self.buf, self.start, self.end
        while end - pos >= HEADER_LEN:
            size, frame_type = FRAME_HEADER.unpack_from(buf, pos)
            if size < 4:
                raise ProtocolError(f"bad frame size {size}")
            nxt = pos + 4 + size
            if nxt > end:
                break
            self.start = nxt
            yield frame_type, bytes(buf[pos + HEADER_LEN : nxt])
            pos = nxt


def read_frame(sock: socket.socket, reader: FrameReader) -> tuple[int, bytes]:
    """Block until one frame is complete and return it (used during connection setup)."""
    while True:
        for item in reader.frames():
            return item
        if not reader.recv(sock):
            raise ProtocolError("connection closed by peer")


def expect_ok(sock: socket.socket, reader: FrameReader, what: str) -> None:
    """Read frames until the ``OK`` reply to ``what``, answering heartbeats on the way."""
    while True:
        frame_type, data = read_frame(sock, reader)
        if frame_type == FRAME_RESPONSE and data == HEARTBEAT:
            sock.sendall(NOP)
            continue
        if frame_type == FRAME_RESPONSE and data == OK:
            return
        raise ProtocolError(f"{what}: unexpected frame type {frame_type}: {data[:200]!r}")

"""nsqlookupd's TCP protocol "V1", both sides (used by nsqd -> nsqlookupd).

::

    client -> server   "  V1" magic, then text lines:
                        IDENTIFY\\n[4-byte size][JSON]   REGISTER <topic> [<channel>]\\n
                        UNREGISTER <topic> [<channel>]\\n  PING\\n
    server -> client   [4-byte size][data]   (no frame type: "OK", an IDENTIFY JSON reply,
                                              or "E_CODE description", after which it closes)

Lines are trimmed of surrounding white space and split on single spaces, as nsqlookupd does.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

from nsqpy.protocol.errors import SilentClose

MAGIC_V1: Final = b"  V1"
_SIZE: Final = struct.Struct(">i")
#: A command line longer than this is a read error: the connection is closed.
MAX_LINE: Final = 16 * 1024


# -- client side (nsqd) ----------------------------------------------------------------------
def encode_identify(info: dict[str, Any]) -> bytes:
    body = json.dumps(info, separators=(",", ":")).encode()
    return b"IDENTIFY\n" + _SIZE.pack(len(body)) + body


def encode_register(topic: str, channel: str = "") -> bytes:
    return f"REGISTER {topic} {channel}\n".encode() if channel else f"REGISTER {topic}\n".encode()


def encode_unregister(topic: str, channel: str = "") -> bytes:
    if channel:
        return f"UNREGISTER {topic} {channel}\n".encode()
    return f"UNREGISTER {topic}\n".encode()


PING: Final = b"PING\n"


class ResponseReader:
    """Splits ``[4-byte size][data]`` responses out of a byte stream."""

    def __init__(self, max_size: int = 5 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> bytes | None:
        buf = self._buf
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf)
        if size < 0 or size > self.max_size:
            raise ValueError(f"invalid response size {size}")
        if len(buf) < 4 + size:
            return None
        data = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        return data


# -- server side (nsqlookupd) ------------------------------------------------------------------
def encode_response(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


Command = tuple[list[bytes], bytes | None]


class CommandReader:
    """Server side: ``feed`` bytes, ``next()`` -> ``(params, body)`` or None for more data.

    ``params[0]`` is the command name. Only IDENTIFY has a body, and only while
    ``identify_has_body`` is true: once a connection has identified, nsqlookupd rejects a
    second IDENTIFY before reading anything more, so the server clears it. An impossible body
    size raises ``ValueError`` carrying nsqlookupd's error text, for the caller to send before
    closing; a zero size gives an empty body (which then fails to decode, as in Go).
    """

    def __init__(self, max_body_size: int = 5 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self.max_body_size = max_body_size
        self.identify_has_body = True
        self._pending: list[bytes] | None = None

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self) -> Command | None:
        buf = self._buf
        if self._pending is None:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > MAX_LINE:
                    raise SilentClose("line too long")
                return None
            line = bytes(buf[:nl]).strip()
            del buf[: nl + 1]
            params = line.split(b" ")
            if params[0] != b"IDENTIFY" or not self.identify_has_body:
                return params, None
            self._pending = params
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf)
        if size < 0 or size > self.max_body_size:
            raise ValueError("E_BAD_BODY IDENTIFY failed to read body")
        if len(buf) < 4 + size:
            return None
        body = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        params, self._pending = self._pending, None
        return params, body

"""Server side of V2: turn a byte stream into commands.

::

    command: NAME[ SP param]*\\n              (a trailing \\r is stripped)
    body commands (IDENTIFY AUTH PUB MPUB DPUB) are followed by [4-byte int32 size][size bytes]

``CommandReader.feed(data)`` buffers; ``next()`` returns ``(name, params, body)`` or None when
more bytes are needed. ``params`` is the whole line split on single spaces, so ``params[0]``
is the name, as in nsqd. ``body`` is None for commands without one.

nsqd validates a body command's line (state, parameters, names) *before* it reads the body, so
that error is what the client sees. The reader calls ``line_check(name, params)`` at that
point; it may raise :class:`ClientError`. The declared body size is then checked against the
limits before any body byte is buffered, so a huge size never costs memory.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Final

from nsqpy._internal.compiled import load
from nsqpy.protocol.constants import BODY_COMMANDS, MAX_LINE_LENGTH
from nsqpy.protocol.errors import ClientError, SilentClose

Command = tuple[bytes, list[bytes], bytes | None]
LineCheck = Callable[[bytes, list[bytes]], None]

_SIZE: Final = struct.Struct(">i")
_LINE, _SIZE_WAIT, _BODY_WAIT = 0, 1, 2
#: A run of plain FIN lines. The id's last byte may not be \r: nsqd strips a trailing \r and
#: would then see a 15-byte id, so that line must go through the generic path.
_FIN_RUN: Final = re.compile(rb"(?:FIN [^ \n]{15}[^ \n\r]\n)+")


def _no_check(name: bytes, params: list[bytes]) -> None:
    return None


class CommandReader:
    """Incremental V2 command parser (sans-IO)."""

    def __init__(
        self,
        max_msg_size: int,
        max_body_size: int,
        line_check: LineCheck = _no_check,
    ) -> None:
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.line_check = line_check
        self._data = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._chunk_bytes = 0
        self._need = 0  # bytes needed past _pos before parsing can progress
        self._state = _LINE
        self._pending_name = b""
        self._pending_params: list[bytes] = []
        self._body_size = 0

    def feed(self, data: bytes) -> None:
        avail = len(self._data) - self._pos
        if self._chunks or avail + len(data) < self._need:
            # Waiting for a large body: collect chunks, join once (no quadratic copying).
            self._chunks.append(data)
            self._chunk_bytes += len(data)
            if avail + self._chunk_bytes < self._need:
                return
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._chunk_bytes = 0
        if avail:
            self._data = self._data[self._pos :] + data
        else:
            self._data = data
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet consumed by a complete command."""
        return len(self._data) - self._pos + self._chunk_bytes

    def take_fins(self) -> list[bytes]:
        """Consume consecutive ``FIN <16-byte id>\\n`` lines at the front of the buffer.

        A consumer sends one FIN per message, so FINs dominate its traffic; taking a run of
        them in one pass lets the broker finish them as a batch. Anything that is not a plain,
        well-formed FIN (``\\r``, a space in the id, a short id) is left for ``next()``, which
        reports it exactly as nsqd would.
        """
        if self._state != _LINE:
            return []
        ids = fin_run(self._data, self._pos)
        self._pos += 21 * len(ids)
        return ids

    def next(self) -> Command | None:
        if self._state == _LINE:
            data, pos = self._data, self._pos
            nl = data.find(b"\n", pos)
            if nl < 0:
                if len(data) - pos >= MAX_LINE_LENGTH:
                    raise SilentClose("command line too long")
                self._need = 0
                return None
            if nl - pos >= MAX_LINE_LENGTH:
                raise SilentClose("command line too long")
            line = data[pos:nl]
            self._pos = nl + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            params = line.split(b" ")
            name = params[0]
            if name not in BODY_COMMANDS:
                return name, params, None
            self.line_check(name, params)
            self._pending_name = name
            self._pending_params = params
            self._state = _SIZE_WAIT
        if self._state == _SIZE_WAIT and not self._read_size():
            return None
        return self._read_body()

    def _read_size(self) -> bool:
        if len(self._data) - self._pos < 4:
            self._need = 4
            return False
        (size,) = _SIZE.unpack_from(self._data, self._pos)
        self._pos += 4
        self._check_size(self._pending_name, size)
        self._body_size = size
        self._state = _BODY_WAIT
        return True

    def _read_body(self) -> Command | None:
        size = self._body_size
        pos = self._pos
        if len(self._data) - pos < size:
            self._need = size
            return None
        body = self._data[pos : pos + size]
        self._pos = pos + size
        self._need = 0
        self._state = _LINE
        return self._pending_name, self._pending_params, body

    def _check_size(self, name: bytes, size: int) -> None:
        cmd = name.decode()
        if name in (b"PUB", b"DPUB"):
            if size <= 0:
                raise ClientError("E_BAD_MESSAGE", f"{cmd} invalid message body size {size}")
            if size > self.max_msg_size:
                raise ClientError(
                    "E_BAD_MESSAGE", f"{cmd} message too big {size} > {self.max_msg_size}"
                )
            return
        if name == b"MPUB":
            if size <= 0:
                raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
            if size > self.max_body_size:
                raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {self.max_body_size}")
            return
        # IDENTIFY and AUTH
        if size > self.max_body_size:
            raise ClientError("E_BAD_BODY", f"{cmd} body too big {size} > {self.max_body_size}")
        if size <= 0:
            raise ClientError("E_BAD_BODY", f"{cmd} invalid body size {size}")


def py_fin_run(data: bytes, pos: int) -> list[bytes]:
    """The ids of the plain ``FIN <id>\\n`` lines (21 bytes each) starting at ``pos``."""
    run = _FIN_RUN.match(data, pos)
    if run is None:
        return []
    return [data[i : i + 16] for i in range(pos + 4, run.end(), 21)]


def py_parse_mpub(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    """Split an MPUB payload ``[4B count]([4B size][data])*`` into message bodies.

    This is the TCP MPUB body after its size field, and the whole body of HTTP
    ``/mpub?binary=true``. Every message is validated before any is returned, so a batch is
    accepted or refused whole.
    """
    end = len(body)
    if end < 4:
        raise ClientError("E_BAD_BODY", "MPUB failed to read message count")
    (count,) = _SIZE.unpack_from(body, 0)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    out: list[bytes] = []
    append = out.append
    unpack = _SIZE.unpack_from
    pos = 4
    for i in range(count):
        if end - pos < 4:
            raise ClientError("E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size")
        (size,) = unpack(body, pos)
        pos += 4
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}")
        if size > max_msg_size:
            raise ClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        if end - pos < size:
            raise ClientError("E_BAD_MESSAGE", "MPUB failed to read message body")
        append(body[pos : pos + size])
        pos += size
    return out


# The compiled twins (nsqpy.protocol._cwire), unless NSQPY_PURE_PYTHON=1 or not built.
_cwire = load("nsqpy.protocol._cwire")
fin_run = py_fin_run if _cwire is None else _cwire.fin_run
parse_mpub = py_parse_mpub if _cwire is None else _cwire.parse_mpub

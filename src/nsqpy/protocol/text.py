"""Go's text conventions that leak onto the wire: %q quoting and integer parsing."""

from __future__ import annotations

import re
from typing import Final

_ESCAPES: Final = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x22: '\\"',
}

_ATOI: Final = re.compile(rb"[+-]?[0-9]+\Z")
_INT64_MAX: Final = (1 << 63) - 1


def go_quote(raw: bytes) -> str:
    """Render ``raw`` as Go's ``%q`` does (strconv.Quote), for error descriptions."""
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}" if code >= 0x80 else f"\\x{code:02x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_atoi(raw: bytes) -> int | None:
    """strconv.Atoi: optional sign and decimal digits within int64; None if invalid."""
    if not _ATOI.match(raw):
        return None
    value = int(raw)
    if value > _INT64_MAX or value < -_INT64_MAX - 1:
        return None
    return value


def byte_to_base10(raw: bytes) -> int | None:
    """nsqd's ByteToBase10: digits only (no sign); empty is 0; wraps like uint64."""
    if raw and not raw.isdigit():
        return None
    if not raw:
        return 0
    if not raw.isascii():
        return None
    return int(raw) & 0xFFFFFFFFFFFFFFFF


def as_int64(value: int) -> int:
    """Reinterpret a uint64 as Go's int64 (time.Duration conversions)."""
    return value - (1 << 64) if value > _INT64_MAX else value

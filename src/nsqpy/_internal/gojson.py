"""JSON bytes exactly as Go's ``encoding/json`` ``Marshal`` writes them.

NSQ's HTTP APIs are Go structs run through ``json.Marshal``; tools that diff or hash those
responses, and humans comparing them with a Go nsqd, see these differences from Python's
``json.dumps``:

- compact separators, UTF-8 output (no ``\\uXXXX`` for non-ASCII);
- ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` and friends (Go's HTML-safe
  default);
- a lone surrogate (an undecodable byte kept by ``surrogateescape``) becomes ``\\ufffd``, as
  Go does for invalid UTF-8;
- floats in Go's form: ``1`` not ``1.0``, ``100000000000000000000`` not ``1e+20``, exponent
  only below 1e-6 or from 1e21 up, and ``1e-07`` shortened to ``1e-7``.

Dicts keep their insertion order (Go emits struct fields in declaration order, which callers
reproduce by building dicts in that order). ``None`` is ``null``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Final

# Everything Go's encodeState.string escapes: quote, backslash, control characters, the
# HTML-sensitive <, > and &, the JavaScript line separators U+2028/U+2029, and (as the
# replacement character) any lone surrogate, which is how invalid UTF-8 reaches us.
_NEEDS_ESCAPE: Final = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    if "\ud800" <= ch <= "\udfff":
        return "\\ufffd"
    # Go 1.21 (which built NSQ v1.3.0) writes \b and \f as \u0008 and \u000c too.
    return f"\\u{ord(ch):04x}"


def _string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def format_float(value: float) -> str:
    """A float64 as Go's encoding/json writes it (shortest round-trip digits)."""
    if math.isnan(value) or math.isinf(value):
        # Go refuses these with UnsupportedValueError; so do we.
        raise ValueError(f"json: unsupported value: {value!r}")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)  # Python uses an exponent throughout this range too
        mantissa, _, exponent = text.partition("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0")
        # Go keeps at least two exponent digits, then encoding/json drops a leading zero
        # from a negative two-digit exponent ("e-07" -> "e-7"); positive ones stay "e+21".
        if sign == "+" and len(digits) < 2:
            digits = digits.rjust(2, "0")
        return f"{mantissa}e{sign}{digits}"
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _encode(obj: object, out: list[str]) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_string(obj))
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        out.append(format_float(obj))
    elif isinstance(obj, Mapping):
        _encode_mapping(obj, out)
    elif isinstance(obj, Sequence) and not isinstance(obj, bytes | bytearray):
        _encode_sequence(obj, out)
    else:
        raise TypeError(f"json: unsupported type: {type(obj).__name__}")


def _encode_mapping(obj: Mapping[object, object], out: list[str]) -> None:
    out.append("{")
    first = True
    for key, value in obj.items():
        if not isinstance(key, str):
            raise TypeError(f"json: unsupported map key type: {type(key).__name__}")
        if not first:
            out.append(",")
        first = False
        out.append(_string(key))
        out.append(":")
        _encode(value, out)
    out.append("}")


def _encode_sequence(obj: Sequence[object], out: list[str]) -> None:
    out.append("[")
    for index, item in enumerate(obj):
        if index:
            out.append(",")
        _encode(item, out)
    out.append("]")


def dumps(obj: object) -> bytes:
    """Encode ``obj`` (None, bool, int, float, str, mappings, sequences) like Go's Marshal."""
    out: list[str] = []
    _encode(obj, out)
    return "".join(out).encode("utf-8")

"""Go's ``strconv`` and ``fmt`` text forms that NSQ's command lines and configs expose.

Being CLI-compatible means parsing values the way Go does (``0x10``, ``017`` and ``1_000``
are ints, surrounding spaces are errors, ``t``/``TRUE`` are booleans) and printing them the
way Go prints defaults and errors.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from decimal import Decimal
from typing import Final
from urllib.parse import quote_plus

SYNTAX: Final = "invalid syntax"
RANGE: Final = "value out of range"

_INT64_LIMIT: Final = 1 << 63
_UINT64_LIMIT: Final = 1 << 64
_ASCII_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TRUE_WORDS: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE_WORDS: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_NAMED_ESCAPES: Final = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
    '"': '\\"', "\\": "\\\\",
}  # fmt: skip
_DEC_FLOAT: Final = re.compile(r"[+-]?(?P<mant>[0-9_]*(?:\.[0-9_]*)?)(?:[eE][+-]?[0-9][0-9_]*)?")
_HEX_FLOAT: Final = re.compile(
    r"[+-]?0[xX](?P<mant>[0-9a-fA-F_]*(?:\.[0-9a-fA-F_]*)?)[pP][+-]?[0-9][0-9_]*"
)
_SPECIAL_FLOATS: Final = {
    "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
    "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf, "nan": math.nan,
}  # fmt: skip


class GoNumError(ValueError):
    """A strconv failure; ``str()`` is Go's ``strconv.ParseX: parsing "s": reason`` text."""

    def __init__(self, func: str, num: str, reason: str) -> None:
        super().__init__(f"strconv.{func}: parsing {go_quote(num)}: {reason}")
        self.func = func
        self.num = num
        self.reason = reason


def go_quote(text: str) -> str:
    """Double-quote ``text`` like Go's ``strconv.Quote`` (used by ``%q`` in messages)."""
    out = ['"']
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif 0xD800 <= ord(ch) <= 0xDFFF or ord(ch) < 0x80:
            out.append(f"\\x{ord(ch) & 0xFF:02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def parse_go_bool(text: str) -> bool:
    """Go ``strconv.ParseBool``: only 1 t T TRUE true True / 0 f F FALSE false False."""
    if text in _TRUE_WORDS:
        return True
    if text in _FALSE_WORDS:
        return False
    raise GoNumError("ParseBool", text, SYNTAX)


def _underscore_ok(text: str) -> bool:
    """Go's rule: '_' may only sit between digits, or between a base prefix and a digit."""
    body = text[1:] if text[:1] in ("+", "-") else text
    saw, start, hexa = "^", 0, False  # saw: ^ start, 0 digit/prefix, _ underscore, ! other
    if len(body) >= 2 and body[0] == "0" and body[1].lower() in "box":
        saw, start, hexa = "0", 2, body[1].lower() == "x"
    for ch in body[start:]:
        if "0" <= ch <= "9" or (hexa and ch.lower() in "abcdef"):
            saw = "0"
        elif ch == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _digit_value(ch: str) -> int:
    if "0" <= ch <= "9":
        return ord(ch) - ord("0")
    if ch in _ASCII_LETTERS:
        return ord(ch.lower()) - ord("a") + 10
    return 99  # never a valid digit in any base


def _parse_magnitude(s: str, base: int, func: str, orig: str) -> int:
    """Go ``ParseUint`` on an unsigned string; errors name ``func`` and the original text."""
    if not s:
        raise GoNumError(func, orig, SYNTAX)
    prefixed = base == 0
    body = s
    if prefixed:
        base = 10
        if s[0] == "0":
            if len(s) >= 3 and s[1].lower() in "box":
                base, body = {"b": 2, "o": 8, "x": 16}[s[1].lower()], s[2:]
            else:
                base, body = 8, s[1:]
    value, underscores = 0, False
    for ch in body:
        if ch == "_" and prefixed:
            underscores = True
            continue
        digit = _digit_value(ch)
        if digit >= base:
            raise GoNumError(func, orig, SYNTAX)
        value = value * base + digit
        if value >= _UINT64_LIMIT:
            raise GoNumError(func, orig, RANGE)
    if underscores and not _underscore_ok(s):
        raise GoNumError(func, orig, SYNTAX)
    return value


def parse_go_int(text: str, base: int = 0) -> int:
    """Go ``strconv.ParseInt(text, base, 64)``; base 0 honours 0x/0o/0b/0 prefixes and '_'."""
    if not text:
        raise GoNumError("ParseInt", text, SYNTAX)
    negative = text[0] == "-"
    unsigned = text[1:] if text[0] in "+-" else text
    magnitude = _parse_magnitude(unsigned, base, "ParseInt", text)
    if magnitude > _INT64_LIMIT or (magnitude == _INT64_LIMIT and not negative):
        raise GoNumError("ParseInt", text, RANGE)
    return -magnitude if negative else magnitude


def parse_go_float(text: str) -> float:
    """Go ``strconv.ParseFloat(text, 64)``: decimal or hex (needs 'p'), inf/infinity/nan."""
    special = _SPECIAL_FLOATS.get(text.lower())
    if special is not None:
        return special
    hex_match = _HEX_FLOAT.fullmatch(text)
    match = hex_match or _DEC_FLOAT.fullmatch(text)
    digits = "0123456789abcdefABCDEF" if hex_match else "0123456789"
    if match is None or not any(ch in digits for ch in match.group("mant")):
        raise GoNumError("ParseFloat", text, SYNTAX)
    if "_" in text and not _underscore_ok(text):
        raise GoNumError("ParseFloat", text, SYNTAX)
    cleaned = text.replace("_", "")
    try:
        value = float.fromhex(cleaned) if hex_match else float(cleaned)
    except OverflowError:
        value = math.inf
    if math.isinf(value):
        # Go returns ±Inf together with ErrRange when a finite literal overflows.
        raise GoNumError("ParseFloat", text, RANGE)
    return value


def format_go_float(value: float) -> str:
    """Go's ``%v`` of a float64 (``strconv.FormatFloat(v, 'g', -1, 64)``): shortest digits,
    e-notation when the decimal exponent is below -4 or at least 6."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    # repr() gives the shortest round-tripping digits, the same digits Go picks.
    parts = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, parts.digits)).rstrip("0")
    exponent = int(parts.exponent) + len(parts.digits) - 1  # scientific exponent
    if exponent < -4 or exponent >= 6:
        tail = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{tail}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    point = exponent + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_go_value(value: object) -> str:
    """Go's ``%v`` of a decoded config value (for error messages)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_go_float(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(format_go_value(item) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{key}:{format_go_value(item)}" for key, item in sorted(value.items()))
        return "map[" + " ".join(pairs) + "]"
    if value is None:
        return "<nil>"
    return str(value)


def go_type_name(value: object) -> str:
    """The Go type BurntSushi/toml would have decoded ``value`` into."""
    if isinstance(value, bool):
        return "bool"
    names: list[tuple[type, str]] = [
        (int, "int64"), (float, "float64"), (str, "string"), (list, "[]interface {}"),
        (dict, "map[string]interface {}"), (_dt.datetime, "time.Time"),
    ]  # fmt: skip
    for kind, name in names:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def query_escape(value: str | bytes) -> str:
    """Go's ``url.QueryEscape``: every byte but ``A-Za-z0-9-_.~`` escaped, space as ``+``."""
    return quote_plus(value, safe="")

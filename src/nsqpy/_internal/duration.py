"""Go ``time.Duration`` text forms, in integer nanoseconds.

NSQ's flags, config files and HTTP output all use Go's duration syntax ("1h2m3.5s", "250ms"),
so nsqpy parses and prints it exactly as Go does: ``parse_go_duration`` follows the grammar
``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` (plus the lone "0"), and ``format_go_duration`` reproduces
``Duration.String()``. Values are plain ``int`` nanoseconds bounded like Go's int64.
"""

from __future__ import annotations

from typing import Final

NANOSECOND: Final = 1
MICROSECOND: Final = 1_000
MILLISECOND: Final = 1_000_000
SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

# Both the micro sign (U+00B5) and the Greek mu (U+03BC) are accepted by Go.
_UNITS: Final[dict[str, int]] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,
    "\u03bcs": MICROSECOND,
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}

# Go accumulates the magnitude in a uint64 and rejects anything beyond 1<<63.
_LIMIT: Final = 1 << 63
_DIGITS: Final = frozenset("0123456789")


def _quote(text: str) -> str:
    """Quote like Go's time package: ASCII kept, other bytes as \\xNN, '"' and '\\' escaped."""
    out = ['"']
    for ch in text:
        if ch < " " or ord(ch) >= 0x80:
            out.extend(f"\\x{byte:02x}" for byte in ch.encode("utf-8", "surrogatepass"))
        elif ch in '"\\':
            out.append("\\" + ch)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _invalid(orig: str) -> ValueError:
    return ValueError(f"time: invalid duration {_quote(orig)}")


def _take_digits(s: str, pos: int) -> int:
    """Index just past the run of ASCII digits starting at ``pos``."""
    while pos < len(s) and s[pos] in _DIGITS:
        pos += 1
    return pos


def _fraction_value(digits: str) -> tuple[int, int]:
    """(numerator, scale) of a fraction, ignoring digits Go drops once precision overflows."""
    num, scale = 0, 1
    for ch in digits:
        candidate = num * 10 + int(ch)
        if num > (_LIMIT - 1) // 10 or candidate > _LIMIT:
            break
        num, scale = candidate, scale * 10
    return num, scale


def _segment(s: str, pos: int, orig: str) -> tuple[int, int]:
    """Parse one ``digits[.digits]unit`` segment at ``pos``; return (nanoseconds, next pos)."""
    if s[pos] != "." and s[pos] not in _DIGITS:
        raise _invalid(orig)
    int_end = _take_digits(s, pos)
    whole = int(s[pos:int_end]) if int_end > pos else 0
    if whole > _LIMIT:
        raise _invalid(orig)
    frac_num, frac_scale, end = 0, 1, int_end
    if end < len(s) and s[end] == ".":
        frac_end = _take_digits(s, end + 1)
        frac_num, frac_scale = _fraction_value(s[end + 1 : frac_end])
        if int_end == pos and frac_end == end + 1:
            raise _invalid(orig)  # "." with no digits on either side
        end = frac_end
    unit_end = end
    while unit_end < len(s) and s[unit_end] != "." and s[unit_end] not in _DIGITS:
        unit_end += 1
    if unit_end == end:
        raise ValueError(f"time: missing unit in duration {_quote(orig)}")
    unit_name = s[end:unit_end]
    unit = _UNITS.get(unit_name)
    if unit is None:
        raise ValueError(f"time: unknown unit {_quote(unit_name)} in duration {_quote(orig)}")
    if whole > _LIMIT // unit:
        raise _invalid(orig)
    # Go converts the fraction through float64; doing the same keeps rounding identical.
    value = whole * unit + (int(float(frac_num) * (float(unit) / frac_scale)) if frac_num else 0)
    if value > _LIMIT:
        raise _invalid(orig)
    return value, unit_end


def parse_go_duration(text: str) -> int:
    """Parse Go duration text (e.g. "1h2m3.5s", "-250ms", "0") into integer nanoseconds.

    Raises ValueError carrying Go's message, e.g. ``time: invalid duration "x"``.
    """
    s, negative = text, False
    if s[:1] in ("-", "+"):
        negative, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise _invalid(text)
    total, pos = 0, 0
    while pos < len(s):
        value, pos = _segment(s, pos, text)
        total += value
        if total > _LIMIT:
            raise _invalid(text)
    if negative:
        return -total
    if total > _LIMIT - 1:
        raise _invalid(text)
    return total


def _fraction_text(value: int, precision: int) -> tuple[str, int]:
    """Split ``value`` at 10**precision: (".ddd" without trailing zeros or "", integer part)."""
    whole, frac = divmod(value, 10**precision)
    digits = f"{frac:0{precision}d}".rstrip("0") if precision else ""
    return ("." + digits if digits else ""), whole


def format_go_duration(ns: int) -> str:
    """Render nanoseconds as Go's ``Duration.String()``: "1h2m3s", "1.5s", "250ms", "0s"."""
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u == 0:
        return "0s"
    if u < SECOND:
        # Sub-second values use the largest unit that keeps a non-zero integer part.
        if u < MICROSECOND:
            return f"{sign}{u}ns"
        unit, precision = ("\u00b5s", 3) if u < MILLISECOND else ("ms", 6)
        frac, whole = _fraction_text(u, precision)
        return f"{sign}{whole}{frac}{unit}"
    frac, seconds = _fraction_text(u, 9)
    minutes, secs = divmod(seconds, 60)
    text = f"{secs}{frac}s"
    if minutes:
        hours, mins = divmod(minutes, 60)
        text = f"{mins}m{text}"
        if hours:
            text = f"{hours}h{text}"
    return sign + text

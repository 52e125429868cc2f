"""The strftime dialect of nsq_to_file's ``--datetime-format``.

NSQ does not use the C library: it maps a fixed set of ``%`` directives onto Go's time layout and
passes every other character through. So the output never depends on the locale (month and day
names are always English) and an unknown directive such as ``%j`` stays in the text as written.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Final

_MONTHS: Final = (
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
)
_DAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _hour12(t: dt.datetime) -> str:
    return f"{(t.hour % 12) or 12:02d}"


def _numeric_zone(t: dt.datetime) -> str:
    offset = t.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{mins:02d}"


def _zone_name(t: dt.datetime) -> str:
    # Go prints the zone's abbreviation, or the numeric offset for a zone without one.
    return t.tzname() or _numeric_zone(t)


_DIRECTIVES: Final[dict[str, Callable[[dt.datetime], str]]] = {
    "B": lambda t: _MONTHS[t.month - 1],
    "b": lambda t: _MONTHS[t.month - 1][:3],
    "m": lambda t: f"{t.month:02d}",
    "A": lambda t: _DAYS[t.weekday()],
    "a": lambda t: _DAYS[t.weekday()][:3],
    "d": lambda t: f"{t.day:02d}",
    "H": lambda t: f"{t.hour:02d}",
    "I": _hour12,
    "M": lambda t: f"{t.minute:02d}",
    "S": lambda t: f"{t.second:02d}",
    "Y": lambda t: f"{t.year:04d}",
    "y": lambda t: f"{t.year % 100:02d}",
    "p": lambda t: "PM" if t.hour >= 12 else "AM",
    "Z": _zone_name,
    "z": _numeric_zone,
    "%": lambda t: "%",
}


def strftime(fmt: str, t: dt.datetime) -> str:
    """Render ``t`` with NSQ's directive set; unknown ``%x`` pairs are copied unchanged."""
    out: list[str] = []
    i = 0
    while i < len(fmt):
        render = _DIRECTIVES.get(fmt[i + 1]) if fmt[i] == "%" and i + 1 < len(fmt) else None
        if render is None:
            out.append(fmt[i])
            i += 1
        else:
            out.append(render(t))
            i += 2
    return "".join(out)

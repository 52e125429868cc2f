"""Go time.ParseDuration / Duration.String() compatibility."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqpy._internal.duration import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    SECOND,
    format_go_duration,
    parse_go_duration,
)

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("+0", 0),
        ("-0", 0),
        ("0s", 0),
        ("5s", 5 * SECOND),
        ("30s", 30 * SECOND),
        ("1478s", 1478 * SECOND),
        ("-5s", -5 * SECOND),
        ("+5s", 5 * SECOND),
        ("-0s", 0),
        ("5.0s", 5 * SECOND),
        ("7.25s", 7 * SECOND + 250 * MILLISECOND),
        ("5.s", 5 * SECOND),
        (".5s", SECOND // 2),
        ("1.0s", SECOND),
        ("1.00s", SECOND),
        ("2.008s", 2 * SECOND + 8 * MILLISECOND),
        ("300.00300s", 300 * SECOND + 3 * MILLISECOND),
        ("10ns", 10),
        ("11us", 11 * MICROSECOND),
        ("12\u00b5s", 12 * MICROSECOND),  # micro sign
        ("12\u03bcs", 12 * MICROSECOND),  # Greek mu
        ("13ms", 13 * MILLISECOND),
        ("14s", 14 * SECOND),
        ("15m", 15 * MINUTE),
        ("16h", 16 * HOUR),
        ("3h30m", 3 * HOUR + 30 * MINUTE),
        ("20.5s3m", 3 * MINUTE + 20 * SECOND + 500 * MILLISECOND),
        ("-1m2.5s", -(MINUTE + 2 * SECOND + 500 * MILLISECOND)),
        ("2h3m4s5ms6us7ns", 2 * HOUR + 3 * MINUTE + 4 * SECOND + 5 * MILLISECOND + 6007),
        ("12h34m56.789s", 12 * HOUR + 34 * MINUTE + 56 * SECOND + 789 * MILLISECOND),
        ("123456789012ns", 123456789012),
        ("0.25h", 15 * MINUTE),
        ("9007199254740995ns", (1 << 53) + 3),
        ("9223372036854775807ns", INT64_MAX),
        ("9223372036854775.807us", INT64_MAX),
        ("2562047h47m16.854775807s", INT64_MAX),
        ("-9223372036854775808ns", INT64_MIN),
        ("-9223372036854775.808us", INT64_MIN),
        ("0.5000000000000000000000h", 30 * MINUTE),
        # Fractions go through float64 exactly as in Go, so long ones round the same way.
        ("0.830103483285477580700h", 49 * MINUTE + 48 * SECOND + 372539827),
    ],
)
def test_parse_valid(text: str, expected: int) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("3", 'time: missing unit in duration "3"'),
        ("-", 'time: invalid duration "-"'),
        ("s", 'time: invalid duration "s"'),
        (".", 'time: invalid duration "."'),
        ("-.", 'time: invalid duration "-."'),
        (".s", 'time: invalid duration ".s"'),
        ("+.s", 'time: invalid duration "+.s"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1h-2m", 'time: unknown unit "h-" in duration "1h-2m"'),
        (" 1s", 'time: invalid duration " 1s"'),
        ("1s ", 'time: unknown unit "s " in duration "1s "'),
        ("100", 'time: missing unit in duration "100"'),
        ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
        ("9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'),
        ("-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ('"1s"', 'time: invalid duration "\\"1s\\""'),
        ("\u00e9", 'time: invalid duration "\\xc3\\xa9"'),
        ("1\u00e9", 'time: unknown unit "\\xc3\\xa9" in duration "1\\xc3\\xa9"'),
    ],
)
def test_parse_errors_use_go_messages(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_go_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1100, "1.1\u00b5s"),
        (2200 * MICROSECOND, "2.2ms"),
        (3300 * MILLISECOND, "3.3s"),
        (4 * MINUTE + 5 * SECOND, "4m5s"),
        (4 * MINUTE + 5001 * MILLISECOND, "4m5.001s"),
        (5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND, "5h6m7.001s"),
        (8 * MINUTE + 1, "8m0.000000001s"),
        (HOUR, "1h0m0s"),
        (MINUTE, "1m0s"),
        (250 * MILLISECOND, "250ms"),
        (25 * MILLISECOND, "25ms"),
        (10 * MINUTE, "10m0s"),
        (1500 * MILLISECOND, "1.5s"),
        (INT64_MAX, "2562047h47m16.854775807s"),
        (INT64_MIN, "-2562047h47m16.854775808s"),
        (-1500, "-1.5\u00b5s"),
        (-SECOND, "-1s"),
    ],
)
def test_format_matches_go(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_go_duration(format_go_duration(ns)) == ns

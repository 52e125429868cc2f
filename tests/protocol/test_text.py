"""Go text conventions: %q quoting, names, and nsqd's integer parsing."""

from __future__ import annotations

import pytest

from nsqpy.protocol.names import is_ephemeral, is_valid_name
from nsqpy.protocol.text import as_int64, byte_to_base10, go_atoi, go_quote


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        (b"abc", '"abc"'),
        (b'a"b', '"a\\"b"'),
        (b"a\nb\t", '"a\\nb\\t"'),
        (b"\x00", '"\\x00"'),
        (b"\xff", '"\\xff"'),
        ("é".encode(), '"é"'),
        (b"a\\b", '"a\\\\b"'),
    ],
)
def test_go_quote(raw: bytes, quoted: str) -> None:
    assert go_quote(raw) == quoted


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("", False),
        ("t.-_9", True),
        ("t#ephemeral", True),
        ("a" * 54 + "#ephemeral", True),
        ("a" * 55 + "#ephemeral", False),
        ("t#other", False),
        ("t\n", False),
        ("t ", False),
        ("é", False),
    ],
)
def test_names(name: str, valid: bool) -> None:
    assert is_valid_name(name) is valid
    assert is_valid_name(name.encode()) is valid


def test_ephemeral() -> None:
    assert is_ephemeral("c#ephemeral")
    assert not is_ephemeral("c")


def test_byte_to_base10() -> None:
    assert byte_to_base10(b"123") == 123
    assert byte_to_base10(b"") == 0
    assert byte_to_base10(b"-1") is None
    assert byte_to_base10(b"+1") is None
    assert byte_to_base10(b"1a") is None
    assert byte_to_base10(b"18446744073709551617") == 1  # wraps like uint64


def test_go_atoi_and_int64() -> None:
    assert go_atoi(b"-5") == -5
    assert go_atoi(b"x") is None
    assert go_atoi(b"9223372036854775808") is None
    assert as_int64(2**64 - 1) == -1

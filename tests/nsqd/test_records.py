"""Disk records: NSQ's plain payload, and nsqpy's extensions for deferred messages and dead
letters."""

from __future__ import annotations

import pytest

from nsqpy.nsqd.core.records import MAX_EXTENSION_SIZE, decode, encode


def test_plain_record_is_nsqs_payload_byte_for_byte() -> None:
    data = encode(0x0102030405060708, 3, b"0123456789abcdef", b"body")
    assert data == (
        b"\x01\x02\x03\x04\x05\x06\x07\x08"  # timestamp
        b"\x00\x03"  # attempts
        b"0123456789abcdef"
        b"body"
    )


def test_nsq_written_record_decodes() -> None:
    raw = b"\x17\x9a\x00\x00\x00\x00\x00\x01\x00\x01" + b"a" * 16 + b"hello"
    rec = decode(raw)
    assert (rec.timestamp, rec.attempts, rec.id, rec.body, rec.due_ns) == (
        0x179A000000000001,
        1,
        b"a" * 16,
        b"hello",
        0,
    )


def test_deferred_record_round_trip_and_layout() -> None:
    data = encode(5, 1, b"b" * 16, b"later", due_ns=1_700_000_000_000_000_000)
    assert data[:8] == b"\xffnsqpyD\x01"
    assert data[8:16] == (1_700_000_000_000_000_000).to_bytes(8, "big")
    assert decode(data) == (5, 1, b"b" * 16, b"later", 1_700_000_000_000_000_000, "")


def test_dead_letter_record_golden_bytes() -> None:
    data = encode(0x0102030405060708, 0, b"0123456789abcdef", b"body", origin="t:c")
    assert data == (
        b"\xffnsqpyO\x01"  # magic: a timestamp never starts with 0xff
        b"\x00\x00\x00\x00\x00\x00\x00\x00"  # due: not deferred
        b"\x03t:c"  # origin, length-prefixed
        b"\x01\x02\x03\x04\x05\x06\x07\x08\x00\x00"  # then NSQ's payload unchanged
        b"0123456789abcdef"
        b"body"
    )
    assert decode(data) == (0x0102030405060708, 0, b"0123456789abcdef", b"body", 0, "t:c")


def test_deferred_dead_letter_keeps_both() -> None:
    origin = "a" * 64 + ":" + "b" * 64  # the longest origin there can be
    data = encode(7, 2, b"c" * 16, b"x", due_ns=99, origin=origin)
    assert decode(data) == (7, 2, b"c" * 16, b"x", 99, origin)
    assert len(data) - (26 + 1) <= MAX_EXTENSION_SIZE


def test_too_short() -> None:
    with pytest.raises(ValueError, match="invalid message buffer size"):
        decode(b"\x00" * 25)

"""Framing a batch of disk records for one write (``storage.frames``): the pure-Python twin
and the compiled one (``_cframes``) against go-diskqueue's layout and against each other."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twins import compiled, in_use

from nsqpy.nsqd.storage import frames

FRAMES = "nsqpy.nsqd.storage._cframes"


def _twins() -> list[frames.Frame]:
    return [frames.py_frame, compiled(FRAMES).frame]


def test_records_are_framed_as_go_diskqueue_writes_them() -> None:
    # each record behind its length as a big-endian int32 (go-diskqueue's writeOne)
    records = [b"abc", b"", b"x" * 300]
    golden = b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x00" + b"\x00\x00\x01\x2c" + b"x" * 300
    for frame in _twins():
        assert frame(records, 0, 100, 1 << 20, True) == (golden, 3, [100, 107, 111])
        assert frame(records, 0, 100, 1 << 20, False) == (golden, 3, None)


def test_only_what_fits_the_segment_is_framed() -> None:
    records = [b"a" * 10, b"b" * 10, b"c" * 10]  # 14 bytes each, framed
    for frame in _twins():
        two = b"\x00\x00\x00\x0a" + b"a" * 10 + b"\x00\x00\x00\x0a" + b"b" * 10
        assert frame(records, 0, 0, 30, True) == (two, 2, [0, 14])  # a third would end at 42
        assert frame(records, 2, 20, 30, True) == (b"", 0, [])  # 20 + 14 > 30
        # the first record of an empty segment goes in even when it is larger than the limit
        assert frame(records, 1, 0, 5, False) == (b"\x00\x00\x00\x0a" + b"b" * 10, 1, None)
        assert frame(records, 3, 0, 30, True) == (b"", 0, [])


@given(
    st.lists(st.binary(max_size=40), max_size=12),
    st.integers(0, 13),
    st.integers(0, 200),
    st.integers(1, 300),
    st.booleans(),
)
def test_frame_twins_agree(
    records: list[bytes], start: int, pos: int, limit: int, want_starts: bool
) -> None:
    py = frames.py_frame(records, start, pos, limit, want_starts)
    assert compiled(FRAMES).frame(records, start, pos, limit, want_starts) == py
    data, count, starts = py
    assert len(data) == sum(4 + len(r) for r in records[start : start + count])
    if starts is not None:
        assert len(starts) == count


@given(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 20), st.integers(0, 40))
def test_bad_size_twins_agree(records: list[bytes], low: int, high: int) -> None:
    py = frames.py_bad_size(records, low, high)
    assert compiled(FRAMES).bad_size(records, low, high) == py
    bad = [len(r) for r in records if not low <= len(r) <= high]
    assert py == (bad[0] if bad else -1)


def test_a_negative_start_is_refused_by_both_twins() -> None:
    for frame in _twins():
        with pytest.raises(ValueError, match="must not be negative"):
            frame([b"a"], -1, 0, 100, False)


def test_the_compiled_twin_takes_only_bytes() -> None:
    c = compiled(FRAMES)
    with pytest.raises(TypeError, match="must be bytes"):
        c.frame([b"ok", bytearray(b"no")], 0, 0, 100, False)
    with pytest.raises(TypeError, match="must be bytes"):
        c.bad_size([memoryview(b"no")], 0, 100)  # type: ignore[list-item]


def test_the_selected_twins_are_the_compiled_ones_unless_pure_python() -> None:
    c = in_use(FRAMES)
    assert frames.frame is (frames.py_frame if c is None else c.frame)
    assert frames.bad_size is (frames.py_bad_size if c is None else c.bad_size)

"""The compiled wire codec (_cwire) against its pure-Python twins: same ids, same bodies,
same errors and the same frame bytes, byte for byte."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twins import WIRE, compiled, in_use

from nsqpy.protocol import command_reader, frames
from nsqpy.protocol.errors import ClientError
from nsqpy.protocol.frames import PyMessageSink, encode_message

MAX_MSG, MAX_BODY = 1024, 5 * 1024
ID = b"0123456789abcdef"


def _outcome(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except ClientError as err:
        return ("error", err.wire, err.fatal)


def _mpub(bodies: list[bytes]) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


MPUB_CASES = [
    _mpub([b"abc", b"d"]),
    _mpub([b"x" * MAX_MSG]),
    _mpub([b"x" * (MAX_MSG + 1)]),
    b"",
    b"\x00\x00",
    struct.pack(">i", 0),
    struct.pack(">i", -1),
    struct.pack(">i", MAX_BODY),
    struct.pack(">i", 2) + struct.pack(">i", 3) + b"abc",
    struct.pack(">i", 1) + struct.pack(">i", 0),
    struct.pack(">i", 1) + struct.pack(">i", -7),
    struct.pack(">i", 1) + struct.pack(">i", 9) + b"short",
    struct.pack(">i", 1) + b"\x00",
]


@pytest.mark.parametrize("payload", MPUB_CASES)
def test_parse_mpub_twins_agree(payload: bytes) -> None:
    c = compiled(WIRE)
    py = _outcome(command_reader.py_parse_mpub, payload, MAX_MSG, MAX_BODY)
    assert _outcome(c.parse_mpub, payload, MAX_MSG, MAX_BODY) == py


@given(st.lists(st.binary(min_size=0, max_size=40), max_size=20), st.binary(max_size=8))
def test_parse_mpub_twins_agree_on_any_payload(bodies: list[bytes], tail: bytes) -> None:
    c = compiled(WIRE)
    for payload in (_mpub(bodies), _mpub(bodies) + tail, _mpub(bodies)[: len(tail) * 3]):
        py = _outcome(command_reader.py_parse_mpub, payload, 30, 600)
        assert _outcome(c.parse_mpub, payload, 30, 600) == py


FIN_PARTS = st.sampled_from(
    [
        b"FIN " + ID + b"\n",
        b"FIN " + ID[:15] + b"\r\n",
        b"FIN " + ID[:8] + b" " + ID[9:] + b"\n",
        b"FIN " + ID[:15] + b"\n",
        b"FIN " + ID + b"x\n",
        b"RDY 10\n",
        b"FIN " + ID[:10],
        b"fin " + ID + b"\n",
    ]
)


@given(st.lists(FIN_PARTS, max_size=12), st.integers(min_value=0, max_value=30))
def test_fin_run_twins_agree(parts: list[bytes], pos: int) -> None:
    c = compiled(WIRE)
    data = b"".join(parts)
    assert c.fin_run(data, pos) == command_reader.py_fin_run(data, pos)


class _Owner:
    def __init__(self) -> None:
        self._out = bytearray()
        self.flush_pending = False
        self.calls: list[tuple[str, bytes]] = []

    def flush(self) -> None:
        self.calls.append(("flush", bytes(self._out)))
        self._out = bytearray()
        self.flush_pending = False

    def request_flush(self) -> None:
        self.calls.append(("request", bytes(self._out)))
        self.flush_pending = True


class _Msg:
    def __init__(self, n: int, attempts: int, body: bytes) -> None:
        self.id = b"%016x" % n
        self.body = body
        self.timestamp = 1_700_000_000_123_456_789 + n
        self.attempts = attempts


MSGS = [_Msg(n, a, b) for n, (a, b) in enumerate([(1, b"a" * 200), (65537, b""), (7, b"xyz")])]


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_message_sink_writes_nsqd_message_frames(impl: str) -> None:
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    sink = sink_cls(owner, 1 << 20)
    for m in MSGS:
        sink.write(m)
    golden = b"".join(encode_message(m.timestamp, m.attempts & 0xFFFF, m.id, m.body) for m in MSGS)
    assert bytes(owner._out) == golden
    # one flush requested, when the first frame made the buffer dirty
    assert [name for name, _ in owner.calls] == ["request"]
    # the golden bytes themselves: [size][type 2][ts][attempts][id][body]
    first = MSGS[0]
    assert golden[:18] == struct.pack(">iiqH", 230, 2, first.timestamp, 1)


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_write_many_writes_the_frames_of_write_and_asks_one_flush(impl: str) -> None:
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    sink_cls(owner, 1 << 20).write_many(MSGS)
    golden = b"".join(encode_message(m.timestamp, m.attempts & 0xFFFF, m.id, m.body) for m in MSGS)
    assert bytes(owner._out) == golden
    assert owner.calls == [("request", golden)]  # once, at the end of the run


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_write_many_flushes_mid_run_at_flush_at(impl: str) -> None:
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    frames_ = [encode_message(m.timestamp, m.attempts & 0xFFFF, m.id, m.body) for m in MSGS]
    sink_cls(owner, len(frames_[0])).write_many(MSGS)  # the first frame alone reaches it
    assert owner.calls[0] == ("flush", frames_[0])
    assert b"".join(data for _, data in owner.calls if _ == "flush") + bytes(owner._out) == (
        b"".join(frames_)
    )


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_write_many_leaves_no_part_of_a_frame_when_a_message_is_bad(impl: str) -> None:
    """The compiled sink grows the buffer for the whole run up front: a bad message must not
    leave that room (zeros) behind, only the frames written before it."""
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    bad = _Msg(9, 1, b"b" * 50)
    bad.timestamp = "not a number"  # type: ignore[assignment]
    with pytest.raises((TypeError, struct.error)):  # the twins word it differently
        sink_cls(owner, 1 << 20).write_many([MSGS[0], bad, MSGS[1]])
    m = MSGS[0]
    assert bytes(owner._out) == encode_message(m.timestamp, m.attempts, m.id, m.body)


@pytest.mark.parametrize("impl", ["python", "compiled"])
@pytest.mark.parametrize("before", [0, 10, 600])
def test_write_many_appends_to_what_the_buffer_holds(impl: str, before: int) -> None:
    """A run may start on a buffer that already holds a response, or more than flush_at."""
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    owner._out += b"r" * before
    sink_cls(owner, 512).write_many(MSGS)
    frames_ = b"".join(encode_message(m.timestamp, m.attempts & 0xFFFF, m.id, m.body) for m in MSGS)
    flushed = b"".join(data for name, data in owner.calls if name == "flush")
    assert flushed + bytes(owner._out) == b"r" * before + frames_
    assert all(len(data) >= 512 for name, data in owner.calls if name == "flush")


class _SlotMsg:
    """Like nsqd's Message: the compiled sink reads these slots without attribute lookups."""

    __slots__ = ("attempts", "body", "id", "timestamp")

    def __init__(self, n: int, attempts: int, body: bytes) -> None:
        self.id = b"%016x" % n
        self.body = body
        self.timestamp = 1_700_000_000_123_456_789 + n
        self.attempts = attempts


class _SubSlotMsg(_SlotMsg):
    __slots__ = ("origin",)


class _PropertyMsg(_SlotMsg):
    """A subclass whose body is computed: it must be read through the property."""

    __slots__ = ()

    @property
    def body(self) -> bytes:  # type: ignore[override]
        return b"computed"


def _mixed_run() -> list[Any]:
    msgs: list[Any] = []
    for n, cls in enumerate([_SlotMsg, _SlotMsg, _SubSlotMsg, _Msg, _SlotMsg, _PropertyMsg]):
        if cls is _PropertyMsg:
            msg: Any = _SlotMsg.__new__(_PropertyMsg)
            msg.id, msg.timestamp, msg.attempts = b"%016x" % n, 5 + n, n
        else:
            msg = cls(n, n + 1, b"m" * (n * 40))
        msgs.append(msg)
    return msgs


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_write_many_reads_slots_subclasses_and_properties_as_python_does(impl: str) -> None:
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    msgs = _mixed_run()
    sink_cls(owner, 1 << 20).write_many(msgs)
    golden = b"".join(
        encode_message(m.timestamp, m.attempts, m.id, m.body) for m in msgs
    )
    assert bytes(owner._out) == golden
    assert b"computed" in golden


@pytest.mark.parametrize("impl", ["python", "compiled"])
def test_write_many_raises_attribute_error_for_an_empty_slot(impl: str) -> None:
    sink_cls = PyMessageSink if impl == "python" else compiled(WIRE).MessageSink
    owner = _Owner()
    empty = _SlotMsg.__new__(_SlotMsg)
    empty.id, empty.timestamp, empty.attempts = b"%016x" % 1, 1, 1  # no body
    with pytest.raises(AttributeError):
        sink_cls(owner, 1 << 20).write_many([_SlotMsg(0, 1, b"x"), empty])
    m = _SlotMsg(0, 1, b"x")
    assert bytes(owner._out) == encode_message(m.timestamp, m.attempts, m.id, m.body)


@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(max_size=300)), max_size=30))
def test_message_sink_twins_write_many_alike(spec: list[tuple[int, bytes]]) -> None:
    c = compiled(WIRE)
    msgs = [_Msg(n, a, b) for n, (a, b) in enumerate(spec)]
    results = []
    for sink_cls in (PyMessageSink, c.MessageSink):
        owner = _Owner()
        sink_cls(owner, 512).write_many(msgs)  # small: flushes happen mid-way
        results.append((owner.calls, bytes(owner._out)))
        owner = _Owner()
        sink_cls(owner, 512).write_many([_SlotMsg(n, a, b) for n, (a, b) in enumerate(spec)])
        results.append((owner.calls, bytes(owner._out)))
    assert results[0] == results[1] == results[2] == results[3]


@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(max_size=300)), max_size=30))
def test_message_sink_twins_write_and_flush_alike(spec: list[tuple[int, bytes]]) -> None:
    c = compiled(WIRE)
    msgs = [_Msg(n, a, b) for n, (a, b) in enumerate(spec)]
    results = []
    for sink_cls in (PyMessageSink, c.MessageSink):
        owner = _Owner()
        sink = sink_cls(owner, 512)  # small: flushes happen mid-way
        for m in msgs:
            sink.write(m)
        results.append((owner.calls, bytes(owner._out)))
    assert results[0] == results[1]


def test_the_selected_twins_are_the_compiled_ones_unless_pure_python() -> None:
    c = in_use(WIRE)
    if c is None:
        assert command_reader.parse_mpub is command_reader.py_parse_mpub
        assert frames.MessageSink is PyMessageSink
        return
    assert command_reader.parse_mpub is c.parse_mpub
    assert command_reader.fin_run is c.fin_run
    assert frames.MessageSink is c.MessageSink

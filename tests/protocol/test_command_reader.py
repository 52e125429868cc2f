"""CommandReader: golden V2 bytes written from the protocol spec, fed three ways."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqpy.protocol.command_reader import Command, CommandReader, parse_mpub
from nsqpy.protocol.errors import ClientError, SilentClose

MAX_MSG = 1024 * 1024
MAX_BODY = 5 * 1024 * 1024


def reader(check: Callable[[bytes, list[bytes]], None] | None = None) -> CommandReader:
    if check is None:
        return CommandReader(MAX_MSG, MAX_BODY)
    return CommandReader(MAX_MSG, MAX_BODY, check)


def drain(r: CommandReader) -> list[Command]:
    out = []
    while (cmd := r.next()) is not None:
        out.append(cmd)
    return out


def feed_whole(data: bytes) -> list[Command]:
    r = reader()
    r.feed(data)
    return drain(r)


def feed_byte_by_byte(data: bytes) -> list[Command]:
    r = reader()
    out: list[Command] = []
    for i in range(len(data)):
        r.feed(data[i : i + 1])
        out.extend(drain(r))
    return out


def feed_with_trailing(data: bytes) -> list[Command]:
    """The commands, followed by half of another one that must stay buffered."""
    r = reader()
    r.feed(data + b"PUB t\n\x00\x00")
    out = drain(r)
    assert r.buffered == 2
    return out


FEEDERS = [feed_whole, feed_byte_by_byte, feed_with_trailing]

GOLDEN = [
    (b"NOP\n", [(b"NOP", [b"NOP"], None)]),
    (b"RDY 100\n", [(b"RDY", [b"RDY", b"100"], None)]),
    (b"RDY 1\r\n", [(b"RDY", [b"RDY", b"1"], None)]),
    (b"FIN 0a1b2c3d4e5f6071\n", [(b"FIN", [b"FIN", b"0a1b2c3d4e5f6071"], None)]),
    (b"REQ 0a1b2c3d4e5f6071 500\n", [(b"REQ", [b"REQ", b"0a1b2c3d4e5f6071", b"500"], None)]),
    (b"SUB a  b\n", [(b"SUB", [b"SUB", b"a", b"", b"b"], None)]),
    (b"PUB topic\n\x00\x00\x00\x05hello", [(b"PUB", [b"PUB", b"topic"], b"hello")]),
    (b"DPUB t 1000\n\x00\x00\x00\x01x", [(b"DPUB", [b"DPUB", b"t", b"1000"], b"x")]),
    (
        b"IDENTIFY\n\x00\x00\x00\x02{}NOP\n",
        [(b"IDENTIFY", [b"IDENTIFY"], b"{}"), (b"NOP", [b"NOP"], None)],
    ),
    (
        b"MPUB t\n\x00\x00\x00\x0e\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x01b",
        [(b"MPUB", [b"MPUB", b"t"], b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x01b")],
    ),
    (b"\n", [(b"", [b""], None)]),
    (b"PUB t\n\x00\x00\x00\x01\n", [(b"PUB", [b"PUB", b"t"], b"\n")]),
]


@pytest.mark.parametrize("feed", FEEDERS)
@pytest.mark.parametrize(("data", "expected"), GOLDEN)
def test_golden(
    feed: Callable[[bytes], list[Command]], data: bytes, expected: list[Command]
) -> None:
    assert feed(data) == expected


@pytest.mark.parametrize(
    ("data", "code", "desc"),
    [
        (b"PUB t\n\x00\x00\x00\x00", "E_BAD_MESSAGE", "PUB invalid message body size 0"),
        (b"PUB t\n\xff\xff\xff\xff", "E_BAD_MESSAGE", "PUB invalid message body size -1"),
        (b"PUB t\n\x00\x10\x00\x01", "E_BAD_MESSAGE", "PUB message too big 1048577 > 1048576"),
        (b"DPUB t 1\n\x00\x10\x00\x01", "E_BAD_MESSAGE", "DPUB message too big 1048577 > 1048576"),
        (b"MPUB t\n\x00\x00\x00\x00", "E_BAD_BODY", "MPUB invalid body size 0"),
        (b"MPUB t\n\x00\x50\x00\x01", "E_BAD_BODY", "MPUB body too big 5242881 > 5242880"),
        (b"IDENTIFY\n\x00\x50\x00\x01", "E_BAD_BODY", "IDENTIFY body too big 5242881 > 5242880"),
        (b"IDENTIFY\n\x00\x00\x00\x00", "E_BAD_BODY", "IDENTIFY invalid body size 0"),
        (b"AUTH\n\xff\xff\xff\xfe", "E_BAD_BODY", "AUTH invalid body size -2"),
    ],
)
def test_body_size_errors_are_fatal_and_exact(data: bytes, code: str, desc: str) -> None:
    r = reader()
    r.feed(data)
    with pytest.raises(ClientError) as info:
        r.next()
    assert (info.value.code, info.value.desc, info.value.fatal) == (code, desc, True)
    assert info.value.wire == f"{code} {desc}".encode()


def test_huge_declared_size_is_refused_before_any_body_is_buffered() -> None:
    r = reader()
    r.feed(b"PUB t\n\x7f\xff\xff\xff")
    with pytest.raises(ClientError):
        r.next()


def test_line_check_runs_before_the_body_is_read() -> None:
    seen = []

    def check(name: bytes, params: list[bytes]) -> None:
        seen.append(params)
        raise ClientError("E_INVALID", "PUB insufficient number of parameters")

    r = reader(check)
    r.feed(b"PUB\n")  # no size, no body: the error must come now
    with pytest.raises(ClientError):
        r.next()
    assert seen == [[b"PUB"]]


def test_line_check_is_not_called_for_commands_without_body() -> None:
    def check(name: bytes, params: list[bytes]) -> None:
        raise AssertionError("called")

    r = reader(check)
    r.feed(b"NOP\nRDY 1\n")
    assert len(drain(r)) == 2


def test_line_longer_than_16k_closes_silently() -> None:
    r = reader()
    r.feed(b"X" * (16 * 1024))
    with pytest.raises(SilentClose):
        r.next()


def test_long_line_just_under_the_limit_is_parsed() -> None:
    line = b"SUB " + b"a" * (16 * 1024 - 6) + b"\n"
    assert len(line) == 16 * 1024 - 1
    assert feed_whole(line)[0][0] == b"SUB"


def test_large_body_in_chunks_is_assembled_once() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    data = b"PUB t\n" + struct.pack(">i", len(body)) + body
    r = reader()
    for i in range(0, len(data), 65536):
        r.feed(data[i : i + 65536])
    assert drain(r) == [(b"PUB", [b"PUB", b"t"], body)]


def mpub_payload(bodies: list[bytes]) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


def test_parse_mpub_golden() -> None:
    payload = b"\x00\x00\x00\x02\x00\x00\x00\x03abc\x00\x00\x00\x01d"
    assert parse_mpub(payload, MAX_MSG, MAX_BODY) == [b"abc", b"d"]


@pytest.mark.parametrize(
    ("payload", "code", "desc"),
    [
        (b"\x00\x00", "E_BAD_BODY", "MPUB failed to read message count"),
        (b"\x00\x00\x00\x00", "E_BAD_BODY", "MPUB invalid message count 0"),
        (b"\xff\xff\xff\xff", "E_BAD_BODY", "MPUB invalid message count -1"),
        (b"\x00\x10\x00\x00", "E_BAD_BODY", "MPUB invalid message count 1048576"),
        (b"\x00\x00\x00\x01\x00", "E_BAD_MESSAGE", "MPUB failed to read message(0) body size"),
        (
            b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x00",
            "E_BAD_MESSAGE",
            "MPUB invalid message(1) body size 0",
        ),
        (
            b"\x00\x00\x00\x01\x00\x10\x00\x01",
            "E_BAD_MESSAGE",
            "MPUB message too big 1048577 > 1048576",
        ),
        (
            b"\x00\x00\x00\x01\x00\x00\x00\x05ab",
            "E_BAD_MESSAGE",
            "MPUB failed to read message body",
        ),
    ],
)
def test_parse_mpub_errors(payload: bytes, code: str, desc: str) -> None:
    with pytest.raises(ClientError) as info:
        parse_mpub(payload, MAX_MSG, MAX_BODY)
    assert (info.value.code, info.value.desc) == (code, desc)


def test_mpub_count_limit_is_derived_from_max_body_size() -> None:
    limit = (MAX_BODY - 4) // 5
    assert limit == 1048575
    with pytest.raises(ClientError, match="invalid message count 1048576"):
        parse_mpub(struct.pack(">i", limit + 1), MAX_MSG, MAX_BODY)


_bodies = st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=20)


@given(_bodies)
def test_mpub_round_trip(bodies: list[bytes]) -> None:
    assert parse_mpub(mpub_payload(bodies), MAX_MSG, MAX_BODY) == bodies


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(min_value=1, max_value=17))
def test_arbitrary_bytes_never_crash_the_reader(data: bytes, chunk: int) -> None:
    """Garbage produces commands, NSQ errors or a silent close, never anything else."""
    r = CommandReader(64, 256)
    try:
        for i in range(0, len(data), chunk):
            r.feed(data[i : i + chunk])
            for name, params, body in iter(r.next, None):
                assert params[0] == name
                assert body is None or len(body) <= 256
    except (ClientError, SilentClose):
        pass


@given(st.lists(st.sampled_from([b"NOP\n", b"RDY 5\n", b"PUB t\n\x00\x00\x00\x02hi"]), max_size=30))
def test_any_split_gives_the_same_commands(parts: list[bytes]) -> None:
    data = b"".join(parts)
    assert feed_whole(data) == feed_byte_by_byte(data)
    assert len(feed_whole(data)) == len(parts)


ID_A, ID_B = b"0123456789abcdef", b"fedcba9876543210"


def test_take_fins_takes_a_run_of_plain_fins() -> None:
    r = reader()
    r.feed(b"FIN " + ID_A + b"\nFIN " + ID_B + b"\nNOP\nFIN " + ID_A + b"\n")
    assert r.take_fins() == [ID_A, ID_B]
    assert r.next() == (b"NOP", [b"NOP"], None)
    assert r.take_fins() == [ID_A]
    assert r.next() is None


@pytest.mark.parametrize(
    "data",
    [
        b"FIN abc\nFIN 0123456789abcdef\n",  # short id: next() must report it
        b"FIN 0123456789abcde \n",  # a space inside the 16 bytes
        b"FIN " + ID_A + b"\r\n",
        b"FIN " + ID_A,  # incomplete
        b"FIN  " + ID_A + b"\n",
        b"FIN 0123456789abcde\r\n",  # nsqd strips the \r and rejects a 15-byte id
    ],
)
def test_take_fins_leaves_anything_unusual_to_next(data: bytes) -> None:
    r = reader()
    r.feed(data)
    assert r.take_fins() == []
    expected = reader()
    expected.feed(data)
    assert r.next() == expected.next()


@given(st.lists(st.sampled_from([b"FIN " + ID_A + b"\n", b"FIN x\n", b"NOP\n", b"RDY 1\n"])))
def test_take_fins_then_next_sees_every_command_once(parts: list[bytes]) -> None:
    data = b"".join(parts)
    r = reader()
    r.feed(data)
    seen: list[bytes] = []
    while True:
        seen.extend(b"FIN " + i for i in r.take_fins())
        cmd = r.next()
        if cmd is None:
            break
        seen.append(b" ".join(cmd[1]))
    assert seen == [p.rstrip(b"\n") for p in parts]

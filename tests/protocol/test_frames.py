"""Frames and message encoding against bytes written by hand from the spec (§2.3, §2.4)."""

from __future__ import annotations

import pytest

from nsqpy.protocol.frames import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    FrameDecoder,
    decode_message,
    encode_error,
    encode_message,
)


def test_ok_frame_golden() -> None:
    assert OK_FRAME == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


def test_heartbeat_and_close_wait_golden() -> None:
    assert HEARTBEAT_FRAME == b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_"
    assert CLOSE_WAIT_FRAME == b"\x00\x00\x00\x0e\x00\x00\x00\x00CLOSE_WAIT"


def test_error_frame_golden() -> None:
    assert encode_error(b"E_BAD_PROTOCOL") == b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"


def test_message_frame_golden() -> None:
    frame = encode_message(1, 2, b"0123456789abcdef", b"hi")
    assert frame == (
        b"\x00\x00\x00\x20"  # size: 4 (type) + 8 + 2 + 16 + 2
        b"\x00\x00\x00\x02"  # frame type: message
        b"\x00\x00\x00\x00\x00\x00\x00\x01"  # timestamp
        b"\x00\x02"  # attempts
        b"0123456789abcdef"
        b"hi"
    )


def test_decode_message_golden() -> None:
    data = b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x01" + b"f" * 16 + b"body"
    msg = decode_message(data)
    assert (msg.timestamp, msg.attempts, msg.id, msg.body) == (7, 1, b"f" * 16, b"body")


def test_decode_message_too_short() -> None:
    with pytest.raises(ValueError, match="invalid message buffer size"):
        decode_message(b"\x00" * 25)


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_frame_decoder_any_split(chunk: int) -> None:
    stream = OK_FRAME + HEARTBEAT_FRAME + encode_message(5, 1, b"a" * 16, b"x") + b"\x00\x00"
    dec = FrameDecoder()
    frames = []
    for i in range(0, len(stream), chunk):
        dec.feed(stream[i : i + chunk])
        frames.extend(dec.frames())
    assert [f.frame_type for f in frames] == [0, 0, 2]
    assert frames[0].data == b"OK"
    assert decode_message(frames[2].data).body == b"x"

"""Client command encoders against byte strings written from the V2 protocol spec."""

from __future__ import annotations

import json

from nsqpy.protocol import commands
from nsqpy.protocol.command_reader import CommandReader


def test_line_commands() -> None:
    assert commands.sub("t", "c#ephemeral") == b"SUB t c#ephemeral\n"
    assert commands.rdy(2500) == b"RDY 2500\n"
    assert commands.fin(b"0123456789abcdef") == b"FIN 0123456789abcdef\n"
    assert commands.req(b"0123456789abcdef", 1500) == b"REQ 0123456789abcdef 1500\n"
    assert commands.touch(b"0123456789abcdef") == b"TOUCH 0123456789abcdef\n"
    assert commands.NOP == b"NOP\n"
    assert commands.CLS == b"CLS\n"


def test_body_commands() -> None:
    assert commands.pub("t", b"hello") == b"PUB t\n\x00\x00\x00\x05hello"
    assert commands.dpub("t", 250, b"hi") == b"DPUB t 250\n\x00\x00\x00\x02hi"
    assert commands.auth("s3cret") == b"AUTH\n\x00\x00\x00\x06s3cret"
    assert commands.mpub("t", [b"ab", b""]) == (
        b"MPUB t\n\x00\x00\x00\x0e" b"\x00\x00\x00\x02" b"\x00\x00\x00\x02ab" b"\x00\x00\x00\x00"
    )


def test_identify_is_compact_json_with_size() -> None:
    data = commands.identify({"client_id": "x", "feature_negotiation": True})
    body = b'{"client_id":"x","feature_negotiation":true}'
    assert data == b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body
    assert json.loads(body) == {"client_id": "x", "feature_negotiation": True}


def test_our_server_reader_parses_every_command() -> None:
    reader = CommandReader(max_msg_size=1024, max_body_size=4096)
    wire = b"".join([
        commands.sub("t", "c"),
        commands.pub("t", b"x"),
        commands.mpub("t", [b"a", b"b"]),
        commands.dpub("t", 5, b"d"),
        commands.rdy(1),
        commands.NOP,
    ])
    reader.feed(wire)
    names = []
    while (cmd := reader.next()) is not None:
        names.append(cmd[0])
    assert names == [b"SUB", b"PUB", b"MPUB", b"DPUB", b"RDY", b"NOP"]

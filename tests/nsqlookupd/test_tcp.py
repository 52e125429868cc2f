"""nsqlookupd's TCP protocol V1 over real sockets: golden response bytes, every error text
(each fatal: sent, then the connection closes), registration and disconnect effects."""

from __future__ import annotations

import json
import socket
import struct

import pytest
from conftest import wait_for

from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.registry import Registration
from nsqpy.nsqlookupd.tcp import decode_peer_info
from nsqpy.protocol.errors import ClientError

from .conftest import START_NS, FakeClock, V1Connect, peer_info


def identify_line(body: bytes) -> bytes:
    return b"IDENTIFY\n" + struct.pack(">i", len(body)) + body


async def test_bad_magic_gets_unframed_error_then_close(connect: V1Connect) -> None:
    client = await connect(magic=b"  V2")
    assert await client.read_raw(18) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"
    await client.assert_closed()


async def test_magic_may_arrive_in_pieces(connect: V1Connect) -> None:
    client = await connect(magic=b" ")
    client.send(b" V")
    client.send(b"1PI")
    assert await client.command(b"NG\n") == b"OK"


async def test_identify_golden_reply(lookupd: NSQLookupd, connect: V1Connect) -> None:
    client = await connect()
    body = json.dumps(peer_info()).encode()
    client.send(identify_line(body))
    expected = (
        b'{"broadcast_address":"lookupd.test","hostname":"%s","http_port":%d,"tcp_port":%d,'
        b'"version":"1.3.0"}' % (socket.gethostname().encode(), lookupd.http_port, lookupd.tcp_port)
    )
    assert await client.read_raw(4) == struct.pack(">i", len(expected))
    assert await client.read_raw(len(expected)) == expected
    (producer,) = lookupd.registry.find_producers("client", "", "")
    peer = producer.peer
    assert peer.id == peer.remote_address == client.address
    assert (peer.broadcast_address, peer.hostname, peer.tcp_port, peer.http_port) == (
        "nsqd.test",
        "nsqd-host",
        4150,
        4151,
    )
    assert peer.version == "1.3.0"
    assert peer.last_update == START_NS


async def test_ping_register_unregister_golden_ok(lookupd: NSQLookupd, connect: V1Connect) -> None:
    client = await connect()
    client.send(b"PING\n")  # allowed before IDENTIFY
    assert await client.read_raw(6) == b"\x00\x00\x00\x02OK"
    await client.identify()
    assert await client.command(b"REGISTER t c\n") == b"OK"
    assert await client.command(b"  REGISTER t2 \r\n") == b"OK"  # lines are trimmed
    db = lookupd.registry
    assert db.topics() == ["t", "t2"]
    assert db.channels("t") == ["c"]
    assert await client.command(b"UNREGISTER t c\n") == b"OK"
    assert db.find_producers("channel", "t", "c") == []
    assert await client.command(b"UNREGISTER t2\n") == b"OK"
    assert db.find_producers("topic", "t2", "") == []
    assert await client.command(b"PING\n") == b"OK"


async def test_pipelined_commands_answered_in_order(
    lookupd: NSQLookupd, connect: V1Connect
) -> None:
    client = await connect()
    body = json.dumps(peer_info()).encode()
    client.send(identify_line(body) + b"REGISTER a\nREGISTER b x\nPING\nUNREGISTER a\n")
    assert json.loads(await client.read())["version"] == "1.3.0"
    assert [await client.read() for _ in range(4)] == [b"OK"] * 4
    assert lookupd.registry.find_producers("topic", "a", "") == []
    assert len(lookupd.registry.find_producers("channel", "b", "x")) == 1


async def test_ping_refreshes_last_update(
    lookupd: NSQLookupd, connect: V1Connect, clock: FakeClock
) -> None:
    client = await connect()
    await client.identify()
    clock.advance(10)
    await client.command(b"PING\n")
    (producer,) = lookupd.registry.find_producers("client", "", "")
    assert producer.peer.last_update == clock.now


ERRORS_BEFORE_IDENTIFY = [
    (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (b"UNREGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (b"FOO bar\n", b"E_INVALID invalid command FOO"),
    (b"\n", b"E_INVALID invalid command "),
    (b"ping\n", b"E_INVALID invalid command ping"),
]

ERRORS_AFTER_IDENTIFY = [
    (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
    (b"REGISTER bad!topic\n", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
    (b"UNREGISTER bad!topic c\n", b"E_BAD_TOPIC UNREGISTER topic name 'bad!topic' is not valid"),
    (b"REGISTER t bad!chan\n", b"E_BAD_CHANNEL REGISTER channel name 'bad!chan' is not valid"),
    (
        b"UNREGISTER t bad!chan\n",
        b"E_BAD_CHANNEL UNREGISTER channel name 'bad!chan' is not valid",
    ),
    (
        b"REGISTER " + b"x" * 65 + b"\n",
        b"E_BAD_TOPIC REGISTER topic name '" + b"x" * 65 + b"' is not valid",
    ),
    (b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY again"),  # answered without waiting for a body
    (b"BOGUS\n", b"E_INVALID invalid command BOGUS"),
]


@pytest.mark.parametrize(("line", "error"), ERRORS_BEFORE_IDENTIFY)
async def test_errors_before_identify(connect: V1Connect, line: bytes, error: bytes) -> None:
    client = await connect()
    client.send(line + b"PING\n")  # never answered: the error closes the connection
    assert await client.read_raw(4 + len(error)) == struct.pack(">i", len(error)) + error
    await client.assert_closed()


@pytest.mark.parametrize(("line", "error"), ERRORS_AFTER_IDENTIFY)
async def test_errors_after_identify(connect: V1Connect, line: bytes, error: bytes) -> None:
    client = await connect()
    await client.identify()
    client.send(line + b"PING\n")
    assert await client.read() == error
    await client.assert_closed()


IDENTIFY_BODY_ERRORS = [
    (struct.pack(">i", 0), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (struct.pack(">i", -1), b"E_BAD_BODY IDENTIFY failed to read body"),
    (struct.pack(">i", 6 * 1024 * 1024), b"E_BAD_BODY IDENTIFY failed to read body"),
    (identify_line(b"{nope")[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b"[1]")[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b'{"tcp_port":"4150"}')[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b'{"tcp_port":4150.5}')[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b'{"version":1}')[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b'{"tcp_port":NaN}')[9:], b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (identify_line(b"null")[9:], b"E_BAD_BODY IDENTIFY missing fields"),
    (identify_line(b"{}")[9:], b"E_BAD_BODY IDENTIFY missing fields"),
]


@pytest.mark.parametrize(("body", "error"), IDENTIFY_BODY_ERRORS)
async def test_identify_body_errors(
    lookupd: NSQLookupd, connect: V1Connect, body: bytes, error: bytes
) -> None:
    client = await connect()
    client.send(b"IDENTIFY\n" + body)
    assert await client.read() == error
    await client.assert_closed()
    assert lookupd.registry.find_producers("client", "", "") == []


@pytest.mark.parametrize("missing", ["broadcast_address", "tcp_port", "http_port", "version"])
async def test_identify_required_fields(connect: V1Connect, missing: str) -> None:
    client = await connect()
    info = peer_info()
    info[missing] = 0 if missing.endswith("port") else ""
    body = json.dumps(info).encode()
    client.send(identify_line(body))
    assert await client.read() == b"E_BAD_BODY IDENTIFY missing fields"
    await client.assert_closed()


def test_identify_json_follows_go_unmarshal() -> None:
    info = decode_peer_info(
        b'{"Broadcast_Address":"b","TCP_PORT":1,"http_port":2,"version":"v",'
        b'"hostname":null,"extra":[1],"remote_address":"spoofed"}',
        "1.2.3.4:5",
    )
    assert (info.broadcast_address, info.tcp_port, info.http_port, info.version) == ("b", 1, 2, "v")
    assert info.hostname == ""
    assert info.id == "1.2.3.4:5"
    with pytest.raises(ClientError):
        decode_peer_info(b'{"tcp_port":true}', "x")
    with pytest.raises(ClientError):
        decode_peer_info(b'{"tcp_port":99999999999999999999}', "x")


async def test_disconnect_removes_producer_keeps_keys(
    lookupd: NSQLookupd, connect: V1Connect
) -> None:
    first, second = await connect(), await connect()
    for client, name in ((first, "one"), (second, "two")):
        await client.identify(broadcast_address=name)
        await client.command(b"REGISTER t c\n")
        await client.command(b"REGISTER t#ephemeral\n")
    db = lookupd.registry
    await first.close()
    await wait_for(lambda: len(db.find_producers("client", "", "")) == 1)
    assert db.lookup_registrations(first.address) == []
    assert [p.peer.broadcast_address for p in db.find_producers("topic", "t", "")] == ["two"]
    await second.close()
    await wait_for(lambda: db.find_producers("client", "", "") == [])
    assert db.topics() == ["t", "t#ephemeral"]
    assert db.channels("t") == ["c"]
    assert Registration("client", "", "") in dict(db.items())


async def test_error_closes_and_unregisters(lookupd: NSQLookupd, connect: V1Connect) -> None:
    client = await connect()
    await client.identify()
    await client.command(b"REGISTER t\n")
    client.send(b"REGISTER *\n")
    assert await client.read() == b"E_BAD_TOPIC REGISTER topic name '*' is not valid"
    await client.assert_closed()
    await wait_for(lambda: lookupd.registry.find_producers("topic", "t", "") == [])


async def test_stop_closes_connections(lookupd: NSQLookupd, connect: V1Connect) -> None:
    client = await connect()
    await client.identify()
    await lookupd.stop()
    await client.assert_closed()
    assert lookupd.registry.find_producers("client", "", "") == []
    assert not lookupd.connections

"""Leases (nsqpy extension) over V2 on a real nsqd: IDENTIFY's "leases", LEASE, LEASE_FIN/REQ."""

from __future__ import annotations

import json
import struct

import aiohttp
from conftest import NsqdFactory
from test_dead_letter_api import http
from test_lease_api import bodies, setup, take
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.protocol.frames import Frame, Message, decode_message

#: nsqd v1.3.0's IDENTIFY reply with nsqd's defaults (feature_negotiation, nothing else asked).
NSQD_REPLY = (
    b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,'
    b'"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,'
    b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
    b'"output_buffer_size":16384,"output_buffer_timeout":250'
)


def response_frame(data: bytes) -> bytes:
    return struct.pack(">ii", len(data) + 4, 0) + data


async def raw_identify(port: int, fields: dict[str, object]) -> bytes:
    """The exact bytes nsqd sends back for IDENTIFY ``fields``."""
    conn = await RawV2.connect(port)
    body = json.dumps(fields).encode()
    conn.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    frame = await conn.frame()
    await conn.close()
    return struct.pack(">ii", len(frame.data) + 4, frame.frame_type) + frame.data


async def leasing(port: int) -> RawV2:
    conn = await RawV2.connect(port)
    reply = json.loads(await conn.identify(feature_negotiation=True, leases=True))
    assert reply["leases"] is True
    return conn


async def read_lease(conn: RawV2) -> tuple[list[Message], bytes]:
    """The message frames of one LEASE answer and its closing LEASED response."""
    messages: list[Message] = []
    while True:
        frame: Frame = await conn.frame()
        if frame.frame_type == 2:
            messages.append(decode_message(frame.data))
            continue
        assert frame.frame_type == 0, frame
        if frame.data == b"_heartbeat_":
            continue
        return messages, frame.data


async def test_identify_reply_golden_bytes_with_and_without_leases(nsqd: NSQD) -> None:
    port = nsqd.tcp_port
    plain = response_frame(NSQD_REPLY + b"}")
    assert await raw_identify(port, {"feature_negotiation": True}) == plain
    assert await raw_identify(port, {"feature_negotiation": True, "leases": False}) == plain
    # not a JSON bool: ignored, as nsqd ignores the key
    assert await raw_identify(port, {"feature_negotiation": True, "leases": "yes"}) == plain
    asked = response_frame(NSQD_REPLY + b',"leases":true}')
    assert await raw_identify(port, {"feature_negotiation": True, "leases": True}) == asked
    # without feature_negotiation nsqd answers OK, and leases stay off
    assert await raw_identify(port, {"leases": True}) == response_frame(b"OK")


async def test_unnegotiated_client_gets_nsqds_invalid_command(nsqd: NSQD) -> None:
    for fields in ({"feature_negotiation": True}, {"leases": True}):
        conn = await RawV2.connect(nsqd.tcp_port)
        await conn.identify(**fields)
        conn.cmd("LEASE t c b1 1 0 0")
        assert await conn.error() == b"E_INVALID invalid command LEASE"
        assert await conn.closed()
    conn = await RawV2.connect(nsqd.tcp_port)
    conn.cmd("LEASE_FIN t c b1")
    assert await conn.error() == b"E_INVALID invalid command LEASE_FIN"
    assert await conn.closed()


async def test_lease_over_tcp_replays_identical_over_http_and_tcp_then_fin_is_idempotent(
    nsqd: NSQD,
) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"one", b"two", b"three", b"four")
        first = await leasing(nsqd.tcp_port)
        first.cmd("LEASE t c b1 3 0 0")
        messages, done = await read_lease(first)
        assert done == b"LEASED b1 3 11"
        assert [m.body for m in messages] == [b"one", b"two", b"three"]
        assert [m.attempts for m in messages] == [1, 1, 1]

        # over HTTP: the same ids, bodies, timestamps and attempts
        doc = await take(api, "lease=b1")
        assert bodies(doc) == [m.body for m in messages]
        assert [d["id"].encode() for d in doc["messages"]] == [m.id for m in messages]
        assert [d["attempts"] for d in doc["messages"]] == [1, 1, 1]
        assert [d["timestamp"] for d in doc["messages"]] == [m.timestamp for m in messages]

        # over a second TCP connection, short form and full form: the same frames
        second = await leasing(nsqd.tcp_port)
        second.cmd("LEASE t c b1")
        assert await read_lease(second) == (messages, done)
        second.cmd("LEASE t c b1 3 0 0")
        assert await read_lease(second) == (messages, done)

        # FIN over TCP, then again over TCP and over HTTP: all fine, nothing else touched
        first.cmd("LEASE_FIN t c b1")
        assert await first.response() == b"OK"
        second.cmd("LEASE_FIN t c b1")
        assert await second.response() == b"OK"
        assert (await api.post("/channel/lease/fin?topic=t&channel=c&lease=b1")).status == 200
        second.cmd("LEASE t c b1")
        assert await second.error() == b"E_LEASE_FINISHED LEASE b1 failed LEASE_FINISHED"
        # the fourth message is still there for a new lease
        second.cmd("LEASE t c b2 10 0 0")
        rest, done = await read_lease(second)
        assert ([m.body for m in rest], done) == ([b"four"], b"LEASED b2 1 4")
        await first.close()
        await second.close()


async def test_lease_req_requeues_and_a_waiting_lease_is_answered_at_its_seal(
    nsqd: NSQD,
) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"a")
        conn = await leasing(nsqd.tcp_port)
        conn.cmd("LEASE t c r1 5 0 0")
        taken, done = await read_lease(conn)
        assert done == b"LEASED r1 1 1"
        conn.cmd("LEASE_REQ t c r1 0")
        assert await conn.response() == b"OK"
        conn.cmd("LEASE_REQ t c r1 0")
        assert await conn.response() == b"OK"
        conn.cmd("LEASE_FIN t c r1")
        assert await conn.error() == b"E_LEASE_REQUEUED LEASE_FIN r1 failed LEASE_REQUEUED"
        # a lease that waits: answered once full (a publish arrives while it waits)
        conn.cmd("LEASE t c r2 2 0 10000")
        conn.cmd("NOP")
        assert (await api.post("/pub?topic=t", b"b")).status == 200
        again, done = await read_lease(conn)
        assert done == b"LEASED r2 2 2"
        assert [(m.id, m.body, m.attempts) for m in again] == [
            (taken[0].id, b"a", 2),
            (again[1].id, b"b", 1),
        ]
        # a short wait on an empty channel ends sealed with nothing
        conn.cmd("LEASE t c r3 2 0 50")
        assert await read_lease(conn) == ([], b"LEASED r3 0 0")
        await conn.close()


async def test_errors_are_not_fatal_and_leased_ids_are_not_in_flight(
    nsqd_factory: NsqdFactory,
) -> None:
    nsqd = await nsqd_factory(max_rdy_count=10)
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"x")
        assert (await api.post("/channel/create?topic=t&channel=e%23ephemeral")).status == 200
        conn = await leasing(nsqd.tcp_port)
        cases = [
            ("LEASE t c b1 1 0", b"E_INVALID LEASE invalid number of parameters"),
            ("LEASE t c b1 0 0 0", b"E_INVALID LEASE count 0 out of range 1-10"),
            ("LEASE t c b1 x 0 0", b"E_INVALID LEASE could not parse count x"),
            ("LEASE t c b1 1 0 900001", b"E_INVALID LEASE wait 900001 out of range 0-900000"),
            ("LEASE t c b1 1 0 0 0", b"E_INVALID LEASE ttl 0 out of range 1-900000"),
            ("LEASE t c b/1 1 0 0", b'E_INVALID LEASE lease name "b/1" is not valid'),
            ("LEASE t! c b1 1 0 0", b'E_BAD_TOPIC LEASE topic name "t!" is not valid'),
            ("LEASE t c! b1 1 0 0", b'E_BAD_CHANNEL LEASE channel name "c!" is not valid'),
            ("LEASE u c b1 1 0 0", b"E_TOPIC_NOT_FOUND LEASE b1 failed TOPIC_NOT_FOUND"),
            ("LEASE t d b1 1 0 0", b"E_CHANNEL_NOT_FOUND LEASE b1 failed CHANNEL_NOT_FOUND"),
            (
                "LEASE t e#ephemeral b1 1 0 0",
                b"E_EPHEMERAL_CHANNEL LEASE b1 failed EPHEMERAL_CHANNEL",
            ),
            ("LEASE t c b1", b"E_LEASE_NOT_FOUND LEASE b1 failed LEASE_NOT_FOUND"),
            ("LEASE_FIN t c b1", b"E_LEASE_NOT_FOUND LEASE_FIN b1 failed LEASE_NOT_FOUND"),
            ("LEASE_REQ t c b1", b"E_INVALID LEASE_REQ invalid number of parameters"),
            ("LEASE_REQ t c b1 x", b"E_INVALID LEASE_REQ could not parse timeout x"),
        ]
        for line, expected in cases:
            conn.cmd(line)
            assert await conn.error() == expected, line
        conn.cmd("LEASE t c b1 1 0 0")
        messages, done = await read_lease(conn)
        assert done == b"LEASED b1 1 1"
        conn.cmd("LEASE t c b1 2 0 0")
        assert await conn.error() == b"E_LEASE_MISMATCH LEASE b1 failed LEASE_MISMATCH"
        conn.cmd("LEASE_FIN t c b2")
        assert await conn.error() == b"E_LEASE_NOT_FOUND LEASE_FIN b2 failed LEASE_NOT_FOUND"

        # a consumer on the channel cannot FIN a leased id: it is not in its in-flight
        consumer = await leasing(nsqd.tcp_port)
        await consumer.sub("t", "c")
        msg_id = messages[0].id.decode()
        consumer.cmd(f"FIN {msg_id}")
        assert (
            await consumer.error() == f"E_FIN_FAILED FIN {msg_id} failed ID not in flight".encode()
        )
        consumer.cmd(f"REQ {msg_id} 0")
        assert (
            await consumer.error() == f"E_REQ_FAILED REQ {msg_id} failed ID not in flight".encode()
        )
        # ... and the lease still holds it
        consumer.cmd("LEASE t c b1")
        assert await read_lease(consumer) == (messages, done)
        conn.cmd("LEASE_FIN t c b1")
        assert await conn.response() == b"OK"
        await consumer.close()
        await conn.close()

"""The client's lease commands (LeaseConnection) against a real nsqpy nsqd."""

from __future__ import annotations

import asyncio

import pytest

from nsqpy.client import Config, NsqdHTTPClient, Producer
from nsqpy.client.connection import ServerSettings
from nsqpy.client.errors import LeaseError
from nsqpy.client.leases import LeaseConnection, LeasedFrames
from nsqpy.nsqd.app import NSQD
from nsqpy.protocol.frames import encode_message, encode_response

#: Go nsqd v1.3.0's IDENTIFY reply: no "leases" key, whatever the client asked.
GO_REPLY = (
    b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,"msg_timeout":60000,'
    b'"tls_v1":false,"deflate":false,"deflate_level":6,"max_deflate_level":6,"snappy":false,'
    b'"sample_rate":0,"auth_required":false,"output_buffer_size":16384,'
    b'"output_buffer_timeout":250}'
)


async def channel_with(nsqd: NSQD, *bodies: bytes) -> str:
    address = f"127.0.0.1:{nsqd.tcp_port}"
    async with NsqdHTTPClient(f"127.0.0.1:{nsqd.http_port}") as http:
        await http.create_channel("t", "c")
    if bodies:
        async with Producer(address) as producer:
            await producer.multi_publish("t", list(bodies))
    return address


def test_server_settings_say_whether_leases_were_negotiated() -> None:
    assert ServerSettings.parse(GO_REPLY).leases is False
    assert ServerSettings.parse(GO_REPLY[:-1] + b',"leases":true}').leases is True
    assert ServerSettings.parse(GO_REPLY[:-1] + b',"leases":"yes"}').leases is False
    assert ServerSettings.parse(b"OK").leases is False


async def test_reserve_then_fetch_from_another_connection_then_finish(nsqd: NSQD) -> None:
    address = await channel_with(nsqd, b"one", b"two", b"three")
    planner = await LeaseConnection.open(address, Config())
    assert planner.leases_supported
    reserved = await planner.reserve("t", "c", "q.1", count=2, max_bytes=0, wait=0, ttl=60)
    assert (reserved.name, reserved.count, reserved.size) == ("q.1", 2, 6)
    assert await planner.reserved("t", "c", "q.1") == reserved

    executor = await LeaseConnection.open(address, Config())
    frames = await executor.fetch("t", "c", "q.1")
    got = frames.messages()
    assert [(m.body, m.attempts) for m in got] == [(b"one", 1), (b"two", 1)]
    assert (frames.count, len(frames.bodies)) == (2, 6) and all(len(m.id) == 16 for m in got)
    again = await planner.fetch("t", "c", "q.1")
    assert again.messages() == got  # any connection, the same messages
    columns = await planner.fetch_columns("t", "c", "q.1")  # the same, column by column
    assert (columns.count, bytes(columns.bodies), bytes(columns.ids)) == (
        2, b"onetwo", got[0].id + got[1].id)  # fmt: skip

    await executor.finish_lease("t", "c", "q.1")
    await executor.finish_lease("t", "c", "q.1")  # idempotent
    with pytest.raises(LeaseError) as info:
        await executor.fetch("t", "c", "q.1")
    assert info.value.code == "E_LEASE_FINISHED" and info.value.gone
    # a lease error leaves the connection usable
    rest = await executor.reserve("t", "c", "q.2", count=9, max_bytes=0, wait=0, ttl=60)
    assert rest.count == 1
    await executor.requeue_lease("t", "c", "q.2")
    assert nsqd.broker.topics["t"].channels["c"].depth == 1
    planner.close()
    executor.close()


async def test_pipelined_commands_keep_each_leases_frames_apart(nsqd: NSQD) -> None:
    address = await channel_with(nsqd, *(b"m%d" % i for i in range(10)))
    conn = await LeaseConnection.open(address, Config())
    sizes = await asyncio.gather(
        *(conn.reserve("t", "c", f"p{i}", count=3, max_bytes=0, wait=0, ttl=60) for i in range(4))
    )
    assert [r.count for r in sizes] == [3, 3, 3, 1]
    fetched = await asyncio.gather(*(conn.fetch("t", "c", f"p{i}") for i in range(4)))
    bodies = [[m.body for m in f.messages()] for f in fetched]
    assert bodies == [[b"m0", b"m1", b"m2"], [b"m3", b"m4", b"m5"], [b"m6", b"m7", b"m8"], [b"m9"]]
    conn.close()


async def test_a_waiting_reserve_has_the_connection_to_itself(nsqd: NSQD) -> None:
    address = await channel_with(nsqd, b"a")
    conn = await LeaseConnection.open(address, Config())
    await conn.reserve("t", "c", "done", count=1, max_bytes=0, wait=0, ttl=60)
    waiting = asyncio.ensure_future(
        conn.reserve("t", "c", "w", count=2, max_bytes=0, wait=5.0, ttl=60)
    )
    await asyncio.sleep(0)  # the reserve is sent first
    finishing = asyncio.ensure_future(conn.finish_lease("t", "c", "done"))
    async with Producer(address) as producer:
        await producer.multi_publish("t", [b"b", b"c"])
    assert (await waiting).count == 2
    await finishing  # its OK was not taken for the reserve's answer
    assert nsqd.broker.topics["t"].channels["c"].in_flight_count == 2
    conn.close()


async def test_an_empty_reserve_leaves_the_name_free(nsqd: NSQD) -> None:
    address = await channel_with(nsqd)
    conn = await LeaseConnection.open(address, Config())
    empty = await conn.reserve("t", "c", "next", count=5, max_bytes=0, wait=0.05, ttl=60)
    assert empty.count == 0
    with pytest.raises(LeaseError) as info:
        await conn.reserved("t", "c", "next")
    assert info.value.code == "E_LEASE_NOT_FOUND"
    conn.close()


async def test_frames_split_anywhere_are_put_together() -> None:
    """A lease's frames cut into pieces of every size, and a frame bigger than the piece."""
    sent = [(b"%016x" % i, b"b" * (i * 37 % 300), 1_700_000_000_000_000_000 + i, i % 4 + 1)
            for i in range(40)]  # fmt: skip
    wire = b"".join(encode_message(t, a, i, b) for i, b, t, a in sent)
    wire += encode_response(b"LEASED l 40 %d" % sum(len(b) for _, b, _, _ in sent))
    for piece in (1, 7, 26, 34, 1000, len(wire)):
        conn = LeaseConnection("127.0.0.1:1", Config())
        answer = conn._expect_frame()
        for at in range(0, len(wire), piece):
            conn.data_received(wire[at : at + piece])
        assert answer.result().startswith(b"LEASED l 40 ")
        heads, bodies, ends = conn._answers.popleft()
        got = LeasedFrames("l", bytes(heads), bytes(bodies), ends).messages()
        assert [(m.id, m.body, m.timestamp, m.attempts) for m in got] == sent, piece

"""nsqd over real sockets with a raw V2 client: commands, states, errors, delivery."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest
from conftest import NsqdFactory, wait_for
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.storage.diskqueue import DiskQueueError

# The adapter must work on both loops nsqd can run on (uvloop when installed, else asyncio).
pytestmark = pytest.mark.both_loops


async def connect(nsqd: NSQD) -> RawV2:
    return await RawV2.connect(nsqd.tcp_port)


async def fatal(conn: RawV2, expected: bytes) -> None:
    assert await conn.error() == expected
    assert await conn.closed()


async def test_bad_magic_gets_e_bad_protocol_and_close(nsqd: NSQD) -> None:
    conn = await RawV2.connect(nsqd.tcp_port, magic=b"  V1")
    await fatal(conn, b"E_BAD_PROTOCOL")


async def test_invalid_command_is_fatal(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    conn.send(b"WHAT is this\n")
    await fatal(conn, b"E_INVALID invalid command WHAT")


async def test_empty_line_is_an_invalid_command(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    conn.send(b"\n")
    await fatal(conn, b"E_INVALID invalid command ")


async def test_identify_plain_and_negotiated(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    assert await conn.identify(client_id="x") == b"OK"
    reply = json.loads(await conn.identify(feature_negotiation=True, msg_timeout=5000))
    assert reply["msg_timeout"] == 5000 and reply["version"] == "1.3.0"
    assert list(reply) == [
        "max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
        "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
        "output_buffer_size", "output_buffer_timeout",
    ]  # fmt: skip


async def test_pub_sub_fin_round_trip(nsqd: NSQD) -> None:
    pub, sub = await connect(nsqd), await connect(nsqd)
    await sub.sub("t", "c", rdy=1)
    await pub.pub("t", b"hello")
    msg = await sub.message()
    assert (msg.body, msg.attempts, len(msg.id)) == (b"hello", 1, 16)
    sub.cmd(f"FIN {msg.id.decode()}")
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.in_flight_count == 0)
    assert nsqd.clients[max(nsqd.clients)].state.finish_count == 1


async def test_a_publishers_reply_does_not_wait_for_the_iterations_flush(
    nsqd: NSQD, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that is not subscribed writes its replies once its read is run; a
    subscriber's messages still wait for the loop iteration's flush (one write for them all)."""
    pub, sub = await connect(nsqd), await connect(nsqd)
    await sub.sub("t", "c", rdy=1)
    flushes: list[None] = []
    monkeypatch.setattr(nsqd, "_flush_all", lambda: flushes.append(None))
    pub.cmd("PUB t", b"hello")
    assert await pub.response() == b"OK"  # with no iteration's flush left to write it
    assert flushes  # the delivery asked for one
    subscriber = next(c for c in nsqd.clients.values() if c.state.channel is not None)
    assert subscriber.flush_pending and subscriber._out  # the message waits in its output
    monkeypatch.undo()
    NSQD._flush_all(nsqd)
    assert (await sub.message()).body == b"hello"


async def test_mpub_and_ids_are_unique(nsqd: NSQD) -> None:
    pub, sub = await connect(nsqd), await connect(nsqd)
    await sub.sub("t", "c", rdy=100)
    bodies = [b"m%d" % i for i in range(50)]
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    pub.cmd("MPUB t", payload)
    assert await pub.response() == b"OK"
    got = [await sub.message() for _ in bodies]
    assert sorted(m.body for m in got) == sorted(bodies)
    assert len({m.id for m in got}) == 50


async def test_messages_published_before_any_channel_reach_the_first_one(nsqd: NSQD) -> None:
    pub = await connect(nsqd)
    for i in range(3):
        await pub.pub("early", b"%d" % i)
    sub = await connect(nsqd)
    await sub.sub("early", "c", rdy=10)
    assert sorted([(await sub.message()).body for _ in range(3)]) == [b"0", b"1", b"2"]


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (b"PUB\n", b"E_INVALID PUB insufficient number of parameters"),
        (b"PUB bad!topic\n", b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        (b"PUB t\n\x00\x00\x00\x00", b"E_BAD_MESSAGE PUB invalid message body size 0"),
        (b"MPUB\n", b"E_INVALID MPUB insufficient number of parameters"),
        (b"MPUB b@d\n", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "b@d" is not valid'),
        (b"MPUB t\n\x00\x00\x00\x04\x00\x00\x00\x00", b"E_BAD_BODY MPUB invalid message count 0"),
        (b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters"),
        (b"DPUB t x\n", b"E_INVALID DPUB could not parse timeout x"),
        (b"DPUB t -1\n", b"E_INVALID DPUB could not parse timeout -1"),
        (b"DPUB t 3600001\n", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
        (b"SUB t\n", b"E_INVALID SUB insufficient number of parameters"),
        (b"SUB t c!\n", b'E_BAD_CHANNEL SUB channel name "c!" is not valid'),
        (b"SUB t\xff c\n", b'E_BAD_TOPIC SUB topic name "t\\xff" is not valid'),
        (b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
        (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
        (b"REQ 0123456789abcdef 0\n", b"E_INVALID cannot REQ in current state"),
        (b"TOUCH 0123456789abcdef\n", b"E_INVALID cannot TOUCH in current state"),
        (b"CLS\n", b"E_INVALID cannot CLS in current state"),
        (b"AUTH x\n", b"E_INVALID AUTH invalid number of parameters"),
        (b"AUTH\n\x00\x00\x00\x01s", b"E_AUTH_DISABLED AUTH disabled"),
        (b"IDENTIFY\n\x00\x00\x00\x01{", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (
            b'IDENTIFY\n\x00\x00\x00\x1a{"heartbeat_interval": 10}',
            b"E_BAD_BODY IDENTIFY heartbeat interval (10) is invalid",
        ),
    ],
)
async def test_fatal_errors_in_init_state(nsqd: NSQD, commands: bytes, expected: bytes) -> None:
    conn = await connect(nsqd)
    conn.send(commands)
    await fatal(conn, expected)


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (b"SUB t c\n", b"E_INVALID cannot SUB in current state"),
        (b"IDENTIFY\n", b"E_INVALID cannot IDENTIFY in current state"),
        (b"AUTH\n", b"E_INVALID cannot AUTH in current state"),
        (b"RDY x\n", b"E_INVALID RDY could not parse count x"),
        (b"RDY 2501\n", b"E_INVALID RDY count 2501 out of range 0-2500"),
        (b"FIN\n", b"E_INVALID FIN insufficient number of params"),
        (b"FIN abc\n", b"E_INVALID invalid message ID"),
        (b"REQ 0123456789abcdef\n", b"E_INVALID REQ insufficient number of params"),
        (b"REQ 0123456789abcdef -5\n", b"E_INVALID REQ could not parse timeout -5"),
        (b"TOUCH\n", b"E_INVALID TOUCH insufficient number of params"),
    ],
)
async def test_fatal_errors_when_subscribed(nsqd: NSQD, commands: bytes, expected: bytes) -> None:
    conn = await connect(nsqd)
    await conn.sub("t", "c")
    conn.send(commands)
    await fatal(conn, expected)


async def test_non_fatal_errors_keep_the_connection(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.sub("t", "c", rdy=1)
    conn.send(b"FIN 0123456789abcdef\nREQ 0123456789abcdef 0\nTOUCH 0123456789abcdef\n")
    assert await conn.error() == b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"
    assert await conn.error() == b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight"
    assert await conn.error() == b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight"
    conn.cmd("PUB t", b"still here")
    assert await conn.response() == b"OK"
    assert (await conn.message()).body == b"still here"


async def test_fin_of_another_clients_message(nsqd: NSQD) -> None:
    a, b = await connect(nsqd), await connect(nsqd)
    await a.sub("t", "c", rdy=1)
    await b.sub("t", "c", rdy=0)
    await a.pub("t", b"x")
    msg = await a.message()
    b.cmd(f"FIN {msg.id.decode()}")
    assert (
        await b.error()
        == f"E_FIN_FAILED FIN {msg.id.decode()} failed client does not own message".encode()
    )


async def test_commands_after_a_fatal_error_are_not_run(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    conn.send(b"BAD\nPUB t\n\x00\x00\x00\x01x")
    await fatal(conn, b"E_INVALID invalid command BAD")
    assert "t" not in nsqd.broker.topics


async def test_req_redelivers_with_attempts(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.sub("t", "c", rdy=1)
    await conn.pub("t", b"again")
    first = await conn.message()
    conn.cmd(f"REQ {first.id.decode()} 0")
    second = await conn.message()
    assert (second.id, second.attempts) == (first.id, 2)
    channel = nsqd.broker.topics["t"].channels["c"]
    assert channel.requeue_count == 1


async def test_req_with_delay_and_clamped_timeout(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(max_req_timeout=200_000_000)  # 200ms
    conn = await connect(nsqd)
    await conn.sub("t", "c", rdy=1)
    await conn.pub("t", b"later")
    msg = await conn.message()
    conn.cmd(f"REQ {msg.id.decode()} 999999")  # clamped to 200ms, not an error
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.deferred_count == 1)
    again = await conn.message()
    assert again.attempts == 2


async def test_dpub_delivers_after_the_delay(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.sub("t", "c", rdy=1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    conn.cmd("DPUB t 300", b"deferred")
    assert await conn.response() == b"OK"
    channel = nsqd.broker.topics["t"].channels["c"]
    assert channel.deferred_count == 1
    msg = await conn.message()
    # uvloop's clock has millisecond resolution: allow for rounding.
    assert msg.body == b"deferred" and loop.time() - start >= 0.3 - 0.002


async def test_msg_timeout_redelivers(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(msg_timeout=1000)
    await conn.sub("t", "c", rdy=1)
    await conn.pub("t", b"slow")
    first = await conn.message()
    second = await conn.message()
    assert (second.id, second.attempts) == (first.id, 2)
    assert nsqd.broker.topics["t"].channels["c"].timeout_count == 1


async def test_touch_keeps_message_in_flight(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(msg_timeout=1000)
    await conn.sub("t", "c", rdy=1)
    await conn.pub("t", b"x")
    msg = await conn.message()
    channel = nsqd.broker.topics["t"].channels["c"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 1.6
    while loop.time() < deadline:  # touch past the original 1s timeout
        conn.cmd(f"TOUCH {msg.id.decode()}")
        await _pace(0.2)
    assert channel.timeout_count == 0 and channel.in_flight_count == 1


async def _pace(seconds: float) -> None:
    """Let the daemon run for ``seconds``: pacing a client's TOUCHes, not synchronising."""
    never = asyncio.get_running_loop().create_future()
    await asyncio.wait([never], timeout=seconds)
    never.cancel()


async def test_cls_then_rdy_is_ignored(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.sub("t", "c", rdy=0)
    conn.cmd("CLS")
    assert await conn.response() == b"CLOSE_WAIT"
    conn.cmd("RDY 10")
    await conn.pub("t", b"nobody")
    channel = nsqd.broker.topics["t"].channels["c"]
    assert channel.depth == 1 and channel.in_flight_count == 0


async def test_disconnect_requeues_in_flight_at_once(nsqd: NSQD) -> None:
    a, b = await connect(nsqd), await connect(nsqd)
    await a.sub("t", "c", rdy=1)
    await b.sub("t", "c", rdy=0)
    await a.pub("t", b"orphan")
    first = await a.message()
    await a.close()
    b.cmd("RDY 1")
    msg = await b.message()
    assert (msg.id, msg.attempts) == (first.id, 2)


async def test_heartbeats_and_read_deadline(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(heartbeat_interval=1000)
    frame = await conn.frame(timeout=3)
    assert frame.data == b"_heartbeat_"
    assert await conn.closed(timeout=5)  # never answered: dropped after 2 intervals


async def test_nop_keeps_connection_alive(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(heartbeat_interval=1000)
    for _ in range(3):
        frame = await conn.frame(timeout=3)
        assert frame.data == b"_heartbeat_"
        conn.cmd("NOP")
    await conn.pub("t", b"alive")


async def test_sub_with_heartbeats_disabled(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(heartbeat_interval=-1)
    conn.cmd("SUB t c")
    await fatal(conn, b"E_INVALID cannot SUB with heartbeats disabled")


async def test_max_channel_consumers(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(max_channel_consumers=1)
    a, b = await connect(nsqd), await connect(nsqd)
    await a.sub("t", "c")
    b.cmd("SUB t c")
    await fatal(b, b"E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 1")


async def test_disk_write_failure_is_e_pub_failed(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(mem_queue_size=0)
    conn = await connect(nsqd)
    await conn.pub("t", b"1")
    backend = nsqd.broker.topics["t"].backend
    assert backend is not None

    def failing_put(records: list[bytes]) -> None:
        raise DiskQueueError("disk on fire")

    backend.put = failing_put  # type: ignore[method-assign]
    conn.cmd("PUB t", b"2")
    assert await conn.error() == b"E_PUB_FAILED PUB failed disk on fire"
    assert nsqd.health == "NOK - disk on fire"
    assert nsqd.broker.topics["t"].depth == 1


async def test_garbage_never_hurts_other_clients(nsqd: NSQD) -> None:
    good = await connect(nsqd)
    await good.sub("t", "c", rdy=5)
    junks = [
        b"\x00\xff" * 5000 + b"\n",
        b"PUB t\n\xff\xff\xff\xff",
        b"X" * 20000,
        b"IDENTIFY\n\x7f\xff\xff\xff",
    ]
    for junk in junks:
        bad = await connect(nsqd)
        bad.send(junk)
        assert await bad.closed()
    await good.pub("t", b"fine")
    assert (await good.message()).body == b"fine"


async def test_command_flood_is_answered_in_order(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    conn.send(b"PUB t\n\x00\x00\x00\x01x" * 2000 + b"NOP\n" * 2000)
    for _ in range(2000):
        assert await conn.response() == b"OK"
    assert nsqd.broker.topics["t"].message_count == 2000


async def test_v2_on_the_http_port_gets_http_400(nsqd: NSQD) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", nsqd.http_port)
    writer.write(b"  V2PUB t\n\x00\x00\x00\x01x")
    async with asyncio.timeout(5):
        head = await reader.readline()
    assert head.startswith(b"HTTP/1.") and b" 400 " in head
    writer.close()


async def test_peer_that_stops_reading_is_dropped_and_its_messages_return(nsqd: NSQD) -> None:
    stuck = await connect(nsqd)
    await stuck.identify(heartbeat_interval=1000)
    await stuck.sub("t", "c", rdy=100)
    pub = await connect(nsqd)
    big = b"x" * (1024 * 1024 - 1)
    for _ in range(16):  # far more than socket buffers and the transport's high-water mark
        await pub.pub("t", big)
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: not channel.clients, timeout=10)
    assert channel.in_flight_count == 0
    assert channel.depth == 16


async def test_tcp_address_may_be_a_unix_socket(nsqd_factory: NsqdFactory, tmp_path: Path) -> None:
    path = str(tmp_path / "nsqd.sock")
    nsqd = await nsqd_factory(tcp_address=path)
    assert nsqd.tcp_port == -1
    reader, writer = await asyncio.open_unix_connection(path)
    conn = RawV2(reader, writer)
    conn.send(b"  V2")
    await conn.pub("t", b"over a unix socket")
    assert nsqd.broker.topics["t"].message_count == 1


async def test_ephemeral_channel_and_topic_vanish_with_their_last_client(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.sub("t#ephemeral", "c#ephemeral", rdy=1)
    await conn.pub("t#ephemeral", b"x")
    assert (await conn.message()).body == b"x"
    assert "t#ephemeral" in nsqd.broker.topics
    await conn.close()
    await wait_for(lambda: "t#ephemeral" not in nsqd.broker.topics)


async def test_sample_rate_from_identify(nsqd: NSQD) -> None:
    conn = await connect(nsqd)
    await conn.identify(feature_negotiation=True, sample_rate=50)
    await conn.sub("t", "c#ephemeral", rdy=2500)
    pub = await connect(nsqd)
    body = b"s"
    payload = struct.pack(">i", 1000) + (struct.pack(">i", 1) + body) * 1000
    pub.cmd("MPUB t", payload)
    assert await pub.response() == b"OK"
    channel = nsqd.broker.topics["t"].channels["c#ephemeral"]
    assert 300 < channel.in_flight_count < 700  # about half delivered, the rest dropped
    assert channel.depth == 0


async def test_a_burst_of_fins_is_finished_in_order_with_errors(nsqd: NSQD) -> None:
    conn, pub = await connect(nsqd), await connect(nsqd)
    await conn.sub("t", "c", rdy=10)
    for i in range(3):
        await pub.pub("t", b"%d" % i)
    msgs = [await conn.message() for _ in range(3)]
    bogus = b"0000000000000000"
    conn.send(b"".join(b"FIN " + m.id + b"\n" for m in msgs[:2]) + b"FIN " + bogus + b"\n")
    assert await conn.error() == b"E_FIN_FAILED FIN 0000000000000000 failed ID not in flight"
    conn.send(b"FIN " + msgs[2].id + b"\n")
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.in_flight_count == 0)
    (consumer,) = channel.clients.values()
    assert consumer.finish_count == 3

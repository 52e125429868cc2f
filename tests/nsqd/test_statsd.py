"""statsd output: the pure line builder and packer, then a real nsqd pushing to a UDP socket.

The daemon tests bind a UDP socket on 127.0.0.1:0 and parse every packet nsqd sends. A push
with ``--statsd-mem-stats`` (the default) ends with ``mem.gc_runs``, which is how packets are
grouped into pushes. The interval is 1.1s: nsqd spreads a push's packets over interval - 1s.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import HttpApi
from v2client import RawV2

from nsqpy.nsqd.observe import statsd
from nsqpy.nsqd.observe.stats import ChannelStats, MemoryStats, PolicyStats, Stats, TopicStats

MS = 1_000_000
LINE = re.compile(r"^(?P<name>[^:]+):(?P<value>-?\d+)\|(?P<type>[cg])$")

# -- pure: prefix, lines, packets -----------------------------------------------------------


def test_host_key_and_prefix() -> None:
    assert statsd.host_key("myhost.example.com:4151") == "myhost_example_com_4151"
    assert statsd.prefix_for("nsq.%s", "myhost.example.com", 4151) == (
        "nsq.myhost_example_com_4151."
    )
    assert statsd.prefix_for("nsq.%s.", "h", 1) == "nsq.h_1."  # no second dot
    assert statsd.prefix_for("a.%s.b.%s", "h", 1) == "a.h_1.b.h_1."
    assert statsd.prefix_for("plain", "h", 1) == "plain."
    assert statsd.prefix_for("nsq.%s", "::1", 4151) == "nsq.[__1]_4151."  # JoinHostPort
    assert statsd.prefix_for("", "h", 1) == ""  # nsqd leaves an empty prefix alone


def test_pack_fills_packets_without_splitting_lines() -> None:
    lines = ["aaa\n", "bb\n", "c\n", "dddd\n", "eeeeeeeeeee\n", "f\n"]
    # bufio.Writer(7): a line that does not fit flushes first; one longer than 7 goes alone
    assert statsd.pack(lines, 7) == [b"aaa\nbb\n", b"c\ndddd\n", b"eeeeeeeeeee\n", b"f\n"]
    assert statsd.pack(["abc\n", "def\n"], 8) == [b"abc\ndef\n"]  # an exact fit
    assert statsd.pack([], 508) == []
    assert statsd.pack(["x\n"] * 3000, 0) == [b"x\n" * 2048, b"x\n" * 952]  # bufio's 4096


def channel(name: str, **counts: Any) -> ChannelStats:
    fields: dict[str, Any] = {
        "depth": 0,
        "backend_depth": 0,
        "in_flight_count": 0,
        "deferred_count": 0,
        "message_count": 0,
        "requeue_count": 0,
        "timeout_count": 0,
        "client_count": 0,
        "clients": None,
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    fields.update(counts)
    return ChannelStats(channel_name=name, **fields)


def topic(name: str, channels: list[ChannelStats], **counts: Any) -> TopicStats:
    fields: dict[str, Any] = {
        "depth": 0,
        "backend_depth": 0,
        "message_count": 0,
        "message_bytes": 0,
        "paused": False,
        "e2e_processing_latency": {"count": 0, "percentiles": None},
    }
    fields.update(counts)
    return TopicStats(topic_name=name, channels=channels, **fields)


def e2e(*pairs: tuple[float, float]) -> dict[str, object]:
    return {"count": 9, "percentiles": [{"quantile": q, "value": v} for q, v in pairs]}


def test_report_golden_lines_and_deltas() -> None:
    report = statsd.Report("nsq.h_1.", exclude_ephemeral=True)
    first = Stats(
        topics=[
            topic(
                "orders",
                [
                    channel(
                        "billing",
                        depth=3,
                        backend_depth=1,
                        in_flight_count=2,
                        deferred_count=1,
                        message_count=10,
                        requeue_count=4,
                        timeout_count=1,
                        client_count=2,
                        e2e_processing_latency=e2e((0.999, 2500.9), (0.5, 1000.0)),
                    ),
                    channel("tail#ephemeral", message_count=10),
                ],
                depth=5,
                backend_depth=2,
                message_count=10,
                message_bytes=640,
                e2e_processing_latency=e2e((0.999, 2500.9), (0.5, 1000.0)),
            ),
            topic("scratch#ephemeral", [], message_count=3),
        ],
        producers=None,
    )
    assert report.lines(first) == [
        "nsq.h_1.topic.orders.message_count:10|c\n",
        "nsq.h_1.topic.orders.message_bytes:640|c\n",
        "nsq.h_1.topic.orders.depth:5|g\n",
        "nsq.h_1.topic.orders.backend_depth:2|g\n",
        "nsq.h_1.topic.orders.e2e_processing_latency_100:2500|g\n",  # %.0f of 99.9; int64 cast
        "nsq.h_1.topic.orders.e2e_processing_latency_50:1000|g\n",
        "nsq.h_1.topic.orders.channel.billing.message_count:10|c\n",
        "nsq.h_1.topic.orders.channel.billing.depth:3|g\n",
        "nsq.h_1.topic.orders.channel.billing.backend_depth:1|g\n",
        "nsq.h_1.topic.orders.channel.billing.in_flight_count:2|g\n",
        "nsq.h_1.topic.orders.channel.billing.deferred_count:1|g\n",
        "nsq.h_1.topic.orders.channel.billing.requeue_count:4|c\n",
        "nsq.h_1.topic.orders.channel.billing.timeout_count:1|c\n",
        "nsq.h_1.topic.orders.channel.billing.clients:2|g\n",
        "nsq.h_1.topic.orders.channel.billing.e2e_processing_latency_100:2500|g\n",
        "nsq.h_1.topic.orders.channel.billing.e2e_processing_latency_50:1000|g\n",
    ]
    second = Stats(
        topics=[
            topic(
                "orders",
                [channel("billing", message_count=25, requeue_count=4, timeout_count=3)],
                message_count=25,
                message_bytes=1600,
            ),
            topic("zeta", [channel("new", message_count=2)], message_count=2, message_bytes=8),
        ],
        producers=None,
    )
    counters = [line for line in report.lines(second) if line.endswith("|c\n")]
    assert counters == [
        "nsq.h_1.topic.orders.message_count:15|c\n",
        "nsq.h_1.topic.orders.message_bytes:960|c\n",
        "nsq.h_1.topic.orders.channel.billing.message_count:15|c\n",
        "nsq.h_1.topic.orders.channel.billing.requeue_count:0|c\n",
        "nsq.h_1.topic.orders.channel.billing.timeout_count:2|c\n",
        "nsq.h_1.topic.zeta.message_count:2|c\n",  # new since last push: counted from zero
        "nsq.h_1.topic.zeta.message_bytes:8|c\n",
        "nsq.h_1.topic.zeta.channel.new.message_count:2|c\n",
        "nsq.h_1.topic.zeta.channel.new.requeue_count:0|c\n",
        "nsq.h_1.topic.zeta.channel.new.timeout_count:0|c\n",
    ]
    # a topic deleted and recreated with fewer messages: a negative delta, as nsqd sends
    third = Stats(topics=[topic("zeta", [], message_count=1, message_bytes=4)], producers=None)
    assert report.lines(third)[:2] == [
        "nsq.h_1.topic.zeta.message_count:-1|c\n",
        "nsq.h_1.topic.zeta.message_bytes:-4|c\n",
    ]


def test_dead_letter_counters_only_for_channels_with_a_policy() -> None:
    report = statsd.Report("p.")

    def snapshot(dead: int, expired: int) -> Stats:
        policy = PolicyStats(3, 60 * 10**9, "t.dead", dead, expired)
        return Stats(
            topics=[topic("t", [channel("c", policy=policy), channel("plain")])],
            producers=None,
        )

    first = report.lines(snapshot(4, 1))
    assert "p.topic.t.channel.c.dead_letter_count:4|c\n" in first
    assert "p.topic.t.channel.c.expired_count:1|c\n" in first
    assert not [line for line in first if ".plain.dead" in line or ".plain.expired" in line]
    second = report.lines(snapshot(6, 1))  # counters are deltas since the previous push
    assert "p.topic.t.channel.c.dead_letter_count:2|c\n" in second
    assert "p.topic.t.channel.c.expired_count:0|c\n" in second


def test_report_memory_lines() -> None:
    report = statsd.Report("p.")
    memory = MemoryStats(
        heap_objects=1,
        heap_idle_bytes=2,
        heap_in_use_bytes=3,
        heap_released_bytes=4,
        gc_pause_usec_100=5,
        gc_pause_usec_99=6,
        gc_pause_usec_95=7,
        next_gc_bytes=8,
        gc_total_runs=0xFFFFFFFE,
    )
    empty = Stats(topics=[], producers=None)
    assert report.lines(empty, memory) == [
        "p.mem.heap_objects:1|g\n",
        "p.mem.heap_idle_bytes:2|g\n",
        "p.mem.heap_in_use_bytes:3|g\n",
        "p.mem.heap_released_bytes:4|g\n",
        "p.mem.gc_pause_usec_100:5|g\n",
        "p.mem.gc_pause_usec_99:6|g\n",
        "p.mem.gc_pause_usec_95:7|g\n",
        "p.mem.next_gc_bytes:8|g\n",
        "p.mem.gc_runs:4294967294|c\n",
    ]
    wrapped = MemoryStats(gc_total_runs=3)  # the uint32 counter wrapped: 5 runs since
    assert report.lines(empty, wrapped)[-1] == "p.mem.gc_runs:5|c\n"
    assert report.lines(empty) == []  # --statsd-mem-stats=false


# -- a real nsqd -----------------------------------------------------------------------------


class Capture(asyncio.DatagramProtocol):
    """Every datagram received, with its arrival time on the loop's clock."""

    def __init__(self) -> None:
        self.packets: list[tuple[float, bytes]] = []

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.packets.append((asyncio.get_running_loop().time(), data))

    def lines(self) -> list[str]:
        return [line for _, data in self.packets for line in data.decode().splitlines()]

    def pushes(self) -> list[list[str]]:
        """Complete pushes: each one's lines, up to its closing ``mem.gc_runs``."""
        done: list[list[str]] = []
        current: list[str] = []
        for line in self.lines():
            current.append(line)
            if ".mem.gc_runs:" in line:
                done.append(current)
                current = []
        return done

    def push_arrivals(self) -> list[list[float]]:
        """Complete pushes: the arrival time of each of their packets."""
        done: list[list[float]] = []
        current: list[float] = []
        for arrived, data in self.packets:
            current.append(arrived)
            if b".mem.gc_runs:" in data:
                done.append(current)
                current = []
        return done


@pytest.fixture
async def capture() -> AsyncIterator[tuple[Capture, int]]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Capture, local_addr=("127.0.0.1", 0))
    yield protocol, transport.get_extra_info("sockname")[1]
    transport.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def parse(lines: list[str], prefix: str) -> dict[str, tuple[int, str]]:
    parsed: dict[str, tuple[int, str]] = {}
    for line in lines:
        assert line.startswith(prefix), line
        match = LINE.match(line[len(prefix) :])
        assert match is not None, line
        parsed[match["name"]] = (int(match["value"]), match["type"])
    return parsed


CHANNEL_TYPES = {
    "message_count": "c",
    "depth": "g",
    "backend_depth": "g",
    "in_flight_count": "g",
    "deferred_count": "g",
    "requeue_count": "c",
    "timeout_count": "c",
    "clients": "g",
    "e2e_processing_latency_100": "g",
    "e2e_processing_latency_50": "g",
}
TOPIC_TYPES = {
    "message_count": "c",
    "message_bytes": "c",
    "depth": "g",
    "backend_depth": "g",
    "e2e_processing_latency_100": "g",
    "e2e_processing_latency_50": "g",
}
MEM_TYPES = {
    "heap_objects": "g",
    "heap_idle_bytes": "g",
    "heap_in_use_bytes": "g",
    "heap_released_bytes": "g",
    "gc_pause_usec_100": "g",
    "gc_pause_usec_99": "g",
    "gc_pause_usec_95": "g",
    "next_gc_bytes": "g",
    "gc_runs": "c",
}


async def test_pushes_counters_gauges_and_e2e(
    nsqd_factory: NsqdFactory, capture: tuple[Capture, int], session: aiohttp.ClientSession
) -> None:
    received, port = capture
    nsqd = await nsqd_factory(
        statsd_address=f"127.0.0.1:{port}",
        statsd_interval=1100 * MS,
        statsd_udp_packet_size=256,
        statsd_exclude_ephemeral=True,
        broadcast_address="statsd.example.com",
        e2e_processing_latency_percentiles=[1.0, 0.5],
    )
    prefix = f"nsq.statsd_example_com_{nsqd.http_port}."
    http = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    consumer = await RawV2.connect(nsqd.tcp_port)
    await consumer.sub("t", "c", rdy=10)
    ephemeral = [await RawV2.connect(nsqd.tcp_port) for _ in range(2)]
    await ephemeral[0].sub("t", "tail#ephemeral")
    await ephemeral[1].sub("scratch#ephemeral", "c")
    assert (await http.post("/mpub?topic=t", b"hello\n" * 4 + b"hello")).status == 200
    assert (await http.post("/pub?topic=scratch%23ephemeral", b"x")).status == 200
    for _ in range(5):
        msg = await consumer.message()
        consumer.cmd(f"FIN {msg.id.decode()}")
    chan = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: chan.e2e_summary().count == 5)

    published = f"{prefix}topic.t.message_count:5|c"

    def two_pushes_since_publish() -> bool:
        pushes = received.pushes()
        return any(published in push for push in pushes[:-1])

    await wait_for(two_pushes_since_publish, timeout=10)
    pushes = received.pushes()
    index = next(i for i, push in enumerate(pushes) if published in push)
    first, second = parse(pushes[index], prefix), parse(pushes[index + 1], prefix)

    # counters are deltas: all five in one push, none in the next
    assert first["topic.t.message_count"] == (5, "c")
    assert first["topic.t.message_bytes"] == (25, "c")
    assert first["topic.t.channel.c.message_count"] == (5, "c")
    assert second["topic.t.message_count"] == (0, "c")
    assert second["topic.t.message_bytes"] == (0, "c")
    assert second["topic.t.channel.c.message_count"] == (0, "c")
    # names and types, exactly those of nsqd, and current gauges
    assert {k[len("topic.t.channel.c.") :]: v[1] for k, v in second.items() if ".c." in k} == (
        CHANNEL_TYPES
    )
    topic_part = {
        k[len("topic.t.") :]: v[1]
        for k, v in second.items()
        if k.startswith("topic.t.") and ".channel." not in k
    }
    assert topic_part == TOPIC_TYPES
    assert {k[len("mem.") :]: v[1] for k, v in second.items() if k.startswith("mem.")} == (
        MEM_TYPES
    )
    assert second["topic.t.depth"] == (0, "g")
    assert second["topic.t.channel.c.clients"] == (1, "g")
    assert second["topic.t.channel.c.in_flight_count"] == (0, "g")
    assert second["mem.heap_objects"][0] > 0
    # e2e gauges: ns, 100th >= 50th > 0
    for stat in ("topic.t", "topic.t.channel.c"):
        p100 = second[f"{stat}.e2e_processing_latency_100"][0]
        p50 = second[f"{stat}.e2e_processing_latency_50"][0]
        assert p100 >= p50 > 0
    # ephemeral topics and channels exist but are never sent
    assert "tail#ephemeral" in nsqd.broker.topics["t"].channels
    assert "scratch#ephemeral" in nsqd.broker.topics
    assert not [line for line in received.lines() if "#ephemeral" in line]
    # packets: within the size, whole lines only, and more than one per push here
    assert all(len(data) <= 256 and data.endswith(b"\n") for _, data in received.packets)
    assert len(received.packets) > 2 * len(pushes)
    # spread evenly over interval - 1s (0.1 s here): n packets, one every 0.1/n s, so the
    # first and last are at least (n - 1) * 0.1/n apart (a loaded machine only adds to it)
    for arrivals in received.push_arrivals():
        n = len(arrivals)
        assert arrivals[-1] - arrivals[0] >= 0.8 * (n - 1) * 0.1 / n
    for consumer_conn in [consumer, *ephemeral]:
        await consumer_conn.close()


async def test_stop_sends_what_is_left_and_ends_the_loop(
    nsqd_factory: NsqdFactory, capture: tuple[Capture, int]
) -> None:
    """Mid-spread, shutdown sends the rest of the push at once (nsqd's exit channel)."""
    received, port = capture
    nsqd = await nsqd_factory(
        statsd_address=f"127.0.0.1:{port}",
        statsd_interval=2500 * MS,  # packets spread over 1.5s
        statsd_udp_packet_size=40,  # about one line a packet: many packets
    )
    await wait_for(lambda: len(received.packets) >= 1, timeout=10)
    loop = asyncio.get_running_loop()
    stopping = loop.time()
    await nsqd.stop()
    assert loop.time() - stopping < 1.0
    assert nsqd._statsd is not None and not nsqd._statsd.running
    await wait_for(lambda: len(received.pushes()) == 1)
    assert received.pushes()[0][-1].endswith("|c")  # the push is whole


async def test_without_mem_stats_or_exclusion(
    nsqd_factory: NsqdFactory, capture: tuple[Capture, int], session: aiohttp.ClientSession
) -> None:
    received, port = capture
    nsqd = await nsqd_factory(
        statsd_address=f"127.0.0.1:{port}",
        statsd_interval=1100 * MS,
        statsd_mem_stats=False,
        statsd_prefix="",
    )
    http = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    assert (await http.post("/pub?topic=scratch%23ephemeral", b"x")).status == 200
    await wait_for(lambda: "topic.scratch#ephemeral.message_count:1|c" in received.lines(), 10)
    lines = received.lines()
    assert "topic.scratch#ephemeral.depth:1|g" in lines  # no prefix at all
    assert not [line for line in lines if "mem." in line]


async def test_an_unusable_address_is_logged_and_retried(
    nsqd_factory: NsqdFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="nsqpy.nsqd")
    await nsqd_factory(statsd_address="no-port-here", statsd_interval=1100 * MS)
    expected = "failed to create UDP socket to statsd(no-port-here)"
    await wait_for(lambda: expected in caplog.text, timeout=10)

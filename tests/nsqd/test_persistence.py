"""Disk overflow, restart and NSQ data directories, with in-process daemons on one data path."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from v2client import RawV2

from nsqpy.nsqd.app import NSQD, StartupError
from nsqpy.nsqd.options import NsqdOptions
from nsqpy.nsqd.storage import diskqueue, metadata
from nsqpy.nsqd.storage.diskqueue import DiskQueue


class Daemons:
    """Start, stop and restart nsqd instances on a data path of our choosing."""

    def __init__(self, data_path: Path) -> None:
        self.data_path = data_path
        self.running: list[NSQD] = []

    async def start(self, **overrides: Any) -> NSQD:
        opts = NsqdOptions()
        opts.tcp_address = "127.0.0.1:0"
        opts.http_address = "127.0.0.1:0"
        opts.data_path = str(self.data_path)
        for name, value in overrides.items():
            setattr(opts, name, value)
        daemon = NSQD(opts)
        await daemon.start()
        self.running.append(daemon)
        return daemon

    async def stop(self, daemon: NSQD) -> None:
        await daemon.stop()
        self.running.remove(daemon)


@pytest.fixture
async def daemons(tmp_path: Path) -> Any:
    d = Daemons(tmp_path / "data")
    yield d
    for daemon in list(d.running):
        await d.stop(daemon)


async def publish(nsqd: NSQD, topic: str, bodies: list[bytes]) -> None:
    conn = await RawV2.connect(nsqd.tcp_port)
    payload = struct.pack(">i", len(bodies)) + b"".join(
        struct.pack(">i", len(b)) + b for b in bodies
    )
    conn.cmd(f"MPUB {topic}", payload)
    assert await conn.response() == b"OK"
    await conn.close()


async def consume(nsqd: NSQD, topic: str, channel: str, count: int) -> list[bytes]:
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub(topic, channel, rdy=min(count, 2500))
    bodies = []
    for _ in range(count):
        msg = await conn.message()
        bodies.append(msg.body)
        conn.cmd(f"FIN {msg.id.decode()}")
    await conn.close()
    return bodies


BODIES = [b"m%05d" % i for i in range(300)]


async def test_overflow_goes_to_disk_and_comes_back_in_order(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=10)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", BODIES)
    channel = nsqd.broker.topics["t"].channels["c"]
    assert (channel.depth, channel.backend_depth) == (300, 290)
    assert await consume(nsqd, "t", "c", 300) == BODIES  # FIFO across memory and disk


async def test_mem_queue_size_zero_puts_everything_on_disk(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=0)
    await publish(nsqd, "t", BODIES[:50])
    assert nsqd.broker.topics["t"].backend_depth == 50
    assert sorted(await consume(nsqd, "t", "c", 50)) == BODIES[:50]


@pytest.mark.parametrize("durable", [False, True], ids=["disk", "durable"])
async def test_consumed_segments_are_deleted_off_the_loop(
    daemons: Daemons, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    """Unlinking a full 100 MB segment took ~20 ms here: every client would wait for it."""
    threads: list[str] = []
    remove = diskqueue._remove_logged

    def record(path: str, log: logging.Logger, name: str) -> None:
        threads.append(threading.current_thread().name)
        remove(path, log, name)

    monkeypatch.setattr(diskqueue, "_remove_logged", record)
    nsqd = await daemons.start(
        mem_queue_size=0, max_bytes_per_file=512, sync_every=10, durable=durable
    )
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", BODIES)  # 36-byte records: ~20 segments
    assert await consume(nsqd, "t", "c", 300) == BODIES
    data = daemons.data_path

    def segments() -> list[str]:
        return [p.name for p in data.iterdir() if p.name.startswith("t:c.diskqueue.0")]

    await wait_for(lambda: len(segments()) == 1)  # the write segment
    assert len(threads) >= 15
    assert {name.rsplit("_", 1)[0] for name in threads} == {"nsqd-files"}


async def test_restart_keeps_topics_channels_paused_flags_and_messages(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=100)
    topic = nsqd.broker.get_topic("t")
    nsqd.broker.get_channel(topic, "c", 0.0).pause()
    nsqd.broker.get_channel(topic, "d", 0.0)
    nsqd.broker.get_topic("held")  # no channel: the topic itself holds its messages
    await publish(nsqd, "t", BODIES)
    await publish(nsqd, "held", BODIES[:5])
    await daemons.stop(nsqd)

    saved = json.loads((daemons.data_path / "nsqd.dat").read_text())
    assert saved["version"] == "1.3.0"
    assert saved["topics"][1] == {
        "name": "t",
        "paused": False,
        "channels": [{"name": "c", "paused": True}, {"name": "d", "paused": False}],
    }

    nsqd = await daemons.start(mem_queue_size=100)
    topic = nsqd.broker.topics["t"]
    assert topic.channels["c"].paused and not topic.channels["d"].paused
    assert topic.channels["c"].depth == 300 and topic.channels["d"].depth == 300
    assert nsqd.broker.topics["held"].depth == 5
    # like nsqd, what was in memory at shutdown is appended after the disk backlog
    assert sorted(await consume(nsqd, "t", "d", 300)) == BODIES
    assert sorted(await consume(nsqd, "held", "late", 5)) == BODIES[:5]


async def test_in_flight_messages_survive_a_clean_restart(daemons: Daemons) -> None:
    nsqd = await daemons.start()
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    await publish(nsqd, "t", [b"a", b"b"])
    first = await conn.message()
    await conn.message()
    conn.cmd(f"FIN {first.id.decode()}")
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.in_flight_count == 1)
    await daemons.stop(nsqd)

    nsqd = await daemons.start()
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    again = await conn.message()
    assert (again.body, again.attempts) == (b"b", 2)


async def test_deferred_messages_keep_their_delay_across_restart(daemons: Daemons) -> None:
    nsqd = await daemons.start()
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    conn = await RawV2.connect(nsqd.tcp_port)
    loop = asyncio.get_running_loop()
    published = loop.time()
    conn.cmd("DPUB t 1500", b"later")
    assert await conn.response() == b"OK"
    await daemons.stop(nsqd)

    nsqd = await daemons.start()
    channel = nsqd.broker.topics["t"].channels["c"]
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=1)
    msg = await conn.message()
    assert msg.body == b"later"
    assert loop.time() - published >= 1.5 - 0.01  # not before its time, even after a restart
    assert channel.timeout_count == 0


async def test_a_second_nsqd_on_the_same_data_path_is_refused(daemons: Daemons) -> None:
    await daemons.start()
    with pytest.raises(StartupError, match="failed to lock data-path: cannot flock directory"):
        await daemons.start()


async def test_garbage_nsqd_dat_is_set_aside_and_queues_recovered(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=0)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", BODIES[:20])
    await daemons.stop(nsqd)
    (daemons.data_path / "nsqd.dat").write_bytes(b"\x00garbage{")

    nsqd = await daemons.start(mem_queue_size=0)
    assert (daemons.data_path / "nsqd.dat.bad").exists()
    assert nsqd.broker.topics["t"].channels["c"].depth == 20
    assert await consume(nsqd, "t", "c", 20) == BODIES[:20]


async def test_deleting_a_topic_removes_its_files(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=0)
    nsqd.broker.get_channel(nsqd.broker.get_topic("gone"), "c", 0.0)
    await publish(nsqd, "gone", BODIES[:10])
    assert list(daemons.data_path.glob("gone*"))
    clients = nsqd.broker.delete_topic("gone")
    assert clients == []
    assert not [p for p in daemons.data_path.glob("gone*") if not p.name.endswith(".bad")]


async def test_ephemeral_topics_never_touch_disk(daemons: Daemons) -> None:
    nsqd = await daemons.start(mem_queue_size=5)
    await publish(nsqd, "e#ephemeral", BODIES[:20])
    assert nsqd.broker.topics["e#ephemeral"].depth == 5  # overflow dropped, as in nsqd
    assert not list(daemons.data_path.glob("e#ephemeral*"))


# -- nsqd v1.3.0 data directories, written byte by byte from the format description --------
def nsq_record(ts: int, attempts: int, msg_id: bytes, body: bytes) -> bytes:
    payload = ts.to_bytes(8, "big") + attempts.to_bytes(2, "big") + msg_id + body
    return len(payload).to_bytes(4, "big") + payload


def test_fixture_layout_matches_the_format() -> None:
    rec = nsq_record(1, 1, b"0" * 16, b"x")
    assert rec[:4] == b"\x00\x00\x00\x1b" and len(rec) == 4 + 27


async def test_opens_an_nsqd_data_directory_and_delivers_everything(daemons: Daemons) -> None:
    data = daemons.data_path
    data.mkdir(parents=True)
    ts = 1_700_000_000_000_000_000
    topic_recs = [nsq_record(ts, 0, b"%016x" % i, b"topic-%d" % i) for i in range(3)]
    chan_recs = [nsq_record(ts, 1, b"%016x" % (100 + i), b"chan-%d" % i) for i in range(6)]
    # the topic "orders" has no channel data pending except in its own queue (one file)
    (data / "orders.diskqueue.000000.dat").write_bytes(b"".join(topic_recs))
    size = sum(map(len, topic_recs))
    (data / "orders.diskqueue.meta.dat").write_bytes(b"3\n0,0\n0,%d\n" % size)
    # the channel "orders:archive" spans two files; the first two records were consumed
    first, second = b"".join(chan_recs[:4]), b"".join(chan_recs[4:])
    (data / "orders:archive.diskqueue.000000.dat").write_bytes(first)
    (data / "orders:archive.diskqueue.000001.dat").write_bytes(second)
    consumed = len(chan_recs[0]) + len(chan_recs[1])
    meta = b"4\n0,%d\n1,%d\n" % (consumed, len(second))
    (data / "orders:archive.diskqueue.meta.dat").write_bytes(meta)
    (data / "nsqd.dat").write_bytes(
        b'{"topics":[{"name":"orders","paused":false,"channels":'
        b'[{"name":"archive","paused":false}]}],"version":"1.3.0"}'
    )

    nsqd = await daemons.start()
    channel = nsqd.broker.topics["orders"].channels["archive"]
    await wait_for(lambda: channel.depth == 7)  # 4 of its own + the topic's 3, pumped over
    got = await consume(nsqd, "orders", "archive", 7)
    assert sorted(got) == sorted(
        [b"chan-%d" % i for i in range(2, 6)] + [b"topic-%d" % i for i in range(3)]
    )


async def test_stats_report_disk_depth(daemons: Daemons) -> None:
    import aiohttp

    nsqd = await daemons.start(mem_queue_size=4)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", BODIES[:10])
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{nsqd.http_port}/stats?format=json&topic=t") as resp,
    ):
        (topic,) = (await resp.json())["topics"]
    (channel,) = topic["channels"]
    assert (channel["depth"], channel["backend_depth"]) == (10, 6)


# -- durable mode ---------------------------------------------------------------------------
async def test_durable_ok_means_on_disk_and_unfinished_messages_come_back(
    daemons: Daemons,
) -> None:
    nsqd = await daemons.start(durable=True)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", BODIES[:10])  # returns once OK: the records are already on disk
    segment = daemons.data_path / "t:c.diskqueue.000000.dat"
    assert segment.stat().st_size == sum(4 + 26 + len(b) for b in BODIES[:10])

    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    got = [await conn.message() for _ in range(10)]
    for msg in got[:6]:
        conn.cmd(f"FIN {msg.id.decode()}")
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.in_flight_count == 4)
    await daemons.stop(nsqd)

    nsqd = await daemons.start(durable=True)
    assert sorted(await consume(nsqd, "t", "c", 4)) == sorted(m.body for m in got[6:])


async def test_durable_messages_handed_straight_to_a_consumer_still_wait_for_their_fin(
    daemons: Daemons,
) -> None:
    nsqd = await daemons.start(durable=True)
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=8)  # subscribed first: messages go out as they are written
    await publish(nsqd, "t", BODIES[:10])
    got = [await conn.message() for _ in range(8)]
    channel = nsqd.broker.topics["t"].channels["c"]
    backend = channel.backend
    assert isinstance(backend, DiskQueue)
    assert backend.depth == 2
    assert backend._reader is None  # the 8 were taken as they were written, never read back
    for msg in got[:5]:
        conn.cmd(f"FIN {msg.id.decode()}")
    await wait_for(lambda: channel.in_flight_count == 5)  # 3 in flight + 2 refilled
    await daemons.stop(nsqd)

    nsqd = await daemons.start(durable=True)
    again = await consume(nsqd, "t", "c", 5)
    assert sorted(again) == sorted([m.body for m in got[5:]] + BODIES[8:10])


async def test_durable_publishers_share_commits_and_replies_stay_in_order(
    daemons: Daemons,
) -> None:
    nsqd = await daemons.start(durable=True)
    conns = [await RawV2.connect(nsqd.tcp_port) for _ in range(4)]
    for i, conn in enumerate(conns):
        conn.cmd("PUB t", b"p%d" % i)
        conn.cmd("NOP")
        conn.cmd("PUB t", b"q%d" % i)
        conn.cmd("PUB bad!", b"x")  # fatal: its error must come after both OKs
    for conn in conns:
        assert await conn.response() == b"OK"
        assert await conn.response() == b"OK"
        assert await conn.error() == b'E_BAD_TOPIC PUB topic name "bad!" is not valid'
    assert nsqd.broker.topics["t"].depth == 8


async def test_durable_clean_stop_keeps_req_delays_and_attempts(daemons: Daemons) -> None:
    nsqd = await daemons.start(durable=True)
    nsqd.broker.get_channel(nsqd.broker.get_topic("t"), "c", 0.0)
    await publish(nsqd, "t", [b"a", b"b"])
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    msgs = {m.body: m for m in [await conn.message(), await conn.message()]}
    loop = asyncio.get_running_loop()
    requeued_at = loop.time()
    conn.cmd(f"REQ {msgs[b'a'].id.decode()} 1500")
    channel = nsqd.broker.topics["t"].channels["c"]
    await wait_for(lambda: channel.deferred_count == 1)
    await daemons.stop(nsqd)

    nsqd = await daemons.start(durable=True)
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("t", "c", rdy=10)
    first = await conn.message()
    assert (first.body, first.attempts) == (b"b", 2)  # delivered once before the stop
    second = await conn.message()
    assert (second.body, second.attempts) == (b"a", 2)
    assert loop.time() - requeued_at >= 1.5 - 0.01


def test_a_deferred_count_that_is_not_a_count_is_ignored() -> None:
    channels = [
        {"name": "good", "paused": False, "deferred_records": 4},
        *(
            {"name": f"bad{i}", "paused": False, "deferred_records": value}
            for i, value in enumerate(["4", -1, True, 2.5, None])
        ),
    ]
    doc = {"topics": [{"name": "t", "paused": False, "channels": channels}], "version": "1.3.0"}
    (topic,) = metadata.decode(json.dumps(doc).encode())
    assert [(c.name, c.deferred) for c in topic.channels] == [
        ("good", 4),
        *((f"bad{i}", 0) for i in range(5)),
    ]
    # written back only where there is a count, as an extra field Go's nsqd ignores
    again = json.loads(metadata.encode([topic]))
    assert again["topics"][0]["channels"][0] == {
        "name": "good",
        "paused": False,
        "deferred_records": 4,
    }
    assert all("deferred_records" not in c for c in again["topics"][0]["channels"][1:])

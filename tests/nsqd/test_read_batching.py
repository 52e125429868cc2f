"""A busy consumer's commands read a mark's worth at a time (``SO_RCVLOWAT``), and never
left waiting under the mark: the batcher's ticks on fakes, then the kernel's part on a real
daemon over real sockets."""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import zlib
from dataclasses import dataclass, field

import pytest
from conftest import wait_for
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.server import read_batching
from nsqpy.nsqd.server.read_batching import (
    BUSY,
    MAX_LOWAT,
    SLOW_TICKS,
    ReadBatcher,
    lowat_for,
    mark_for,
)
from nsqpy.nsqd.server.tcp import V2Connection

NEVER = 3600.0  # a tick that never fires by itself: the tests call ``tick``


@dataclass(eq=False)
class Conn:
    lowat_want: int = 4096
    rx_bytes: int = 0
    lowat: int = 1
    batched: bool = False
    rest_until: float = 0.0
    marks: list[int] = field(default_factory=list)

    def set_lowat(self, mark: int) -> None:
        self.marks.append(mark)
        self.lowat = mark


def test_the_highest_mark_is_a_sixteenth_of_the_window_in_fin_lines_at_most_4096() -> None:
    assert len(b"FIN 0123456789abcdef\n") == read_batching.FIN_LINE
    assert [lowat_for(rdy) for rdy in (0, 1, 50, 63, 64, 80, 160, 2500, 3120, 3200)] == [
        0, 0, 0, 0, 84, 105, 210, 3276, 4095, 4096,
    ]  # fmt: skip
    assert MAX_LOWAT == 4096


def test_the_mark_is_half_a_ticks_bytes_as_a_power_of_two_under_the_highest() -> None:
    assert BUSY == 512
    sent = (0, 511, 512, 1023, 1024, 5000, 100_000)
    assert [mark_for(n, 4096) for n in sent] == [0, 0, 256, 256, 512, 2048, 4096]
    assert [mark_for(n, 210) for n in sent] == [0, 0, 210, 210, 210, 210, 210]
    assert mark_for(100_000, 0) == 0


async def test_a_busy_tick_raises_the_mark_to_its_pace() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER), Conn()
    batcher.watch(conn)
    conn.rx_bytes += 511
    batcher.tick(1.0)
    assert conn.marks == [] and conn.batched  # not busy enough for a mark
    conn.rx_bytes += 1024
    batcher.tick(1.001)
    conn.rx_bytes += 1100  # the same power of two: no syscall
    batcher.tick(1.002)
    conn.rx_bytes += 5000
    batcher.tick(1.003)
    assert conn.marks == [512, 2048] and conn.lowat == 2048 and len(batcher) == 1
    batcher.close()


async def test_a_pause_lowers_the_mark_at_once_and_keeps_the_watch() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER), Conn()
    batcher.watch(conn)
    conn.rx_bytes += 600
    batcher.tick(1.0)
    batcher.tick(1.001)  # nothing read: whatever waits under the mark must be read now
    assert conn.marks == [256, 1] and conn.batched
    conn.rx_bytes += 600
    batcher.tick(1.002)
    assert conn.marks == [256, 1, 256]
    batcher.close()


async def test_a_slow_connection_is_let_go_and_rests() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER, rest=0.1), Conn()
    batcher.watch(conn)
    for i in range(SLOW_TICKS - 1):
        conn.rx_bytes += 100  # busy enough to read, too slow for a mark
        batcher.tick(1.0 + i / 1000)
    assert conn.batched and len(batcher) == 1
    batcher.tick(2.0)
    assert not conn.batched and len(batcher) == 0
    assert conn.rest_until == pytest.approx(2.1)
    assert conn.marks == []  # never raised, so never lowered either
    batcher.close()


async def test_a_closed_batcher_watches_nothing() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER), Conn()
    batcher.close()
    batcher.watch(conn)
    assert len(batcher) == 0 and not conn.batched and batcher._timer is None


async def test_a_connection_that_wants_no_mark_never_gets_one() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER), Conn(lowat_want=0)
    batcher.watch(conn)
    for i in range(SLOW_TICKS):
        conn.rx_bytes += 100_000
        batcher.tick(1.0 + i / 1000)
    assert conn.marks == [] and not conn.batched


async def test_forget_drops_a_watched_connection() -> None:
    batcher, conn = ReadBatcher(asyncio.get_running_loop(), tick=NEVER), Conn()
    batcher.watch(conn)
    batcher.forget(conn)
    assert len(batcher) == 0 and not conn.batched
    conn.rx_bytes += 10_000
    batcher.tick(1.0)
    assert conn.marks == []
    batcher.close()


# -- a real daemon ---------------------------------------------------------------------------
pytestmark = pytest.mark.both_loops


def _unread(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue (FIONREAD)."""
    raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", raw)[0])


def _subscriber(nsqd: NSQD) -> V2Connection:
    conn = next(c for c in nsqd.clients.values() if c.state.channel is not None)
    assert isinstance(conn, V2Connection)
    return conn


async def _round_trip(pub: RawV2) -> None:
    """A reply from the daemon: its loop has polled its sockets since before the call."""
    await pub.pub("other", b"x")


async def test_a_fin_under_the_mark_waits_for_the_tick_then_is_read(
    nsqd: NSQD, monkeypatch: pytest.MonkeyPatch
) -> None:
    batcher = ReadBatcher(nsqd.loop, tick=NEVER)
    monkeypatch.setattr(nsqd, "read_batcher", batcher)
    pub, sub = await RawV2.connect(nsqd.tcp_port), await RawV2.connect(nsqd.tcp_port)
    await sub.sub("t", "c", rdy=2500)
    for i in range(40):
        await pub.pub("t", b"m%d" % i)
    ids = [(await sub.message()).id for _ in range(40)]
    conn = _subscriber(nsqd)
    assert conn.lowat_want == lowat_for(2500) == 3276
    sub.send(b"".join(b"FIN %s\n" % i for i in ids[:39]))  # 819 bytes at once
    await wait_for(lambda: conn.state.finish_count == 39)
    assert conn.batched
    batcher.tick(nsqd.loop.time())
    assert conn.lowat == 256  # busy since the watch began: raised to half of that
    server_sock = conn._sock
    assert server_sock is not None
    sub.send(b"FIN %s\n" % ids[39])  # 21 bytes, under the mark
    await wait_for(lambda: _unread(server_sock) == 21)
    await _round_trip(pub)
    assert conn.state.finish_count == 39  # the kernel did not call it readable
    batcher.tick(nsqd.loop.time())  # nothing read this tick: the mark goes back to 1
    assert conn.lowat == 1
    await wait_for(lambda: conn.state.finish_count == 40)
    assert nsqd.broker.topics["t"].channels["c"].in_flight_count == 0
    batcher.close()


async def test_a_smaller_window_lowers_the_mark_at_once(
    nsqd: NSQD, monkeypatch: pytest.MonkeyPatch
) -> None:
    batcher = ReadBatcher(nsqd.loop, tick=NEVER)
    monkeypatch.setattr(nsqd, "read_batcher", batcher)
    sub = await RawV2.connect(nsqd.tcp_port)
    await sub.sub("t", "c", rdy=2500)
    await wait_for(lambda: bool(nsqd.clients) and _subscriber(nsqd).lowat_want == 3276)
    conn = _subscriber(nsqd)
    sub.send(b"NOP\n" * 150)  # 600 bytes: watched, and busy enough for a mark
    await wait_for(lambda: conn.rx_bytes == 600)
    batcher.tick(nsqd.loop.time())
    assert conn.lowat == 256
    sub.send(b"RDY 160\n" + b"NOP\n" * 130)  # 528 bytes: over the mark, read at once
    await wait_for(lambda: conn.state.rdy == 160)
    # 256 is over the new window's highest: lowered at once, no tick needed
    assert conn.lowat_want == lowat_for(160) == 210 and conn.lowat == 210
    sub.send(b"RDY 1\n" + b"NOP\n" * 60)  # 246 bytes: over 210
    await wait_for(lambda: conn.state.rdy == 1)
    assert conn.lowat_want == 0 and conn.lowat == 1  # RDY 1 never waits under a mark
    batcher.tick(nsqd.loop.time())
    batcher.tick(nsqd.loop.time())
    assert conn.lowat == 1
    batcher.close()


async def test_a_busy_consumer_is_watched_by_the_daemons_own_ticks(nsqd: NSQD) -> None:
    """With the real tick: the watch starts on its own, and a lone FIN after a burst is
    read soon after (the mark never holds a command for long), then the timer stops."""
    pub, sub = await RawV2.connect(nsqd.tcp_port), await RawV2.connect(nsqd.tcp_port)
    await sub.sub("t", "c", rdy=2500)
    bodies = b"".join(struct.pack(">i", 1) + b"x" for _ in range(200))
    pub.cmd("MPUB t", struct.pack(">i", 200) + bodies)
    assert await pub.response() == b"OK"
    ids = [(await sub.message()).id for _ in range(200)]
    conn = _subscriber(nsqd)
    sub.send(b"".join(b"FIN %s\n" % i for i in ids[:199]))
    await wait_for(lambda: conn.state.finish_count == 199)
    sub.send(b"FIN %s\n" % ids[199])
    await wait_for(lambda: conn.state.finish_count == 200)
    await wait_for(lambda: not conn.batched)  # slow ticks let it go
    assert conn.lowat == 1 and conn.rest_until > 0 and len(nsqd.read_batcher) == 0


async def test_a_compressed_connection_never_gets_a_mark(nsqd: NSQD) -> None:
    """Deflate changes what a FIN costs in bytes: such a consumer keeps the kernel's mark."""
    sub = await RawV2.connect(nsqd.tcp_port)
    sub.cmd("IDENTIFY", b'{"feature_negotiation": true, "deflate": true, "deflate_level": 1}')
    reply = await sub.frame()
    assert b'"deflate":true' in reply.data
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    sub.send(deflate.compress(b"SUB t c\nRDY 2500\n") + deflate.flush(zlib.Z_SYNC_FLUSH))
    await wait_for(
        lambda: any(c.state.channel and c.state.rdy == 2500 for c in nsqd.clients.values())
    )
    conn = _subscriber(nsqd)
    assert lowat_for(2500) > 0 and conn.lowat_want == 0
    sub.send(deflate.compress(b"NOP\n" * 500) + deflate.flush(zlib.Z_SYNC_FLUSH))
    await wait_for(lambda: conn._last_read > 0)
    assert not conn.batched and conn.lowat == 1 and len(nsqd.read_batcher) == 0

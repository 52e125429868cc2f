"""Fixed-rate end-to-end latency: a paced writer and a timing reader.

The writer publishes ``--rate`` msg/s in ticks of ``--tick`` (1 ms): each tick is one ``PUB``
(one message per tick) or one small ``MPUB``. Tick *k* is due at ``start + k * tick``, so pacing
follows deadlines and never drifts with sleep overshoot; a late tick is sent at once (and
counted in ``late_ticks``). Acknowledgements are read in between, without waiting for each one.
Every body starts with the send time (``time.time_ns()``) and a sequence number.

The reader subscribes with a wide ``RDY``, FINs every message and records two latencies per
message, both against ``time.time_ns()`` on this machine at receipt:

- ``latencies_ns`` (reported as ``latency``): receipt minus the writer's send time in the body,
  i.e. publish to delivery, including the broker's ingress;
- ``broker_stamp``: receipt minus the timestamp nsqd put in the message frame.

It also counts duplicates (by message id and by sequence number) and, after the run, the
sequence numbers that never arrived. After ``--runfor`` the reader drains until idle, so every
published message is accounted for.

    python -m benchmarks.bench_latency --nsqd-tcp-address 127.0.0.1:4150 --rate 10000 --runfor 5s
"""

from __future__ import annotations

import argparse
import select
import socket
import struct
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event

from benchmarks import bench_reader, wire
from benchmarks.common import (
    WorkerGroup,
    WorkerResult,
    connect,
    parse_duration,
    parse_local_address,
    percentiles_ms,
)

STAMP = struct.Struct(">qq")  # send time ns, sequence number
_unpack_header = wire.FRAME_HEADER.unpack_from
_unpack_i64 = wire.I64.unpack_from
_unpack_stamp = STAMP.unpack_from
# A rate within this fraction of the target counts as achieved.
ACHIEVED_WITHIN = 0.02


@dataclass(frozen=True)
class PacedConfig:
    address: str = "127.0.0.1:4150"
    topic: str = "latency_bench"
    rate: int = 10_000
    runfor: float = 5.0
    size: int = 200
    tick: float = 0.001
    drain: float = 0.0

    @property
    def per_tick(self) -> int:
        return max(1, round(self.rate * self.tick))

    @property
    def tick_s(self) -> float:
        """The tick length that gives ``rate`` with ``per_tick`` messages per tick."""
        return self.per_tick / self.rate


@dataclass(frozen=True)
class LatencyConfig:
    address: str = "127.0.0.1:4150"
    topic: str = "latency_bench"
    channel: str = "ch"
    runfor: float = 5.0
    rdy: int = 2500
    drain: float = 10.0  # bounded untimed drain after --runfor, until idle for drain_idle
    drain_idle: float = 1.0


# --- the paced writer --------------------------------------------------------------------------


def encode_tick(cfg: PacedConfig, seq: int, pad: bytes) -> bytes:
    """One tick's command: PUB for a single message, else MPUB; stamped with the send time."""
    now = time.time_ns()
    if cfg.per_tick == 1:
        return wire.pub(cfg.topic, STAMP.pack(now, seq) + pad)
    bodies = [STAMP.pack(now, seq + i) + pad for i in range(cfg.per_tick)]
    parts = [wire.U32.pack(len(b)) + b for b in bodies]
    payload = wire.U32.pack(len(bodies)) + b"".join(parts)
    return b"MPUB " + cfg.topic.encode() + b"\n" + wire.U32.pack(len(payload)) + payload


class _Acks:
    """Counts OKs without blocking longer than asked."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frames = wire.FrameReader(1 << 16)

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` for the socket; return how many commands were acknowledged."""
        readable, _, _ = select.select([self.sock], [], [], max(timeout, 0.0))
        if not readable:
            return 0
        if not self.frames.recv(self.sock):
            raise wire.ProtocolError("connection closed by broker")
        acked = 0
        for frame_type, data in self.frames.frames():
            if frame_type == wire.FRAME_RESPONSE and data == wire.OK:
                acked += 1
            elif frame_type == wire.FRAME_RESPONSE and data == wire.HEARTBEAT:
                self.sock.sendall(wire.NOP)
            else:
                raise wire.ProtocolError(f"publish: frame type {frame_type}: {data[:200]!r}")
        return acked


def pace(cfg: PacedConfig, sock: socket.socket, result: WorkerResult) -> None:
    """Send tick after tick on deadlines until --runfor is over, then collect the last acks."""
    pad = wire.make_body(max(cfg.size - STAMP.size, 0))
    acks = _Acks(sock)
    tick, per_tick = cfg.tick_s, cfg.per_tick
    ticks = max(1, round(cfg.runfor / tick))
    sent = acked = late = 0
    result.start = time.monotonic()
    while sent < ticks:
        due = result.start + sent * tick
        now = time.monotonic()
        if now < due:
            acked += acks.poll(due - now)
            continue
        if now - due > tick:
            late += 1
        sock.sendall(encode_tick(cfg, sent * per_tick, pad))
        sent += 1
    result.end = max(time.monotonic(), result.start + ticks * tick)  # the window, not last send
    give_up = result.end + 10.0
    while acked < sent and time.monotonic() < give_up:
        acked += acks.poll(0.2)
    result.msgs = acked * per_tick
    result.counters.update(published=acked * per_tick, unacked=(sent - acked) * per_tick)
    result.counters["late_ticks"] = late


def run_paced(cfg: PacedConfig, index: int, ready: Callable[[], None], go: Event) -> WorkerResult:
    """The paced writer process (a single one: sequence numbers are per writer)."""
    result = WorkerResult()
    with connect(cfg.address) as sock:
        sock.sendall(wire.MAGIC_V2)
        ready()
        if not go.wait(timeout=60.0):
            result.error = "paced writer: start signal never came"
            return result
        try:
            pace(cfg, sock, result)
        except (OSError, wire.ProtocolError) as exc:
            result.error = f"paced writer: {type(exc).__name__}: {exc}"
            result.end = time.monotonic()
    return result


# --- the timing reader -------------------------------------------------------------------------


class _Seen:
    """Latency samples, duplicates and the sequence numbers received."""

    def __init__(self) -> None:
        self.e2e: array[int] = array("q")
        self.stamp: array[int] = array("q")
        self.ids: set[bytes] = set()
        self.seqs: set[int] = set()
        self.dup_ids = 0
        self.dup_seqs = 0

    def scan(self, reader: wire.FrameReader, ids: list[bytes]) -> None:
        now_ns = time.time_ns()
        buf, pos, end = reader.buf, reader.start, reader.end
        while end - pos >= wire.HEADER_LEN:
            size, frame_type = _unpack_header(buf, pos)
            nxt = pos + 4 + size
            if nxt > end:
                break
            if frame_type == wire.FRAME_MESSAGE:
                self.message(buf, pos, now_ns, ids)
            elif frame_type == wire.FRAME_ERROR:
                raise wire.ProtocolError(f"broker error: {bytes(buf[pos + 8 : nxt])[:200]!r}")
            elif bytes(buf[pos + 8 : nxt]) == wire.HEARTBEAT:
                ids.append(b"")  # marker: answer with NOP
            pos = nxt
        reader.start = pos

    def message(self, buf: bytearray, pos: int, now_ns: int, ids: list[bytes]) -> None:
        msg_id = bytes(buf[pos + wire.ID_AT : pos + wire.ID_AT + wire.ID_LEN])
        sent_ns, seq = _unpack_stamp(buf, pos + wire.BODY_AT)
        self.e2e.append(now_ns - sent_ns)
        self.stamp.append(now_ns - _unpack_i64(buf, pos + wire.TIMESTAMP_AT)[0])
        if msg_id in self.ids:
            self.dup_ids += 1
        self.ids.add(msg_id)
        if seq in self.seqs:
            self.dup_seqs += 1
        self.seqs.add(seq)
        ids.append(msg_id)


def _reply(sock: socket.socket, ids: list[bytes]) -> int:
    """FIN the messages (and NOP the heartbeats) in ``ids``; return the message count."""
    fins = [i for i in ids if i]
    out = b"".join(wire.fin(i) for i in fins) + wire.NOP * (len(ids) - len(fins))
    if out:
        sock.sendall(out)
    ids.clear()
    return len(fins)


def time_messages(cfg: LatencyConfig, sock: socket.socket, result: WorkerResult) -> _Seen:
    """Receive and FIN for --runfor, then drain until idle (bounded by cfg.drain)."""
    seen, frames = _Seen(), wire.FrameReader(1 << 20)
    ids: list[bytes] = []
    sock.sendall(wire.rdy(cfg.rdy))
    result.start = last = now = time.monotonic()
    deadline, stop = result.start + cfg.runfor, result.start + cfg.runfor + cfg.drain
    tail = 0
    while now < stop and not (now >= deadline and now - max(last, deadline) >= cfg.drain_idle):
        readable, _, _ = select.select([sock], [], [], 0.1)
        now = time.monotonic()
        if not readable:
            continue
        if not frames.recv(sock):
            raise wire.ProtocolError("connection closed by broker")
        seen.scan(frames, ids)
        n = _reply(sock, ids)
        if n:
            last = now
            if now < deadline:
                result.msgs += n
            else:
                tail += n
    result.end = min(now, deadline)
    result.counters.update(tail_msgs=tail, dup_ids=seen.dup_ids, dup_seqs=seen.dup_seqs)
    result.counters["unique_seqs"] = len(seen.seqs)
    return seen


def run_timing_reader(
    cfg: LatencyConfig, index: int, ready: Callable[[], None], go: Event
) -> WorkerResult:
    """The reader process: SUB, wait for the start signal, time every message."""
    result = WorkerResult()
    with connect(cfg.address) as sock:
        frames = wire.FrameReader(1 << 12)
        sock.sendall(wire.MAGIC_V2 + wire.sub(cfg.topic, cfg.channel))
        wire.expect_ok(sock, frames, "SUB")
        ready()
        if not go.wait(timeout=60.0):
            result.error = "latency reader: start signal never came"
            return result
        try:
            seen = time_messages(cfg, sock, result)
        except (OSError, wire.ProtocolError) as exc:
            result.error = f"latency reader: {type(exc).__name__}: {exc}"
            result.end = result.end or time.monotonic()
            return result
    result.latencies_ns = seen.e2e.tobytes()
    result.samples["broker_stamp"] = seen.stamp.tobytes()
    return result


def achieved(rate: int, measured: float) -> bool:
    return measured >= rate * (1 - ACHIEVED_WITHIN)


# --- standalone use ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="latency_bench")
    parser.add_argument("--channel", default="ch")
    parser.add_argument("--rate", type=int, default=10_000, help="messages per second")
    parser.add_argument("--size", type=int, default=200, help="message size (>= 16)")
    parser.add_argument("--runfor", default="5s")
    parser.add_argument("--rdy", type=int, default=2500)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parse_local_address(args.nsqd_tcp_address)
    runfor = parse_duration(args.runfor)
    if not 1 <= args.rate <= 1_000_000 or args.size < STAMP.size:
        print("--rate must be 1..1000000 and --size at least 16", file=sys.stderr)
        return 2
    address, topic = args.nsqd_tcp_address, args.topic
    reader = LatencyConfig(address, topic, args.channel, runfor, args.rdy)
    writer = PacedConfig(address, topic, args.rate, runfor, args.size)
    groups = [
        WorkerGroup(run_timing_reader, reader, 1, args.size),
        WorkerGroup(run_paced, writer, 1, args.size),
    ]
    for group in groups:  # the reader first: its SUB must exist before messages flow
        group.start()
        group.wait_ready()
    for group in groups:
        group.go_event.set()
    out, into = (g.collect(runfor + reader.drain + 15) for g in groups)
    hit = achieved(args.rate, into.ops_per_s)
    print(f"in: {into.nsq_line()} (target {args.rate}/s, achieved: {hit})")
    print(f"out: {out.nsq_line()} {out.counters}")
    print(bench_reader.format_latency(out.latency_percentiles_ms()))
    stamp = out.samples.get("broker_stamp")
    if stamp:
        print(bench_reader.format_latency(percentiles_ms(stamp), "broker-stamp latency"))
    return 1 if into.errors or out.errors else 0


if __name__ == "__main__":
    sys.exit(main())

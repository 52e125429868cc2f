"""SUB/RDY/FIN load generator: the same knobs and output line as NSQ's bench_reader.

Each connection (its own process) subscribes, opens a window of ``--rdy`` messages and answers
every message with ``FIN``. The FINs for everything one ``recv`` returned go out in one write, so
the reader costs a slice and a list append per message. ``--latency`` adds end-to-end latency
percentiles from the timestamp the broker stamped on each message.

    python -m benchmarks.bench_reader --nsqd-tcp-address 127.0.0.1:4150 --topic sub_bench \\
        --channel ch --size 200 --runfor 10s --connections 2 --rdy 2500
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event

from benchmarks import wire
from benchmarks.common import (
    WorkerGroup,
    WorkerResult,
    connect,
    parse_duration,
    parse_local_address,
    run_group,
)

_unpack_header = wire.FRAME_HEADER.unpack_from
_unpack_i64 = wire.I64.unpack_from
_ID_AT, _ID_END, _TS_AT, _HDR = wire.ID_AT, wire.ID_AT + wire.ID_LEN, wire.TIMESTAMP_AT, 8
# Wake up this often while idle to check the deadline.
_POLL_S = 0.2


@dataclass(frozen=True)
class ReaderConfig:
    address: str = "127.0.0.1:4150"
    topic: str = "sub_bench"
    channel: str = "ch"
    size: int = 200
    runfor: float = 10.0
    rdy: int = 2500
    identify: bool = False
    latency: bool = False
    # Stop once no message came for this long (after the first one); 0 = run the full --runfor.
    idle_exit: float = 0.0


Control = list[tuple[int, bytes]]


def scan(reader: wire.FrameReader, ids: list[bytearray], control: Control) -> None:
    """Collect message ids and non-message frames from the complete frames in ``reader``."""
    buf, pos, end = reader.buf, reader.start, reader.end
    while end - pos >= _HDR:
        size, frame_type = _unpack_header(buf, pos)
        nxt = pos + 4 + size
        if nxt > end:
            break
        if frame_type == 2:
            ids.append(buf[pos + _ID_AT : pos + _ID_END])
        else:
            control.append((frame_type, bytes(buf[pos + _HDR : nxt])))
        pos = nxt
    reader.start = pos


def scan_timed(
    reader: wire.FrameReader, ids: list[bytearray], control: Control, lat: array[int]
) -> None:
    """``scan`` plus one end-to-end latency sample per message (now minus its timestamp)."""
    now_ns = time.time_ns()
    buf, pos, end = reader.buf, reader.start, reader.end
    while end - pos >= _HDR:
        size, frame_type = _unpack_header(buf, pos)
        nxt = pos + 4 + size
        if nxt > end:
            break
        if frame_type == 2:
            ids.append(buf[pos + _ID_AT : pos + _ID_END])
            lat.append(now_ns - _unpack_i64(buf, pos + _TS_AT)[0])
        else:
            control.append((frame_type, bytes(buf[pos + _HDR : nxt])))
        pos = nxt
    reader.start = pos


def handle_control(sock: socket.socket, control: Control) -> None:
    for frame_type, data in control:
        if frame_type == wire.FRAME_RESPONSE:
            if data == wire.HEARTBEAT:
                sock.sendall(wire.NOP)
        elif not data.startswith(b"E_FIN_FAILED"):  # the only error a reader may shrug off
            raise wire.ProtocolError(f"broker error: {data[:200]!r}")
    control.clear()


def handshake(cfg: ReaderConfig, sock: socket.socket, frames: wire.FrameReader) -> None:
    sock.sendall(wire.MAGIC_V2)
    if cfg.identify:
        info = {
            "feature_negotiation": False,
            "client_id": "bench_reader",
            "user_agent": "nsqpy-bench",
        }
        sock.sendall(wire.identify(info))
        wire.expect_ok(sock, frames, "IDENTIFY")
    sock.sendall(wire.sub(cfg.topic, cfg.channel))
    wire.expect_ok(sock, frames, "SUB")


def consume(
    cfg: ReaderConfig,
    sock: socket.socket,
    frames: wire.FrameReader,
    result: WorkerResult,
    lat: array[int],
) -> None:
    """Receive and FIN until the deadline (or until idle, when --idle-exit is set)."""
    ids: list[bytearray] = []
    control: Control = []
    sendall, recv = sock.sendall, frames.recv
    result.start = last = now = time.monotonic()
    deadline = result.start + cfg.runfor
    sock.settimeout(_POLL_S)
    sendall(wire.rdy(cfg.rdy))
    while now < deadline:
        if deadline - now < _POLL_S:  # do not overshoot the end of the run by a whole poll
            sock.settimeout(max(deadline - now, 0.001))
        try:
            got = recv(sock)
        except TimeoutError:
            got = -1
        now = time.monotonic()
        if got == 0:
            raise wire.ProtocolError("connection closed by broker")
        if got > 0:
            if cfg.latency:
                scan_timed(frames, ids, control, lat)
            else:
                scan(frames, ids, control)
            if ids:
                sendall(wire.fin_many(ids))
                result.msgs += len(ids)
                ids.clear()
                last = now
            if control:
                handle_control(sock, control)
        elif cfg.idle_exit and result.msgs and now - last >= cfg.idle_exit:
            result.end = last  # the backlog is drained: time it up to its last message
            return
    result.end = now


def run_connection(
    cfg: ReaderConfig, index: int, ready: Callable[[], None], go: Event
) -> WorkerResult:
    """One consuming connection: handshake, wait for the start signal, consume."""
    result = WorkerResult()
    lat: array[int] = array("q")
    with connect(cfg.address) as sock:
        frames = wire.FrameReader(4 << 20)
        handshake(cfg, sock, frames)
        ready()
        if not go.wait(timeout=60.0):
            result.error = f"connection {index}: start signal never came"
            return result
        try:
            consume(cfg, sock, frames, result, lat)
        except (OSError, wire.ProtocolError) as exc:
            # Keep what was consumed before the failure.
            result.error = f"connection {index}: {type(exc).__name__}: {exc}"
            result.end = time.monotonic()
    result.latencies_ns = lat.tobytes()
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="sub_bench")
    parser.add_argument("--channel", default="ch")
    parser.add_argument("--size", type=int, default=200, help="message size (for mb/s only)")
    parser.add_argument("--runfor", default="10s", help="how long to consume (Go duration)")
    parser.add_argument("--connections", type=int, default=2, help="one process each")
    parser.add_argument("--rdy", type=int, default=2500, help="RDY window per connection")
    parser.add_argument("--identify", action="store_true", help="send IDENTIFY before SUB")
    parser.add_argument("--latency", action="store_true", help="report e2e latency percentiles")
    parser.add_argument(
        "--idle-exit",
        default="0",
        help="stop once no message arrived for this long, timing up to the last one "
        "(e.g. 1s, for draining a backlog); 0 runs the full --runfor",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> ReaderConfig:
    parse_local_address(args.nsqd_tcp_address)
    return ReaderConfig(
        address=args.nsqd_tcp_address,
        topic=args.topic,
        channel=args.channel,
        size=args.size,
        runfor=parse_duration(args.runfor),
        rdy=args.rdy,
        identify=args.identify,
        latency=args.latency,
        idle_exit=parse_duration(args.idle_exit),
    )


def format_latency(percentiles: dict[str, float]) -> str:
    return "latency: " + " ".join(f"{k}={v:.3f}ms" for k, v in percentiles.items())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    summary = run_group(WorkerGroup(run_connection, cfg, args.connections, cfg.size), cfg.runfor)
    for error in summary.errors:
        print(f"error: {error}", file=sys.stderr)
    print(summary.nsq_line())
    if cfg.latency and summary.latencies_ns:
        print(format_latency(summary.latency_percentiles_ms()))
    return 1 if summary.errors else 0


if __name__ == "__main__":
    sys.exit(main())

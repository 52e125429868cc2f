"""MPUB load generator: the same knobs and output line as NSQ's bench_writer.

Each connection (its own process) sends one pre-encoded MPUB batch after another and reads the
``OK`` for each. ``--pipeline`` bounds how many batches may be unacknowledged at once; the default
of 1 is a strict request/response loop, like NSQ's own tool, so the numbers are comparable.
With ``WriterConfig.topics`` the batches go round-robin over those topics (one pre-encoded batch
per topic), which is how the runner loads 100 topics.

    python -m benchmarks.bench_writer --nsqd-tcp-address 127.0.0.1:4150 --topic sub_bench \\
        --size 200 --batch-size 200 --runfor 10s --connections 2
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
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


@dataclass(frozen=True)
class WriterConfig:
    address: str = "127.0.0.1:4150"
    topic: str = "sub_bench"
    size: int = 200
    batch_size: int = 200
    runfor: float = 10.0
    pipeline: int = 1
    topics: tuple[str, ...] = ()  # round-robin over these instead of `topic`
    drain: float = 0.0  # writers have no tail; the field keeps the configs interchangeable


class _AckReader:
    """Counts ``OK`` frames; answers heartbeats; turns error frames into exceptions."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frames = wire.FrameReader(1 << 16)

    def wait(self) -> int:
        """Block until at least one batch is acknowledged; return how many were."""
        acked = 0
        while not acked:
            if not self.frames.recv(self.sock):
                raise wire.ProtocolError("connection closed by broker")
            for frame_type, data in self.frames.frames():
                if frame_type == wire.FRAME_RESPONSE and data == wire.OK:
                    acked += 1
                elif frame_type == wire.FRAME_RESPONSE and data == wire.HEARTBEAT:
                    self.sock.sendall(wire.NOP)
                else:
                    raise wire.ProtocolError(f"MPUB: frame type {frame_type}: {data[:200]!r}")
        return acked


def publish(cfg: WriterConfig, sock: socket.socket, result: WorkerResult) -> None:
    """MPUB the pre-encoded batch until --runfor is over; count messages as they are acked."""
    body = wire.make_body(cfg.size)
    batches = [wire.mpub(topic, body, cfg.batch_size) for topic in cfg.topics or (cfg.topic,)]
    rounds = len(batches)
    acks = _AckReader(sock)
    sendall, limit, per_batch = sock.sendall, cfg.pipeline, cfg.batch_size
    sent = acked = 0
    result.start = time.monotonic()
    deadline = result.start + cfg.runfor
    while time.monotonic() < deadline:
        if sent - acked < limit:
            sendall(batches[sent % rounds])
            sent += 1
        else:
            n = acks.wait()
            acked += n
            result.msgs += n * per_batch
    while acked < sent:  # the broker owes us these; a published batch counts once acked
        n = acks.wait()
        acked += n
        result.msgs += n * per_batch
    result.end = time.monotonic()


def run_connection(
    cfg: WriterConfig, index: int, ready: Callable[[], None], go: Event
) -> WorkerResult:
    """One publishing connection: handshake, wait for the start signal, publish."""
    result = WorkerResult()
    with connect(cfg.address) as sock:
        sock.sendall(wire.MAGIC_V2)
        ready()
        if not go.wait(timeout=60.0):
            result.error = f"connection {index}: start signal never came"
            return result
        try:
            publish(cfg, sock, result)
        except (OSError, wire.ProtocolError) as exc:
            # Keep what was acked before the failure: it shows where the broker gave up.
            result.error = f"connection {index}: {type(exc).__name__}: {exc}"
            result.end = time.monotonic()
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="sub_bench")
    parser.add_argument("--size", type=int, default=200, help="message size in bytes")
    parser.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    parser.add_argument("--runfor", default="10s", help="how long to publish (Go duration)")
    parser.add_argument("--connections", type=int, default=2, help="one process each")
    parser.add_argument(
        "--pipeline", type=int, default=1, help="max unacknowledged MPUBs per connection (1-16)"
    )
    return parser


def config_from_args(args: argparse.Namespace) -> WriterConfig:
    parse_local_address(args.nsqd_tcp_address)
    if not 1 <= args.pipeline <= 16:
        raise ValueError("--pipeline must be between 1 and 16")
    return WriterConfig(
        address=args.nsqd_tcp_address,
        topic=args.topic,
        size=args.size,
        batch_size=args.batch_size,
        runfor=parse_duration(args.runfor),
        pipeline=args.pipeline,
    )


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
    return 1 if summary.errors else 0


if __name__ == "__main__":
    sys.exit(main())

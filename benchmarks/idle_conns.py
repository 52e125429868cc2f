"""Hold many idle V2 consumer connections open in one asyncio process.

Each connection sends the magic, ``IDENTIFY`` (feature negotiation off, a short heartbeat
interval so that heartbeats really happen during a run), ``SUB`` to an idle topic, then ``RDY 1``,
and from then on only answers heartbeats with ``NOP`` (and FINs a message, should one ever come).
Once every connection is subscribed it prints ``READY <n>`` on stdout; on SIGTERM/SIGINT (or after
``--lifetime``) it closes them all and prints one JSON line with what happened.

    python -m benchmarks.idle_conns --nsqd-tcp-address 127.0.0.1:4150 --count 1000

Connections are opened at most ``--concurrency`` at a time so the broker's listen backlog never
overflows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import cast

from benchmarks import wire
from benchmarks.common import parse_duration, parse_local_address

HEARTBEAT_MS = 2000


@dataclass
class Tally:
    """What the connections saw, summed."""

    subscribed: int = 0
    heartbeats: int = 0
    messages: int = 0
    errors: int = 0
    closed_by_broker: int = 0
    first_error: str = ""


class IdleConsumer(asyncio.Protocol):
    """One idle subscriber: handshake, then heartbeats only."""

    def __init__(self, topic: str, tally: Tally, subscribed: asyncio.Future[None]) -> None:
        self.topic = topic
        self.tally = tally
        self.subscribed = subscribed
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.oks = 0
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        info = {
            "feature_negotiation": False,
            "heartbeat_interval": HEARTBEAT_MS,
            "client_id": "idle",
            "user_agent": "nsqpy-bench-idle",
        }
        self.transport.write(wire.MAGIC_V2 + wire.identify(info))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= wire.HEADER_LEN:
            size, frame_type = wire.FRAME_HEADER.unpack_from(buf, pos)
            nxt = pos + 4 + size
            if nxt > len(buf):
                break
            self.on_frame(frame_type, bytes(buf[pos + wire.HEADER_LEN : nxt]))
            pos = nxt
        del buf[:pos]

    def on_frame(self, frame_type: int, body: bytes) -> None:
        assert self.transport is not None
        if frame_type == wire.FRAME_MESSAGE:
            self.tally.messages += 1
            self.transport.write(wire.fin(body[10 : 10 + wire.ID_LEN]))  # after ts + attempts
        elif frame_type == wire.FRAME_ERROR:
            self.fail(body.decode(errors="replace"))
        elif body == wire.HEARTBEAT:
            self.tally.heartbeats += 1
            self.transport.write(wire.NOP)
        elif body == wire.OK:
            self.oks += 1
            if self.oks == 1:
                self.transport.write(wire.sub(self.topic, "idle"))
            elif self.oks == 2:
                self.transport.write(wire.rdy(1))
                self.tally.subscribed += 1
                if not self.subscribed.done():
                    self.subscribed.set_result(None)

    def fail(self, why: str) -> None:
        self.tally.errors += 1
        self.tally.first_error = self.tally.first_error or why[:200]
        if not self.subscribed.done():
            self.subscribed.set_exception(RuntimeError(why))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self.tally.closed_by_broker += 1
            self.fail(f"connection lost: {exc}")
        self.transport = None

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


async def open_one(
    host: str, port: int, topic: str, tally: Tally, gate: asyncio.Semaphore
) -> IdleConsumer:
    loop = asyncio.get_running_loop()
    subscribed: asyncio.Future[None] = loop.create_future()
    async with gate:
        _, proto = await loop.create_connection(
            lambda: IdleConsumer(topic, tally, subscribed), host, port
        )
        await asyncio.wait_for(subscribed, timeout=30)
    return proto


async def hold(args: argparse.Namespace) -> Tally:
    host, port = parse_local_address(args.nsqd_tcp_address)
    tally = Tally()
    gate = asyncio.Semaphore(args.concurrency)
    started = time.monotonic()
    conns = await asyncio.gather(
        *(open_one(host, port, args.topic, tally, gate) for _ in range(args.count))
    )
    print(f"READY {len(conns)} {time.monotonic() - started:.2f}s", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=parse_duration(args.lifetime))
    for conn in conns:
        conn.close()
    await asyncio.sleep(0.05)  # let the transports flush their close
    return tally


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="idle_bench")
    parser.add_argument("--count", type=int, default=1000, help="connections to hold")
    parser.add_argument("--concurrency", type=int, default=64, help="handshakes at a time")
    parser.add_argument("--lifetime", default="300s", help="exit after this long at most")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.count <= 10_000:
        print("--count must be between 1 and 10000", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:
        tally = asyncio.run(hold(args))
    else:
        tally = uvloop.run(hold(args))
    print(json.dumps(asdict(tally)), flush=True)
    return 1 if tally.errors else 0


if __name__ == "__main__":
    sys.exit(main())

"""A do-nothing V2 server that shows how fast the load generators themselves can go.

It answers every body-carrying command (MPUB, PUB, DPUB, IDENTIFY) with ``OK`` without looking at
the body, answers SUB with ``OK``, and after RDY keeps the window full with pre-encoded message
frames as fast as FINs free slots. There is no topic, queue or state beyond a counter, so
``run.py --sink`` measures the generators' ceiling on this machine, not a broker.

    python -m benchmarks.sink --tcp-address 127.0.0.1:0 --size 200

Message timestamps are fixed when the frames are encoded, so latency figures against the sink are
meaningless.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import signal
import sys
import time
from typing import cast

from benchmarks import wire
from benchmarks.common import parse_duration, parse_local_address

_BODY_COMMANDS = frozenset({b"MPUB", b"PUB", b"DPUB", b"IDENTIFY", b"AUTH"})
_FRAMES_PER_BLOCK = 1024


def encode_block(size: int, count: int = _FRAMES_PER_BLOCK) -> bytes:
    """``count`` message frames back to back, each with its own id."""
    body = wire.make_body(size)
    now = time.time_ns()
    return b"".join(wire.message_frame(now, 1, b"%016x" % i, body) for i in range(count))


class SinkConnection(asyncio.Protocol):
    """One client. Parsing skips bodies without buffering them; replies are coalesced per read."""

    def __init__(self, block: bytes, frame_len: int) -> None:
        self.block = block
        self.frame_len = frame_len
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.out = bytearray()
        self.magic_seen = False
        self.body_for: bytes | None = None  # command whose [size][body] comes next
        self.skip = 0  # body bytes still to discard
        self.subscribed = False
        self.rdy = 0
        self.in_flight = 0
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=8 << 20)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def data_received(self, data: bytes) -> None:
        if self.skip:
            if len(data) <= self.skip:
                self.skip -= len(data)
                if not self.skip:
                    self.body_done()
                self.flush()
                return
            data = data[self.skip :]
            self.skip = 0
            self.body_done()
        self.buf += data
        if not (self.subscribed and self.body_for is None and self.fast_fins()):
            self.parse()
        self.flush()

    def fast_fins(self) -> bool:
        """When every complete line is a FIN, account for them with two C-level counts."""
        buf = self.buf
        end = buf.rfind(b"\n") + 1
        if not end:
            return True
        fins = buf.count(b"FIN ", 0, end)
        if fins != buf.count(b"\n", 0, end):
            return False
        self.in_flight = max(self.in_flight - fins, 0)
        del buf[:end]
        return True

    def parse(self) -> None:
        buf, pos = self.buf, 0
        if not self.magic_seen:
            if len(buf) < 4:
                return
            if buf[:4] != wire.MAGIC_V2:
                self.out += wire.frame(wire.FRAME_ERROR, b"E_BAD_PROTOCOL")
                self.close()
                return
            self.magic_seen, pos = True, 4
        while pos < len(buf) and self.transport is not None:
            if self.body_for is not None:
                pos, complete = self.take_body(pos)
                if not complete:
                    break
                continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            self.command(bytes(buf[pos:nl]).rstrip(b"\r"))
            pos = nl + 1
        del buf[:pos]

    def take_body(self, pos: int) -> tuple[int, bool]:
        """Consume ``[size][body]`` at ``pos``; the part of a body not yet received is skipped
        as it arrives. Returns the new position and whether the body is complete."""
        buf = self.buf
        if len(buf) - pos < 4:
            return pos, False
        size: int = wire.U32.unpack_from(buf, pos)[0]
        pos += 4
        available = len(buf) - pos
        if available >= size:
            self.body_done()
            return pos + size, True
        self.skip = size - available
        return len(buf), False

    def body_done(self) -> None:
        self.body_for = None
        self.out += wire.OK_FRAME

    def command(self, line: bytes) -> None:
        name, _, arg = line.partition(b" ")
        if name in _BODY_COMMANDS:
            self.body_for = name
        elif name == b"FIN":
            self.in_flight = max(self.in_flight - 1, 0)
        elif name == b"RDY":
            self.rdy = int(arg or b"1")
        elif name == b"SUB":
            self.subscribed = True
            self.out += wire.OK_FRAME
        elif name == b"CLS":
            self.rdy = 0
            self.out += wire.frame(wire.FRAME_RESPONSE, b"CLOSE_WAIT")
        elif name not in (b"NOP", b"REQ", b"TOUCH"):
            self.out += wire.frame(wire.FRAME_ERROR, b"E_INVALID invalid command " + name)
            self.close()

    def flush(self) -> None:
        if self.out and self.transport is not None:
            self.transport.write(bytes(self.out))
            self.out.clear()
        self.pump()

    def pump(self) -> None:
        """Top the client's window up with pre-encoded frames."""
        window = self.rdy - self.in_flight
        if window <= 0 or self.paused or self.transport is None or not self.subscribed:
            return
        self.in_flight += window
        write, block = self.transport.write, self.block
        while window >= _FRAMES_PER_BLOCK:
            write(block)
            window -= _FRAMES_PER_BLOCK
        if window:
            write(block[: window * self.frame_len])

    def close(self) -> None:
        if self.transport is not None:
            if self.out:
                self.transport.write(bytes(self.out))
                self.out.clear()
            self.transport.close()
            self.transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(address: str, size: int, lifetime: float) -> None:
    host, port = parse_local_address(address)
    block = encode_block(size)
    frame_len = len(block) // _FRAMES_PER_BLOCK
    loop = asyncio.get_running_loop()
    factory = functools.partial(SinkConnection, block, frame_len)
    server = await loop.create_server(factory, host, port, backlog=128)
    bound = server.sockets[0].getsockname()
    print(f"[sink] INFO: TCP: listening on {bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=lifetime or None)
    print("[sink] INFO: exiting", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--size", type=int, default=200, help="body size of served messages")
    parser.add_argument(
        "--lifetime", default="0", help="exit after this long (Go duration); 0 = until signalled"
    )
    args = parser.parse_args(argv)
    coro = serve(args.tcp_address, args.size, parse_duration(args.lifetime))
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SUB/RDY/FIN load generator: the same knobs and output line as NSQ's bench_reader.

Each reader process subscribes, opens a window of ``--rdy`` messages and answers every message
with ``FIN``. The FINs for everything one ``recv`` returned go out in one write, so the reader
costs a slice and a list append per message. ``--latency`` adds end-to-end latency percentiles
from the timestamp the broker stamped on each message.

A process may hold several subscriptions (``ReaderConfig.subscriptions``, spread over the
processes by index): one socket each, multiplexed with ``selectors``. That is how the runner
reads 4 channels or 100 topics with 2 processes.

After ``--runfor`` comes an untimed tail whose messages are counted separately (``tail_msgs``):
with ``drain`` the readers keep their window open until nothing came for ``drain_idle`` (so a
run can check that every published message arrived), otherwise they send ``RDY 0`` and FIN what
is already on its way, so no message is left in flight when they close.

    python -m benchmarks.bench_reader --nsqd-tcp-address 127.0.0.1:4150 --topic sub_bench \\
        --channel ch --size 200 --runfor 10s --connections 2 --rdy 2500
"""

from __future__ import annotations

import argparse
import selectors
import socket
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
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
# Without drain: after RDY 0, stop once nothing arrived for this long (at most _TAIL_CAP_S).
_TAIL_IDLE_S = 0.2
_TAIL_CAP_S = 2.0


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
    # Untimed drain after --runfor: keep RDY open for at most this long, until nothing came for
    # drain_idle; 0 = send RDY 0 and only collect what is already in flight.
    drain: float = 0.0
    drain_idle: float = 1.0
    # (topic, channel) pairs spread over `processes` reader processes; empty = (topic, channel).
    subscriptions: tuple[tuple[str, str], ...] = field(default=())
    processes: int = 1

    def mine(self, index: int) -> tuple[tuple[str, str], ...]:
        """The subscriptions reader process ``index`` holds: every processes-th one, and with
        fewer subscriptions than processes, the same ones again (2 readers on 1 channel)."""
        if not self.subscriptions:
            return ((self.topic, self.channel),)
        subs = self.subscriptions
        count = max(len(subs), self.processes)
        return tuple(subs[i % len(subs)] for i in range(index, count, self.processes))


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


def handshake(
    cfg: ReaderConfig, sock: socket.socket, frames: wire.FrameReader, topic: str, channel: str
) -> None:
    sock.sendall(wire.MAGIC_V2)
    if cfg.identify:
        info = {
            "feature_negotiation": False,
            "client_id": "bench_reader",
            "user_agent": "nsqpy-bench",
        }
        sock.sendall(wire.identify(info))
        wire.expect_ok(sock, frames, "IDENTIFY")
    sock.sendall(wire.sub(topic, channel))
    wire.expect_ok(sock, frames, "SUB")


@dataclass
class _Conn:
    sock: socket.socket
    frames: wire.FrameReader


class _Clock:
    """The timed window, then the untimed tail; decides when the reader is done."""

    def __init__(self, cfg: ReaderConfig, start: float) -> None:
        self.cfg = cfg
        self.deadline = start + cfg.runfor
        self.last = start  # time of the last message
        self.tail_from = 0.0  # 0 while the window is still timed

    def timeout(self, now: float) -> float:
        if self.tail_from:
            return _POLL_S
        return max(min(_POLL_S, self.deadline - now), 0.001)

    def window_over(self, now: float, msgs: int) -> bool:
        if now >= self.deadline:
            return True
        idle = self.cfg.idle_exit
        return bool(idle and msgs and now - self.last >= idle)

    def tail_over(self, now: float) -> bool:
        drain = self.cfg.drain
        idle = self.cfg.drain_idle if drain else _TAIL_IDLE_S
        cap = drain if drain else _TAIL_CAP_S
        return now - self.tail_from >= cap or now - max(self.last, self.tail_from) >= idle


def _receive(
    conn: _Conn, cfg: ReaderConfig, ids: list[bytearray], control: Control, lat: array[int]
) -> int:
    """Read once from ``conn``, FIN every message that completed; the number of messages."""
    try:
        got = conn.frames.recv(conn.sock)
    except TimeoutError:  # only the single-connection path reads without select
        return 0
    if not got:
        raise wire.ProtocolError("connection closed by broker")
    if cfg.latency:
        scan_timed(conn.frames, ids, control, lat)
    else:
        scan(conn.frames, ids, control)
    n = len(ids)
    if n:
        conn.sock.sendall(wire.fin_many(ids))
        ids.clear()
    if control:
        handle_control(conn.sock, control)
    return n


class _Waiter:
    """Which connections to read next: select() over many, or a timed recv on a single one."""

    def __init__(self, conns: list[_Conn]) -> None:
        self.conns = conns
        self.timeout = -1.0
        self.selector: selectors.BaseSelector | None = None
        if len(conns) > 1:
            self.selector = selectors.DefaultSelector()
            for conn in conns:
                self.selector.register(conn.sock, selectors.EVENT_READ, conn)

    def wait(self, timeout: float) -> list[_Conn]:
        if self.selector is not None:
            return [key.data for key, _ in self.selector.select(timeout)]
        if timeout != self.timeout:  # the blocking recv itself waits, up to this long
            self.timeout = timeout
            self.conns[0].sock.settimeout(timeout)
        return self.conns

    def close(self) -> None:
        if self.selector is not None:
            self.selector.close()


def _end_window(cfg: ReaderConfig, conns: list[_Conn], clock: _Clock, now: float) -> float:
    """Close the timed window; without drain, stop the flow. Returns the window's end time."""
    timed_out = now >= clock.deadline
    clock.tail_from = now
    if not cfg.drain:
        for conn in conns:
            conn.sock.sendall(wire.rdy(0))
    return now if timed_out else clock.last  # an idle exit times up to its last message


def consume(cfg: ReaderConfig, conns: list[_Conn], result: WorkerResult, lat: array[int]) -> None:
    """Receive and FIN until the window is over, then through the tail (see module docstring)."""
    ids: list[bytearray] = []
    control: Control = []
    tail = 0
    waiter = _Waiter(conns)
    result.start = now = time.monotonic()
    clock = _Clock(cfg, result.start)
    for conn in conns:
        conn.sock.sendall(wire.rdy(cfg.rdy))
    try:
        while True:
            if not clock.tail_from and clock.window_over(now, result.msgs):
                result.end = _end_window(cfg, conns, clock, now)
            if clock.tail_from and clock.tail_over(now):
                break
            ready = waiter.wait(clock.timeout(now))
            n = sum(_receive(conn, cfg, ids, control, lat) for conn in ready)
            now = time.monotonic()
            if n:
                clock.last = now
                if clock.tail_from:
                    tail += n
                else:
                    result.msgs += n
    finally:
        waiter.close()
    result.counters["tail_msgs"] = tail


def open_subscriptions(cfg: ReaderConfig, index: int) -> list[_Conn]:
    conns: list[_Conn] = []
    mine = cfg.mine(index)
    if not mine:
        raise ValueError(f"reader {index} has no subscription (processes={cfg.processes})")
    try:
        for topic, channel in mine:
            conn = _Conn(connect(cfg.address), wire.FrameReader(4 << 20))
            conns.append(conn)
            handshake(cfg, conn.sock, conn.frames, topic, channel)
    except BaseException:
        close_all(conns)
        raise
    return conns


def close_all(conns: list[_Conn]) -> None:
    for conn in conns:
        conn.sock.close()


def run_connection(
    cfg: ReaderConfig, index: int, ready: Callable[[], None], go: Event
) -> WorkerResult:
    """One reader process: handshake(s), wait for the start signal, consume."""
    result = WorkerResult()
    lat: array[int] = array("q")
    conns = open_subscriptions(cfg, index)
    try:
        ready()
        if not go.wait(timeout=60.0):
            result.error = f"reader {index}: start signal never came"
            return result
        try:
            consume(cfg, conns, result, lat)
        except (OSError, wire.ProtocolError) as exc:
            # Keep what was consumed before the failure.
            result.error = f"reader {index}: {type(exc).__name__}: {exc}"
            result.end = result.end or time.monotonic()
    finally:
        close_all(conns)
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


def format_latency(percentiles: dict[str, float], name: str = "latency") -> str:
    shown = " ".join(f"{k}={v:.3f}ms" for k, v in percentiles.items() if k != "count")
    return f"{name}: {shown}"


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

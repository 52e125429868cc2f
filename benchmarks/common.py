"""Shared plumbing: flag parsing, one-process-per-connection fan-out, and NSQ-style reporting.

Each connection runs in its own process (the generators are CPU-bound Python and the GIL would
otherwise serialise them). Workers connect and finish their handshake first, report ``ready``,
then wait for a common start event so that setup cost never lands inside the measured window.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import re
import socket
import statistics
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|s|m|h)")
_UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_LOCAL_HOSTS = {"127.0.0.1", "localhost"}

# Extra time a worker may take beyond --runfor: finishing the last batch, draining acks.
WORKER_GRACE_S = 15.0
SETUP_TIMEOUT_S = 15.0


def parse_duration(text: str) -> float:
    """Seconds from a Go-style duration such as ``10s``, ``500ms``, ``1m30s`` or a bare number."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def parse_local_address(text: str) -> tuple[str, int]:
    """``host:port`` restricted to the loopback interface: these tools never load other hosts."""
    host, _, port = text.rpartition(":")
    if host not in _LOCAL_HOSTS:
        raise ValueError(f"{text!r}: only 127.0.0.1 is allowed as a benchmark target")
    return "127.0.0.1", int(port)


def connect(address: str, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(parse_local_address(address), timeout=timeout)
    # Small command lines (FIN, RDY) must not wait behind Nagle's algorithm.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    return sock


@dataclass
class WorkerResult:
    """What one connection reports back to the parent."""

    msgs: int = 0
    start: float = 0.0  # time.monotonic(), comparable across processes on Linux
    end: float = 0.0
    error: str | None = None
    latencies_ns: bytes = b""  # array('q') of end-to-end latencies, when requested
    # Named counts summed over connections (e.g. tail_msgs, duplicates, published).
    counters: dict[str, int] = field(default_factory=dict)
    # Named array('q') samples concatenated over connections (e.g. broker-stamp latencies).
    samples: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Summary:
    """All connections of one generator, folded together."""

    msgs: int
    duration: float
    msg_size: int
    errors: list[str] = field(default_factory=list)
    latencies_ns: array[int] = field(default_factory=lambda: array("q"))
    counters: dict[str, int] = field(default_factory=dict)
    samples: dict[str, array[int]] = field(default_factory=dict)

    @property
    def ops_per_s(self) -> float:
        return self.msgs / self.duration if self.duration > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.ops_per_s * self.msg_size / (1024 * 1024)

    def nsq_line(self) -> str:
        """The line NSQ's bench_writer/bench_reader print, field for field."""
        us_per_op = self.duration * 1e6 / self.msgs if self.msgs else 0.0
        return (
            f"duration: {self.duration:.3f}s - {self.mib_per_s:.3f}mb/s - "
            f"{self.ops_per_s:.3f}ops/s - {us_per_op:.3f}us/op"
        )

    def latency_percentiles_ms(self) -> dict[str, float]:
        return percentiles_ms(self.latencies_ns)

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "msgs": self.msgs,
            "duration_s": round(self.duration, 6),
            "msgs_per_s": round(self.ops_per_s, 3),
            "mib_per_s": round(self.mib_per_s, 3),
            "errors": self.errors,
            "latency_ms": self.latency_percentiles_ms(),
        }
        if self.counters:
            doc["counters"] = dict(self.counters)
        for name, values in self.samples.items():
            doc[f"{name}_ms"] = percentiles_ms(values)
        return doc


def percentiles_ms(values_ns: array[int]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max in milliseconds of nanosecond samples ({} when there are none)."""
    if not values_ns:
        return {}
    ordered = sorted(values_ns)
    if len(ordered) == 1:
        only = ordered[0] / 1e6
        return {"p50": only, "p90": only, "p99": only, "p99.9": only, "max": only, "count": 1}
    cuts = statistics.quantiles(ordered, n=1000, method="inclusive")

    def at(per_mille: int) -> float:
        return round(cuts[per_mille - 1] / 1e6, 4)

    return {
        "p50": at(500),
        "p90": at(900),
        "p99": at(990),
        "p99.9": at(999),
        "max": round(ordered[-1] / 1e6, 4),
        "count": len(ordered),
    }


# A connection function: (config, index, announce_ready, start event) -> result.
ConnectionFn = Callable[[Any, int, Callable[[], None], Event], WorkerResult]


def worker_main(
    fn: ConnectionFn,
    cfg: Any,
    index: int,
    ready_q: mp.Queue[Any],
    go: Event,
    result_q: mp.Queue[Any],
) -> None:
    """Process entry: run ``fn`` and always send back exactly one result."""

    announced = False

    def announce_ready() -> None:
        nonlocal announced
        announced = True
        ready_q.put(index)

    try:
        result = fn(cfg, index, announce_ready, go)
    except Exception as exc:  # noqa: BLE001 - any failure must reach the parent, not hang it
        result = WorkerResult(error=f"connection {index}: {type(exc).__name__}: {exc}")
        if not announced:
            announce_ready()  # a failed setup must not leave wait_ready blocking
    result_q.put((index, result))


class WorkerGroup:
    """N processes running the same connection function against one broker."""

    def __init__(
        self,
        fn: ConnectionFn,
        cfg: Any,
        connections: int,
        msg_size: int,
    ) -> None:
        # spawn, not fork: the runner has a thread reading the broker's stderr.
        self._ctx = mp.get_context("spawn")
        self._ready: mp.Queue[Any] = self._ctx.Queue()
        self._results: mp.Queue[Any] = self._ctx.Queue()
        self.go_event = self._ctx.Event()
        self._msg_size = msg_size
        self._procs = [
            self._ctx.Process(
                target=worker_main,
                args=(fn, cfg, i, self._ready, self.go_event, self._results),
                daemon=True,
            )
            for i in range(connections)
        ]

    def start(self) -> None:
        for proc in self._procs:
            proc.start()

    def wait_ready(self, timeout: float = SETUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        for _ in self._procs:
            remaining = deadline - time.monotonic()
            try:
                self._ready.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                self.terminate()
                raise TimeoutError("workers did not finish connection setup in time") from None

    def collect(self, timeout: float) -> Summary:
        deadline = time.monotonic() + timeout
        results: list[WorkerResult] = []
        errors: list[str] = []
        for _ in self._procs:
            remaining = deadline - time.monotonic()
            try:
                _, result = self._results.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                errors.append("a worker did not report before its deadline")
                break
            results.append(result)
        self.terminate()
        return fold(results, self._msg_size, errors)

    def terminate(self) -> None:
        for proc in self._procs:
            proc.join(timeout=2.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=2.0)


def fold(results: list[WorkerResult], msg_size: int, errors: list[str]) -> Summary:
    """Combine per-connection results: total messages over the union of their run windows."""
    errors = errors + [r.error for r in results if r.error]
    timed = [r for r in results if r.end > r.start]
    duration = max(r.end for r in timed) - min(r.start for r in timed) if timed else 0.0
    latencies: array[int] = array("q")
    counters: dict[str, int] = {}
    samples: dict[str, array[int]] = {}
    for r in results:
        latencies.frombytes(r.latencies_ns)
        for name, count in r.counters.items():
            counters[name] = counters.get(name, 0) + count
        for name, raw in r.samples.items():
            samples.setdefault(name, array("q")).frombytes(raw)
    msgs = sum(r.msgs for r in results)
    return Summary(msgs, duration, msg_size, errors, latencies, counters, samples)


def run_group(group: WorkerGroup, runfor: float) -> Summary:
    """Start, synchronise and collect a single group (the standalone tools' path)."""
    group.start()
    group.wait_ready()
    group.go_event.set()
    return group.collect(runfor + WORKER_GRACE_S)

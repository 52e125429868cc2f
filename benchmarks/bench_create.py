"""How long a client waits for a SUB that creates a channel, or a PUB that creates a topic.

nsqd records every topic and channel in ``nsqd.dat``; a command that creates one must not make
its own client, nor every other client, wait for that file's fsync. This starts a broker (or
targets a running one) and measures, from one client over raw sockets:

- ``sub``: ``SUB <topic> <new channel>`` to its ``OK``, each on a connection opened beforehand;
- ``pub``: ``PUB <new topic>`` to its ``OK``, on one connection;
- ``probe``: meanwhile, a second thread's ``PUB`` to an existing topic, round trip: what every
  other client sees while topics and channels are being created.

With ``--load N`` it runs N ``bench_writer`` processes (MPUB into another topic) alongside,
the "under load" case. Medians and p90 in ms; ``--repeat`` runs the whole thing again on a
fresh broker and reports the median of the runs' medians.

    python -m benchmarks.bench_create --count 200 --load 1 --repeat 3
    python -m benchmarks.bench_create --nsqd-cmd "/path/to/nsqd"            # e.g. a Go nsqd
    python -m benchmarks.bench_create --nsqd-tcp-address 127.0.0.1:4150     # a running broker
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from benchmarks import wire
from benchmarks.common import connect
from benchmarks.run import ROOT, Broker

PREFIX = "bench_create"


def _ms(values_s: list[float]) -> dict[str, float]:
    ordered = sorted(values_s)
    return {
        "p50": round(statistics.median(ordered) * 1e3, 3),
        "p90": round(ordered[int(len(ordered) * 0.9)] * 1e3, 3),
        "max": round(ordered[-1] * 1e3, 3),
        "n": len(ordered),
    }


def _roundtrip(sock: socket.socket, reader: wire.FrameReader, command: bytes, what: str) -> float:
    start = time.perf_counter()
    sock.sendall(command)
    wire.expect_ok(sock, reader, what)
    return time.perf_counter() - start


def measure_sub(tcp: str, run: str, count: int) -> list[float]:
    """SUB to ``count`` new channels of one topic, each from a connection opened beforehand."""
    topic = f"{PREFIX}_{run}_sub"
    conns = []
    try:
        for _ in range(count):
            sock = connect(tcp)
            sock.sendall(wire.MAGIC_V2)
            conns.append((sock, wire.FrameReader(1 << 12)))
        # the topic exists already: every SUB creates a channel, never a topic
        sock, reader = conns[0]
        _roundtrip(sock, reader, wire.sub(topic, "first"), "SUB")
        return [
            _roundtrip(sock, reader, wire.sub(topic, f"c{i}"), "SUB")
            for i, (sock, reader) in enumerate(conns[1:])
        ]
    finally:
        for sock, _ in conns:
            sock.close()


def measure_pub(tcp: str, run: str, count: int) -> list[float]:
    """PUB to ``count`` new topics from one connection."""
    with connect(tcp) as sock:
        sock.sendall(wire.MAGIC_V2)
        reader = wire.FrameReader(1 << 12)
        return [
            _roundtrip(sock, reader, wire.pub(f"{PREFIX}_{run}_t{i}", b"x"), "PUB")
            for i in range(count)
        ]


class Probe(threading.Thread):
    """PUB to an existing topic, round trip after round trip, until stopped."""

    def __init__(self, tcp: str, run: str) -> None:
        super().__init__(daemon=True)
        self.sock = connect(tcp)
        self.sock.sendall(wire.MAGIC_V2)
        self.reader = wire.FrameReader(1 << 12)
        self.command = wire.pub(f"{PREFIX}_{run}_probe", b"p")
        _roundtrip(self.sock, self.reader, self.command, "PUB")  # creates it, untimed
        self.stop = threading.Event()
        self.samples: list[float] = []
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.samples.append(_roundtrip(self.sock, self.reader, self.command, "PUB"))
        except (OSError, wire.ProtocolError) as err:  # reported by the caller
            self.error = err
        finally:
            self.sock.close()


@contextlib.contextmanager
def load(tcp: str, writers: int, runfor: float) -> Iterator[None]:
    """``writers`` bench_writer processes MPUBing into their own topic meanwhile."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_writer",
                f"--nsqd-tcp-address={tcp}",
                f"--topic={PREFIX}_load",
                f"--runfor={runfor:.0f}s",
                "--connections=1",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(writers)
    ]
    try:
        time.sleep(0.5 if writers else 0)  # let them connect and get going
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def one_run(tcp: str, run: str, count: int, writers: int) -> dict[str, Any]:
    with load(tcp, writers, runfor=600):
        probe = Probe(tcp, run)
        probe.start()
        try:
            sub = measure_sub(tcp, run, count)
            pub = measure_pub(tcp, run, count)
        finally:
            probe.stop.set()
            probe.join(timeout=30)
    if probe.error is not None:
        raise probe.error
    return {"sub": _ms(sub), "pub": _ms(pub), "probe": _ms(probe.samples)}


def broker_cmd(args: argparse.Namespace, data_path: str) -> list[str]:
    return [
        *shlex.split(args.nsqd_cmd),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={data_path}",
        *(["--durable"] if args.durable else []),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=200, help="creations of each kind per run")
    p.add_argument("--load", type=int, default=0, help="bench_writer processes alongside")
    p.add_argument("--repeat", type=int, default=3, help="runs, each on a fresh broker")
    p.add_argument("--durable", action="store_true", help="start the broker with --durable")
    p.add_argument("--nsqd-cmd", default=f"{sys.executable} -m nsqpy.nsqd")
    p.add_argument("--nsqd-tcp-address", help="use a running broker instead")
    p.add_argument("--data-root", default=None, help="where the brokers' data paths go")
    args = p.parse_args(argv)
    if not 2 <= args.count <= 5000:
        p.error("--count must lie between 2 and 5000")
    runs = []
    for n in range(args.repeat):
        run = f"{os.getpid()}_{n}"
        if args.nsqd_tcp_address:
            runs.append(one_run(args.nsqd_tcp_address, run, args.count, args.load))
            continue
        data_path = tempfile.mkdtemp(prefix="nsqpy-bench-create-", dir=args.data_root)
        broker = Broker(broker_cmd(args, data_path), want_http=False)
        try:
            tcp, _ = broker.wait_listening(30.0)
            runs.append(one_run(tcp, run, args.count, args.load))
        finally:
            ended = broker.stop()
            shutil.rmtree(data_path, ignore_errors=True)
        if ended["returncode"] != 0 or ended["killed"]:
            print(f"broker ended badly: {ended}", file=sys.stderr)
            return 1
    for kind, what in (
        ("sub", "SUB creating a channel"),
        ("pub", "PUB creating a topic"),
        ("probe", "PUB to an existing topic, meanwhile"),
    ):
        p50s = [r[kind]["p50"] for r in runs]
        p90s = [r[kind]["p90"] for r in runs]
        print(
            f"{what:40s} median p50 {statistics.median(p50s):7.3f} ms"
            f" (runs {min(p50s):.3f}-{max(p50s):.3f}),"
            f" median p90 {statistics.median(p90s):7.3f} ms,"
            f" max {max(r[kind]['max'] for r in runs):.3f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

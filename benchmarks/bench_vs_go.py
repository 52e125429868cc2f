"""nsqpy's nsqd against Go nsqd v1.3.0, both driven by NSQ's own bench_writer and bench_reader.

NSQ's ``bench.sh`` load (200-byte messages, MPUB batches of 200, RDY 2500, one connection per
GOMAXPROCS, ``--mem-queue-size=1000000``), on a fresh broker per run, in three phases:

- ``pub``: bench_writer into ``sub_bench`` (its channel ``ch`` created first, so every
  message is queued);
- ``sub``: bench_reader drains ``sub_bench/ch``;
- ``pubsub``: bench_reader and bench_writer at once on a fresh topic.

Brokers alternate (go, compiled, pure, go, compiled, pure, ...) so that a busy moment of the
machine hits them all alike; the table shows each one's medians and its ratio to Go's.
``compiled`` runs nsqpy with its compiled core (``NSQPY_REQUIRE_COMPILED=1``), ``pure`` with
``NSQPY_PURE_PYTHON=1``; ``--brokers compiled,durable`` sets ``--durable`` (with
``--mem-queue-size=0``) beside memory mode under NSQ's own load.
The Go binaries come from ``/work/shared/tools/build-go-nsq.sh``.

    python -m benchmarks.bench_vs_go --go-bin /tmp/anch/nsq/bin --rounds 3 --runfor 5s
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

from nsqpy._internal.duration import parse_go_duration

RESULTS_DIR = Path(__file__).parent / "results"
_OPS = re.compile(r"([\d.]+)ops/s")
PHASES = ("pub", "sub", "pubsub_in", "pubsub_out")


#: What each broker name runs with besides the shared flags: ``durable`` is nsqpy's compiled
#: core in ``--durable`` mode (every message on disk, a publish answered after its fsync),
#: to set beside ``compiled`` under the same load; Go nsqd has no such mode.
MEMORY_QUEUE: Final = ["--mem-queue-size=1000000"]
DURABLE: Final = ["--durable", "--mem-queue-size=0"]


def broker_command(name: str, go_bin: Path) -> tuple[list[str], dict[str, str]]:
    if name == "go":
        return [str(go_bin / "nsqd"), *MEMORY_QUEUE], {}
    nsqpy = [sys.executable, "-m", "nsqpy.nsqd"]
    if name == "pure":
        return [*nsqpy, *MEMORY_QUEUE], {"NSQPY_PURE_PYTHON": "1"}
    flags = DURABLE if name == "durable" else MEMORY_QUEUE
    return [*nsqpy, *flags], {"NSQPY_REQUIRE_COMPILED": "1"}


class Broker:
    """A broker on a fresh data path and ports chosen by the kernel: ``cmd`` (nsqd and the
    flags of its mode) with ``env`` added to the environment."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.data = tempfile.mkdtemp(prefix="nsqpy-vs-go-")
        self.log_path = Path(self.data) / "log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    *cmd,
                    f"--data-path={self.data}",
                    "--tcp-address=127.0.0.1:0",
                    "--http-address=127.0.0.1:0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
            )
        self.tcp, self.http = self._addresses()

    def _addresses(self) -> tuple[str, str]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            tcp = re.search(r"TCP: listening on (\S+)", text)
            http = re.search(r"HTTP: listening on (\S+)", text)
            if tcp and http:
                return tcp.group(1), http.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"broker did not start:\n{self.log_path.read_text()}")

    def post(self, path: str) -> None:
        request = urllib.request.Request(f"http://{self.http}{path}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)


def tool(go_bin: Path, kind: str, broker: Broker, topic: str, runfor: str) -> subprocess.Popen[str]:
    extra = ["--batch-size=200"] if kind == "bench_writer" else ["--channel=ch"]
    return subprocess.Popen(
        [
            str(go_bin / kind),
            f"--nsqd-tcp-address={broker.tcp}",
            f"--topic={topic}",
            f"--runfor={runfor}",
            "--size=200",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def rate(proc: subprocess.Popen[str]) -> float:
    out = proc.communicate()[0]
    found = _OPS.search(out)
    if found is None:
        raise RuntimeError(out)
    return float(found.group(1))


def reaped_cpu() -> float:
    """CPU seconds of this process's children reaped so far: a tool's whole run is the rise
    across the ``rate`` that waits for it, as long as no other child ends meanwhile."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_msg(cpu_s: float, msgs_per_s: float, seconds: float) -> float:
    """CPU ns per message of a run that moved ``msgs_per_s`` for ``seconds``."""
    return round(cpu_s * 1e9 / (msgs_per_s * seconds), 1) if msgs_per_s else 0.0


def run_once(name: str, go_bin: Path, runfor: str) -> dict[str, Any]:
    seconds = parse_go_duration(runfor) / 1e9
    broker = Broker(*broker_command(name, go_bin))
    try:
        for topic in ("sub_bench", "pubsub"):
            broker.post(f"/topic/create?topic={topic}")
            broker.post(f"/channel/create?topic={topic}&channel=ch")
        cpu = [broker.cpu_seconds()]
        tools = [reaped_cpu()]
        pub = rate(tool(go_bin, "bench_writer", broker, "sub_bench", runfor))
        cpu.append(broker.cpu_seconds())
        tools.append(reaped_cpu())
        sub = rate(tool(go_bin, "bench_reader", broker, "sub_bench", runfor))
        cpu.append(broker.cpu_seconds())
        tools.append(reaped_cpu())
        reader = tool(go_bin, "bench_reader", broker, "pubsub", runfor)
        writer = tool(go_bin, "bench_writer", broker, "pubsub", runfor)
        pubsub_in = rate(writer)
        tools.append(reaped_cpu())
        pubsub_out = rate(reader)
        tools.append(reaped_cpu())
        cpu.append(broker.cpu_seconds())
    finally:
        broker.stop()
    broker_s = [b - a for a, b in pairwise(cpu)]
    tool_s = [b - a for a, b in pairwise(tools)]
    return {
        "pub": pub,
        "sub": sub,
        "pubsub_in": pubsub_in,
        "pubsub_out": pubsub_out,
        "broker_cpu_s": [round(s, 2) for s in broker_s],
        # CPU per message of each process in each phase. The broker's PUB+SUB figure counts
        # a message half published, half delivered: Go nsqd's "in" runs ahead of its "out".
        "cpu_ns_per_msg": {
            "pub": {
                "broker": per_msg(broker_s[0], pub, seconds),
                "bench_writer": per_msg(tool_s[0], pub, seconds),
            },
            "sub": {
                "broker": per_msg(broker_s[1], sub, seconds),
                "bench_reader": per_msg(tool_s[1], sub, seconds),
            },
            "pubsub": {
                "broker": per_msg(broker_s[2], (pubsub_in + pubsub_out) / 2, seconds),
                "bench_writer": per_msg(tool_s[2], pubsub_in, seconds),
                "bench_reader": per_msg(tool_s[3], pubsub_out, seconds),
            },
        },
    }


def host() -> dict[str, str]:
    """What ran the rounds: a figure only compares with figures of the same hardware."""
    cpuinfo = Path("/proc/cpuinfo")
    models = re.findall(r"model name\s*: (.*)", cpuinfo.read_text()) if cpuinfo.exists() else []
    return {
        "cpu": models[0] if models else platform.processor(),
        "cpus": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    medians = {
        name: {p: statistics.median(r[p] for r in runs) for p in PHASES}
        for name, runs in results.items()
    }
    lines = ["| phase | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for phase in PHASES:
        cells = []
        for name in results:
            value = medians[name][phase]
            ratio = f" ({value / medians['go'][phase]:.2f}x)" if "go" in medians else ""
            cells.append(f"{value:,.0f}{'' if name == 'go' else ratio}")
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_table(results: dict[str, list[dict[str, Any]]]) -> str:
    """PUB+SUB: medians of each process's CPU ns per message, and their sum: what the two
    CPUs are shared out by (the tools' part sets a ceiling on any broker's rate)."""
    procs = ("broker", "bench_writer", "bench_reader")
    lines = [
        "| PUB+SUB CPU ns/msg | " + " | ".join(procs) + " | all three |",
        "|---|" + "---|" * (len(procs) + 1),
    ]
    for name, runs in results.items():
        figures = [r["cpu_ns_per_msg"]["pubsub"] for r in runs if "cpu_ns_per_msg" in r]
        if not figures:
            continue
        cells = [statistics.median(f[p] for f in figures) for p in procs]
        total = statistics.median(sum(f[p] for p in procs) for f in figures)
        lines.append(f"| {name} | " + " | ".join(f"{c:,.0f}" for c in [*cells, total]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--go-bin", type=Path, default=Path("/tmp/anch/nsq/bin"))
    parser.add_argument("--rounds", type=int, default=3, help="runs of every broker")
    parser.add_argument("--runfor", default="5s", help="length of each phase (Go duration)")
    parser.add_argument("--brokers", default="go,compiled,pure", help="in the order they alternate")
    args = parser.parse_args()
    names = args.brokers.split(",")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    load = os.getloadavg()[0]
    for k in range(args.rounds):
        for name in names:
            record = run_once(name, args.go_bin, args.runfor)
            results[name].append(record)
            print(k, name, json.dumps(record), flush=True)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = RESULTS_DIR / f"{stamp}-vs-go.json"
    record = {"load_at_start": load, "host": host(), "runs": results}
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"load average at start {load:.2f}; raw results {out}")
    print(table(results))
    print(cpu_table(results))


if __name__ == "__main__":
    main()

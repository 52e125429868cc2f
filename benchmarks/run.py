"""Benchmark runner: start a broker, drive the bench.sh scenarios against it, record the results.

    python -m benchmarks.run [--scenario pub|sub|pubsub|all] [--runfor 5s] [--nsqd-cmd "..."]
    python -m benchmarks.run --sink                     # the generators' own ceiling
    python -m benchmarks.run --nsqd-tcp-address 127.0.0.1:4150 --nsqd-http-address 127.0.0.1:4151

Scenarios (all with --connections writer and reader processes):
- pub:    writers MPUB into a topic whose channel already exists, so every message is queued.
- sub:    readers drain what pub left behind (pub runs first when only sub is asked for).
- pubsub: writers and readers at once on a fresh topic; msgs/s in and out.

For a broker it started, the runner also reports the broker's CPU seconds and peak RSS per
scenario, and writes everything to a JSON file under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import queue
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import bench_reader, bench_writer, wire
from benchmarks.common import (
    WORKER_GRACE_S,
    Summary,
    WorkerGroup,
    connect,
    parse_duration,
    parse_local_address,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
_LISTENING = re.compile(r"\b(TCP|HTTP): listening on (\S+):(\d+)")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
# How long a SUB-only reader waits for more messages before deciding the backlog is drained.
DRAIN_IDLE_S = 1.0


# --- the broker process --------------------------------------------------------------------------


class Broker:
    """A broker child process whose listening ports are read from its log on stderr."""

    def __init__(self, cmd: list[str], want_http: bool) -> None:
        self.cmd = cmd
        self.want_http = want_http
        self.tail: deque[str] = deque(maxlen=50)
        self._found: queue.Queue[tuple[str, str]] = queue.Queue()
        env = dict(os.environ)
        # Let `python -m nsqpy.nsqd` work from a checkout that is not pip-installed.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p
        )
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stderr(self) -> None:
        # Keep draining for the broker's whole life so a chatty log can never block it.
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.tail.append(line.rstrip())
            match = _LISTENING.search(line)
            if match:
                self._found.put((match[1], f"{match[2]}:{match[3]}"))

    def wait_listening(self, timeout: float) -> tuple[str, str | None]:
        """Block until the TCP (and, if wanted, HTTP) listen lines appear; return the addresses."""
        found: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while "TCP" not in found or (self.want_http and "HTTP" not in found):
            if self.proc.poll() is not None:
                self._reader.join(timeout=2.0)  # collect its last words for the message
                raise RuntimeError(f"broker exited with {self.proc.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"broker did not report its ports in time\n{self.log_tail()}")
            with contextlib.suppress(queue.Empty):
                kind, address = self._found.get(timeout=0.2)
                found[kind] = address
        return found["TCP"], found.get("HTTP")

    def log_tail(self) -> str:
        return "\n".join(self.tail)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5.0)


def proc_usage(pid: int | None) -> dict[str, float]:
    """CPU seconds (user+system) and memory high-water mark of ``pid`` from /proc."""
    if pid is None:
        return {}
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = stat.rpartition(")")[2].split()  # the command name may contain spaces
    usage = {"cpu_s": (int(fields[11]) + int(fields[12])) / _CLK_TCK}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            usage[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return usage


# --- talking to the broker outside the load itself -----------------------------------------------


def http_post(http: str, path: str, params: dict[str, str]) -> None:
    url = f"http://{http}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as resp:
        resp.read()


def topic_stats(http: str | None, topic: str) -> dict[str, Any] | None:
    """The topic's entry from /stats, or None when there is no HTTP port or it cannot answer."""
    if http is None:
        return None
    url = f"http://{http}/stats?" + urllib.parse.urlencode({"format": "json", "topic": topic})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.load(resp)
    except (OSError, ValueError):
        return None
    doc = doc.get("data", doc)  # older NSQ wrapped V1 replies in {"data": ...}
    for entry in doc.get("topics") or []:
        if entry.get("topic_name") == topic:
            channels = {
                c.get("channel_name"): {
                    k: c.get(k) for k in ("depth", "in_flight_count", "message_count")
                }
                for c in entry.get("channels") or []
            }
            return {
                "depth": entry.get("depth"),
                "message_count": entry.get("message_count"),
                "channels": channels,
            }
    return None


def create_channel(tcp: str, http: str | None, topic: str, channel: str) -> None:
    """Make sure ``topic/channel`` exists so that published messages are queued for it."""
    if http is not None:
        try:
            http_post(http, "/topic/create", {"topic": topic})
            http_post(http, "/channel/create", {"topic": topic, "channel": channel})
            return
        except (OSError, urllib.error.HTTPError):
            pass  # fall back to the TCP route below
    # A SUB creates the channel; closing right away (RDY was never sent) leaves it empty.
    with connect(tcp) as sock:
        reader = wire.FrameReader(1 << 12)
        sock.sendall(wire.MAGIC_V2 + wire.sub(topic, channel))
        wire.expect_ok(sock, reader, "SUB")


# --- scenarios ----------------------------------------------------------------------------------


@dataclass
class Target:
    tcp: str
    http: str | None
    pid: int | None


@dataclass
class Phase:
    """One measured window: a writer group, a reader group, or both at once."""

    name: str
    topic: str
    writers: bench_writer.WriterConfig | None = None
    readers: bench_reader.ReaderConfig | None = None


def run_phase(phase: Phase, target: Target, connections: int, size: int) -> dict[str, Any]:
    groups: dict[str, WorkerGroup] = {}
    if phase.readers is not None:  # readers first: their SUB must exist before messages flow
        groups["out"] = WorkerGroup(bench_reader.run_connection, phase.readers, connections, size)
    if phase.writers is not None:
        groups["in"] = WorkerGroup(bench_writer.run_connection, phase.writers, connections, size)
    for group in groups.values():
        group.start()
    for group in groups.values():
        group.wait_ready()
    before, wall = proc_usage(target.pid), time.monotonic()
    for group in groups.values():
        group.go_event.set()
    runfor = max(c.runfor for c in (phase.writers, phase.readers) if c is not None)
    summaries = {kind: g.collect(runfor + WORKER_GRACE_S) for kind, g in groups.items()}
    after, wall = proc_usage(target.pid), time.monotonic() - wall
    return report(phase, summaries, before, after, wall, target)


def report(
    phase: Phase,
    summaries: dict[str, Summary],
    before: dict[str, float],
    after: dict[str, float],
    wall: float,
    target: Target,
) -> dict[str, Any]:
    label = {"pub": "PUB", "sub": "SUB", "pubsub": "PUB+SUB"}[phase.name]
    result: dict[str, Any] = {"topic": phase.topic, "wall_s": round(wall, 3)}
    for kind, summary in sorted(summaries.items()):  # "in" before "out"
        suffix = f" {kind}" if len(summaries) > 1 else ""
        print(f"{label}{suffix}: {summary.nsq_line()}")
        latency = summary.latency_percentiles_ms()
        if latency:
            print(f"    {bench_reader.format_latency(latency)}")
        for error in summary.errors:
            print(f"    error: {error}")
        result[kind] = summary.as_dict()
    if "cpu_s" in before and "cpu_s" in after:
        cpu = after["cpu_s"] - before["cpu_s"]
        result["broker"] = {
            "cpu_s": round(cpu, 3),
            "cpu_pct_of_one_core": round(100 * cpu / wall, 1) if wall else None,
            "peak_rss_mib": round(after.get("VmHWM", 0.0), 1),
            "rss_mib": round(after.get("VmRSS", 0.0), 1),
        }
        b = result["broker"]
        print(
            f"    broker: {b['cpu_s']:.2f} cpu-s over {wall:.2f}s "
            f"({b['cpu_pct_of_one_core']}% of a core), peak RSS {b['peak_rss_mib']:.1f} MiB"
        )
    stats = topic_stats(target.http, phase.topic)
    if stats is not None:
        result["broker_topic_stats"] = stats
    return result


def plan(args: argparse.Namespace, run_id: str) -> Iterator[Phase]:
    """The phases to run, in bench.sh order; `sub` needs the backlog `pub` leaves behind."""
    runfor = parse_duration(args.runfor)
    writer = bench_writer.WriterConfig(
        address="",
        size=args.size,
        batch_size=args.batch_size,
        runfor=runfor,
        pipeline=args.pipeline,
    )
    reader = bench_reader.ReaderConfig(
        address="",
        channel=args.channel,
        size=args.size,
        runfor=runfor,
        rdy=args.rdy,
        identify=args.identify,
        latency=args.latency,
    )
    if args.scenario in ("pub", "sub", "all"):
        topic = f"sub_bench_{run_id}"
        yield Phase("pub", topic, writers=replace(writer, topic=topic))
        if args.scenario != "pub":
            drain = replace(reader, topic=topic, idle_exit=DRAIN_IDLE_S)
            yield Phase("sub", topic, readers=drain)
    if args.scenario in ("pubsub", "all"):
        topic = f"pubsub_bench_{run_id}"
        yield Phase(
            "pubsub",
            topic,
            writers=replace(writer, topic=topic),
            readers=replace(reader, topic=topic),
        )


def run_all(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    run_id = dt.datetime.now(dt.UTC).strftime("%H%M%S")
    results: dict[str, Any] = {}
    for phase in plan(args, run_id):
        if phase.writers is not None:
            phase.writers = replace(phase.writers, address=target.tcp)
        if phase.readers is not None:
            phase.readers = replace(phase.readers, address=target.tcp)
        if phase.name == "pub":
            create_channel(target.tcp, target.http, phase.topic, args.channel)
        print(f"# {phase.name}: topic {phase.topic}", flush=True)
        results[phase.name] = run_phase(phase, target, args.connections, args.size)
    return results


# --- command line ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=("pub", "sub", "pubsub", "all"), default="all")
    p.add_argument("--runfor", default="5s", help="length of each scenario (Go duration)")
    p.add_argument("--connections", type=int, default=2, help="writer and reader processes each")
    p.add_argument("--size", type=int, default=200, help="message size in bytes")
    p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    p.add_argument("--pipeline", type=int, default=1, help="max unacked MPUBs per connection")
    p.add_argument("--rdy", type=int, default=2500, help="RDY window per reader")
    p.add_argument("--channel", default="ch")
    p.add_argument("--identify", action="store_true", help="readers send IDENTIFY first")
    p.add_argument("--latency", action="store_true", help="report e2e latency percentiles")
    p.add_argument("--mem-queue-size", type=int, default=1_000_000)
    p.add_argument(
        "--nsqd-cmd",
        default=shlex.join([sys.executable, "-m", "nsqpy.nsqd"]),
        help="broker command; the runner appends address, data-path and queue flags",
    )
    p.add_argument("--sink", action="store_true", help="run against benchmarks.sink instead")
    p.add_argument("--nsqd-tcp-address", help="use this running broker instead of starting one")
    p.add_argument("--nsqd-http-address", help="its HTTP address (channel creation, /stats)")
    p.add_argument("--nsqd-pid", type=int, help="its pid, for CPU and RSS figures")
    p.add_argument("--startup-timeout", default="30s")
    p.add_argument("--label", help="name used in the results file (default: broker kind)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    return p


def validate(args: argparse.Namespace) -> None:
    """Reject bad flags before anything starts: durations, loopback-only targets, bounds."""
    parse_duration(args.runfor)
    parse_duration(args.startup_timeout)
    for address in (args.nsqd_tcp_address, args.nsqd_http_address):
        if address:
            parse_local_address(address)
    if args.nsqd_http_address and not args.nsqd_tcp_address:
        raise ValueError("--nsqd-http-address needs --nsqd-tcp-address")
    if not 1 <= args.pipeline <= 16:
        raise ValueError("--pipeline must be between 1 and 16")


def broker_command(args: argparse.Namespace, data_path: str) -> list[str]:
    if args.sink:
        lifetime = f"{parse_duration(args.runfor) * 3 + 300:.0f}s"  # an orphaned sink still exits
        return [
            sys.executable,
            "-m",
            "benchmarks.sink",
            "--tcp-address=127.0.0.1:0",
            f"--size={args.size}",
            f"--lifetime={lifetime}",
        ]
    return [
        *shlex.split(args.nsqd_cmd),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--mem-queue-size={args.mem_queue_size}",
        f"--data-path={data_path}",
    ]


def write_results(args: argparse.Namespace, label: str, doc: dict[str, Any]) -> Path:
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path: Path = args.results_dir / f"{stamp}-{label}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)  # readers never see a half-written file
    return path


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate(args)
    except ValueError as exc:
        parser.error(str(exc))
    label = args.label or (
        "sink" if args.sink else "external" if args.nsqd_tcp_address else "nsqpy"
    )
    doc: dict[str, Any] = {
        "label": label,
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    with tempfile.TemporaryDirectory(prefix="nsqpy-bench-") as data_path:
        broker: Broker | None = None
        try:
            if args.nsqd_tcp_address:
                target = Target(args.nsqd_tcp_address, args.nsqd_http_address, args.nsqd_pid)
            else:
                broker = Broker(broker_command(args, data_path), want_http=not args.sink)
                tcp, http = broker.wait_listening(parse_duration(args.startup_timeout))
                target = Target(tcp, http, broker.pid)
                doc["broker_cmd"] = broker.cmd
            print(f"# broker {label} at tcp {target.tcp} http {target.http}", flush=True)
            doc["scenarios"] = run_all(args, target)
            doc["broker_usage_end"] = proc_usage(target.pid)
        except (RuntimeError, TimeoutError, OSError, wire.ProtocolError) as exc:
            print(f"benchmark aborted: {exc}", file=sys.stderr)
            return 2
        finally:
            if broker is not None:
                broker.stop()
    path = write_results(args, label, doc)
    print_table(doc["scenarios"])
    print(f"# results: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    failed = any(
        r.get(k, {}).get("errors") for r in doc["scenarios"].values() for k in ("in", "out")
    )
    return 1 if failed else 0


def print_table(scenarios: dict[str, Any]) -> None:
    def row(*cells: str) -> str:
        return f"{cells[0]:<10}" + "".join(f"{c:>14}" for c in cells[1:])

    print("\n" + row("scenario", "in msg/s", "out msg/s", "broker cpu-s", "peak RSS MiB"))
    for name, r in scenarios.items():
        rates = [f"{r[k]['msgs_per_s']:,.0f}" if k in r else "-" for k in ("in", "out")]
        broker = r.get("broker")
        usage = [f"{broker['cpu_s']:.2f}", f"{broker['peak_rss_mib']:.1f}"] if broker else ["-"] * 2
        print(row(name, *rates, *usage))


if __name__ == "__main__":
    sys.exit(main())

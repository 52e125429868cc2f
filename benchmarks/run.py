"""Benchmark runner: start a broker, drive the bench.sh scenarios against it, record the results.

    python -m benchmarks.run [--scenario pub|sub|pubsub|all] [--runfor 5s] [--nsqd-cmd "..."]
    python -m benchmarks.run --mode memory|disk|durable [--writer-connections 8]
    python -m benchmarks.run --suite [--repeat 3]        # every mode x scenario, one table
    python -m benchmarks.run --full [--update-docs]      # the whole matrix + latency, JSON + PNG
    python -m benchmarks.run --sink                     # the generators' own ceiling
    python -m benchmarks.run --nsqd-tcp-address 127.0.0.1:4150 --nsqd-http-address 127.0.0.1:4151

Broker modes: memory (--mem-queue-size=1000000, as in bench.sh), disk (--mem-queue-size=0: every
message goes through the disk queue, default sync) and durable (--mem-queue-size=0 --durable:
publishes are answered after fsync, group commit). Each broker gets a fresh --data-path that is
removed afterwards.

Scenarios (with --writer-connections writer and --connections reader processes):
- pub:    writers MPUB into a topic whose channel already exists, so every message is queued.
- sub:    readers drain what pub left behind (pub runs first when only sub is asked for).
- pubsub: writers and readers at once on a fresh topic; msgs/s in and out.

For a broker it started, the runner also reports the broker's CPU seconds and peak RSS per
scenario, and writes everything to a JSON file under benchmarks/results/.

--full runs the matrix of benchmarks/full.py (1x1, 1x4, 100 topics, 1,000 idle connections,
fixed-rate latency, disk mode, and the sink), checks every count against /stats, and writes
results/<stamp>-full.json and results/<stamp>-full.png; --update-docs also refreshes the results
block of docs/performance.md.
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
import shutil
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

from benchmarks import bench_reader, bench_writer, suite, wire
from benchmarks.common import (
    WORKER_GRACE_S,
    ConnectionFn,
    Summary,
    WorkerGroup,
    connect,
    parse_duration,
    parse_local_address,
    percentiles_ms,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
_LISTENING = re.compile(r"\b(TCP|HTTP): listening on (\S+):(\d+)")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
# How long a SUB-only reader waits for more messages before deciding the backlog is drained.
DRAIN_IDLE_S = 1.0
# The broker's --mem-queue-size and extra flags per --mode.
MODES: dict[str, tuple[int, tuple[str, ...]]] = {
    "memory": (1_000_000, ()),
    "disk": (0, ()),
    "durable": (0, ("--durable",)),
}
# Refuse to start a broker when the data path's file system has less room than this.
MIN_FREE_BYTES = 5 * 1024**3
# Broker log lines worth keeping beyond the rolling tail.
_NOTABLE = re.compile(r"\b(WARNING|WARN|ERROR|FATAL|CRITICAL)\b|Traceback")


# --- the broker process --------------------------------------------------------------------------


class Broker:
    """A broker child process whose listening ports are read from its log on stderr."""

    def __init__(self, cmd: list[str], want_http: bool) -> None:
        self.cmd = cmd
        self.want_http = want_http
        self.tail: deque[str] = deque(maxlen=50)
        self.notable: deque[str] = deque(maxlen=50)
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
            if _NOTABLE.search(line):
                self.notable.append(line.rstrip())
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

    def stop(self, timeout: float = 60.0) -> dict[str, Any]:
        """SIGTERM, SIGKILL after ``timeout``; how it ended (nsqd flushes queues on the way out)."""
        exited_early = self.proc.poll() is not None
        killed = False
        started = time.monotonic()
        if not exited_early:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                killed = True
                self.proc.kill()
                self.proc.wait(timeout=5.0)
        self._reader.join(timeout=2.0)
        return {
            "returncode": self.proc.returncode,
            "exited_before_stop": exited_early,
            "killed": killed,
            "stop_s": round(time.monotonic() - started, 3),
            "notable_log_lines": list(self.notable),
            "last_log_lines": list(self.tail)[-4:],
        }


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
    """One measured window: a writer group, a reader group, or both at once.

    The connection functions default to the MPUB writer and the SUB/FIN reader; the latency
    scenarios swap in the paced writer and the latency reader.
    """

    name: str
    topic: str
    writers: Any = None  # bench_writer.WriterConfig or another writer's config
    readers: Any = None  # bench_reader.ReaderConfig or another reader's config
    writer_fn: ConnectionFn = bench_writer.run_connection
    reader_fn: ConnectionFn = bench_reader.run_connection


@dataclass(frozen=True)
class Fanout:
    """How many processes each side of a phase uses."""

    writers: int
    readers: int


def run_phase(phase: Phase, target: Target, fanout: Fanout, size: int) -> dict[str, Any]:
    groups: dict[str, WorkerGroup] = {}
    if phase.readers is not None:  # readers first: their SUB must exist before messages flow
        groups["out"] = WorkerGroup(phase.reader_fn, phase.readers, fanout.readers, size)
    if phase.writers is not None:
        groups["in"] = WorkerGroup(phase.writer_fn, phase.writers, fanout.writers, size)
    for group in groups.values():
        group.start()
    for group in groups.values():
        group.wait_ready()
    before, wall = proc_usage(target.pid), time.monotonic()
    for group in groups.values():
        group.go_event.set()
    configs = [c for c in (phase.writers, phase.readers) if c is not None]
    runfor = max(c.runfor + getattr(c, "drain", 0.0) for c in configs)
    summaries = {kind: g.collect(runfor + WORKER_GRACE_S) for kind, g in groups.items()}
    after, wall = proc_usage(target.pid), time.monotonic() - wall
    result = report(phase, summaries, before, after, wall, target)
    result["writer_connections"] = fanout.writers if phase.writers is not None else 0
    result["reader_connections"] = fanout.readers if phase.readers is not None else 0
    return result


def report(
    phase: Phase,
    summaries: dict[str, Summary],
    before: dict[str, float],
    after: dict[str, float],
    wall: float,
    target: Target,
) -> dict[str, Any]:
    label = {"pub": "PUB", "sub": "SUB", "pubsub": "PUB+SUB"}.get(phase.name, phase.name)
    result: dict[str, Any] = {"topic": phase.topic, "wall_s": round(wall, 3)}
    for kind, summary in sorted(summaries.items()):  # "in" before "out"
        suffix = f" {kind}" if len(summaries) > 1 else ""
        print(f"{label}{suffix}: {summary.nsq_line()}")
        latency = summary.latency_percentiles_ms()
        if latency:
            print(f"    {bench_reader.format_latency(latency)}")
        for name, values in summary.samples.items():
            print(f"    {bench_reader.format_latency(percentiles_ms(values), name)}")
        if any(summary.counters.values()):
            print("    " + " ".join(f"{k}={v}" for k, v in sorted(summary.counters.items())))
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
    fanout = Fanout(args.writer_connections or args.connections, args.connections)
    results: dict[str, Any] = {}
    for phase in plan(args, run_id):
        if phase.writers is not None:
            phase.writers = replace(phase.writers, address=target.tcp)
        if phase.readers is not None:
            phase.readers = replace(phase.readers, address=target.tcp)
        if phase.name == "pub":
            create_channel(target.tcp, target.http, phase.topic, args.channel)
        print(f"# {phase.name}: topic {phase.topic}", flush=True)
        results[phase.name] = run_phase(phase, target, fanout, args.size)
    return results


# --- command line ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=("pub", "sub", "pubsub", "all"), default="all")
    p.add_argument("--mode", choices=tuple(MODES), default="memory", help="broker queue mode")
    p.add_argument("--suite", action="store_true", help="every mode and scenario, one table")
    p.add_argument("--full", action="store_true", help="the full matrix, JSON + PNG + table")
    p.add_argument(
        "--repeat", type=int, help="--suite: runs of the matrix (1); --full: 1x1 repetitions (3)"
    )
    p.add_argument(
        "--runfor",
        help="length of each scenario (Go duration; default 5s; --full: 5s and 3s per group)",
    )
    p.add_argument(
        "--latency-rates",
        type=lambda text: tuple(int(r) for r in text.split(",")),
        default=(1_000, 10_000, 50_000),
        help="--full: fixed rates of the latency runs, msg/s, comma-separated",
    )
    p.add_argument(
        "--idle-connections", type=int, default=1000, help="--full: idle subscribers held"
    )
    p.add_argument(
        "--update-docs", action="store_true", help="--full: rewrite docs/performance.md's results"
    )
    p.add_argument("--connections", type=int, default=2, help="writer and reader processes each")
    p.add_argument(
        "--writer-connections", type=int, help="writer processes (default: --connections)"
    )
    p.add_argument("--size", type=int, default=200, help="message size in bytes")
    p.add_argument("--batch-size", type=int, default=200, help="messages per MPUB")
    p.add_argument("--pipeline", type=int, default=1, help="max unacked MPUBs per connection")
    p.add_argument("--rdy", type=int, default=2500, help="RDY window per reader")
    p.add_argument("--channel", default="ch")
    p.add_argument("--identify", action="store_true", help="readers send IDENTIFY first")
    p.add_argument("--latency", action="store_true", help="report e2e latency percentiles")
    p.add_argument("--mem-queue-size", type=int, help="override the --mode's queue size")
    p.add_argument(
        "--nsqd-cmd",
        default=shlex.join([sys.executable, "-m", "nsqpy.nsqd"]),
        help="broker command; the runner appends address, data-path and queue flags",
    )
    p.add_argument("--data-root", type=Path, help="where the temporary data paths go")
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
    args.runfor_s = parse_duration(args.runfor) if args.runfor else None
    args.runfor = args.runfor or "5s"
    args.repeat = args.repeat or (3 if args.full else 1)
    parse_duration(args.startup_timeout)
    for address in (args.nsqd_tcp_address, args.nsqd_http_address):
        if address:
            parse_local_address(address)
    if args.nsqd_http_address and not args.nsqd_tcp_address:
        raise ValueError("--nsqd-http-address needs --nsqd-tcp-address")
    if not 1 <= args.pipeline <= 16:
        raise ValueError("--pipeline must be between 1 and 16")
    if not 1 <= args.connections <= 64 or not 1 <= (args.writer_connections or 1) <= 64:
        raise ValueError("--connections and --writer-connections must be between 1 and 64")
    if args.suite and (args.sink or args.nsqd_tcp_address):
        raise ValueError("--suite starts its own brokers; drop --sink / --nsqd-tcp-address")
    if not 1 <= args.repeat <= 10:
        raise ValueError("--repeat must be between 1 and 10")
    if args.full and (args.suite or args.sink or args.nsqd_tcp_address):
        raise ValueError("--full starts its own brokers; drop --suite / --sink / --nsqd-*")
    if not 0 <= args.idle_connections <= 10_000:
        raise ValueError("--idle-connections must be between 0 and 10000")
    if not all(1 <= r <= 200_000 for r in args.latency_rates):
        raise ValueError("--latency-rates must lie between 1 and 200000 msg/s")


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
    mem_queue_size, extra = MODES[args.mode]
    if args.mem_queue_size is not None:
        mem_queue_size = args.mem_queue_size
    return [
        *shlex.split(args.nsqd_cmd),
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--mem-queue-size={mem_queue_size}",
        f"--data-path={data_path}",
        *extra,
    ]


def data_root(args: argparse.Namespace) -> Path:
    return Path(args.data_root or tempfile.gettempdir())


def check_free_space(root: Path) -> str | None:
    """A polite refusal when ``root`` has too little room for a disk-mode run, else None."""
    free = shutil.disk_usage(root).free
    if free >= MIN_FREE_BYTES:
        return None
    return (
        f"only {free / 1024**3:.1f} GiB free under {root}; a disk-mode run can write several GiB "
        f"(at least {MIN_FREE_BYTES / 1024**3:.0f} GiB wanted). Free some space or pass "
        "--data-root pointing at a roomier file system."
    )


@contextlib.contextmanager
def fresh_data_path(root: Path) -> Iterator[str]:
    """A new, empty --data-path under ``root``, removed with everything in it afterwards."""
    path = tempfile.mkdtemp(prefix="nsqpy-bench-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path):
            print(f"warning: could not remove {path}", file=sys.stderr)


def write_results(
    args: argparse.Namespace, label: str, doc: dict[str, Any], stamp: str | None = None
) -> Path:
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path: Path = args.results_dir / f"{stamp}-{label}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)  # readers never see a half-written file
    return path


def new_doc(args: argparse.Namespace, label: str) -> dict[str, Any]:
    return {
        "label": label,
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }


def run_broker(args: argparse.Namespace, doc: dict[str, Any], data_path: str) -> None:
    """Start a broker (or the sink) on ``data_path``, run the scenarios into ``doc``, stop it."""
    broker = Broker(broker_command(args, data_path), want_http=not args.sink)
    doc["broker_cmd"] = broker.cmd
    try:
        tcp, http = broker.wait_listening(parse_duration(args.startup_timeout))
        target = Target(tcp, http, broker.pid)
        print(f"# broker {doc['label']} ({args.mode}) at tcp {tcp} http {http}", flush=True)
        doc["scenarios"] = run_all(args, target)
        doc["broker_usage_end"] = proc_usage(target.pid)
    finally:
        doc["broker_exit"] = exit_info = broker.stop()
    if exit_info["exited_before_stop"] or exit_info["killed"]:
        print(f"warning: broker ended badly: {exit_info}\n{broker.log_tail()}", file=sys.stderr)


def run_once(args: argparse.Namespace, label: str) -> dict[str, Any] | None:
    """One broker (or target), the chosen scenarios; the results document, None if aborted."""
    doc = new_doc(args, label)
    doc["mode"] = None if args.sink or args.nsqd_tcp_address else args.mode
    try:
        if args.nsqd_tcp_address:
            target = Target(args.nsqd_tcp_address, args.nsqd_http_address, args.nsqd_pid)
            print(f"# broker {label} at tcp {target.tcp} http {target.http}", flush=True)
            doc["scenarios"] = run_all(args, target)
            doc["broker_usage_end"] = proc_usage(target.pid)
            return doc
        with fresh_data_path(data_root(args)) as data_path:
            run_broker(args, doc, data_path)
        return doc
    except (RuntimeError, TimeoutError, OSError, wire.ProtocolError) as exc:
        print(f"benchmark aborted: {exc}", file=sys.stderr)
        return None


def any_errors(scenarios: dict[str, Any]) -> bool:
    return any(r.get(k, {}).get("errors") for r in scenarios.values() for k in ("in", "out"))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        validate(args)
    except ValueError as exc:
        parser.error(str(exc))
    if not (args.sink or args.nsqd_tcp_address):
        refusal = check_free_space(data_root(args))
        if refusal:
            print(f"not running: {refusal}", file=sys.stderr)
            return 2
    if args.suite:
        return run_suite(args)
    if args.full:
        return run_full(args)
    label = args.label or (
        "sink" if args.sink else "external" if args.nsqd_tcp_address else f"nsqpy-{args.mode}"
    )
    doc = run_once(args, label)
    if doc is None:
        return 2
    path = write_results(args, label, doc)
    print_table(doc["scenarios"])
    print(f"# results: {display_path(path)}")
    return 1 if any_errors(doc["scenarios"]) else 0


def run_suite(args: argparse.Namespace) -> int:
    """The whole matrix (--repeat times, interleaved), one results file, one table."""
    runs: list[dict[str, Any]] = []
    for repetition in range(1, args.repeat + 1):
        for spec in suite.MATRIX:
            refusal = check_free_space(data_root(args))
            if refusal:
                print(f"suite stopped early: {refusal}", file=sys.stderr)
                break
            print(f"\n## {spec.name} (repetition {repetition}/{args.repeat})", flush=True)
            doc = run_once(suite.args_for(args, spec), f"nsqpy-{spec.name}")
            runs.append(suite.entry(spec, repetition, doc))
    summary = suite.summarise(runs)
    doc = new_doc(args, "suite")
    doc.update(runs=runs, **summary)
    path = write_results(args, "suite", doc)
    suite.print_table(summary, args)
    print(f"# results: {display_path(path)}")
    failed = any(r["doc"] is None or any_errors(r["doc"]["scenarios"]) for r in runs)
    return 1 if failed else 0


def run_full(args: argparse.Namespace) -> int:
    """The full matrix: one JSON, one PNG, one table (and the docs block with --update-docs)."""
    from benchmarks import full, report  # full imports this module

    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"note: load average {load:.2f} at start; the machine is not quiet", flush=True)
    stamp = full.stamp()
    records = full.run_matrix(args)
    summary = full.summarise(records)
    doc = new_doc(args, "full")
    doc.update(load_average_start=load, records=records, **summary)
    path = write_results(args, "full", doc, stamp)
    png = path.with_suffix(".png")
    host = f"{os.cpu_count()} cores, CPython {platform.python_version()}"
    title = f"nsqpy nsqd, full benchmark {stamp} ({host}, load {load:.2f} at start)"
    report.print_table(summary, title)
    if not report.write_chart(summary, png, title):
        print("chart skipped: matplotlib is not installed (pip install -e '.[dev]')")
    print(f"# results: {display_path(path)}" + (f", {display_path(png)}" if png.exists() else ""))
    if args.update_docs:
        update_docs(report, summary, path, png, host, load)
    failed = any(not c["pass"] for r in summary["rows"] + summary["latency"] for c in r["checks"])
    errors = any(r.get("errors") for r in summary["rows"]) or any("error" in r for r in records)
    return 1 if failed or errors else 0


def update_docs(
    report: Any, summary: dict[str, Any], path: Path, png: Path, host: str, load: float
) -> None:
    docs = ROOT / "docs" / "performance.md"
    meta = {
        "command": shlex.join(["python", "-m", "benchmarks.run", *sys.argv[1:]]),
        "stamp": path.stem.removesuffix("-full"),
        "host": host,
        "load": f"{load:.2f}",
        "json": str(display_path(path)),
        "json_link": os.path.relpath(path, docs.parent),
        "png_link": os.path.relpath(png, docs.parent),
    }
    if report.update_docs(docs, report.markdown(summary, meta)):
        print(f"# updated {display_path(docs)}")
    else:
        print(f"warning: no results markers in {display_path(docs)}; not updated")


def display_path(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


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

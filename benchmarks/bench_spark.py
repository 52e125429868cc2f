"""The ``nsq`` Spark source: topic -> Parquet, sustained rate on a local SparkSession.

    python -m benchmarks.bench_spark [--messages 1500000] [--size 200] [--master local[2]]
        [--max-in-flight 300000] [--batch 100000] [--partitions 2] [--profile 10]
        [--mode lease|driver|both] [--rounds 1] [--nsqd-cmd "/path/to/nsqd"]

Starts ``python -m nsqpy.nsqd`` (large --mem-queue-size and --max-rdy-count), preloads
--messages bodies of --size bytes, then runs ``readStream.format("nsq")`` -> Parquet with
``trigger(processingTime="0 seconds")`` until every message is FINished (a message is FINished
only after the batch holding it was committed by the sink, so FINished = durably in Parquet).

Reported: the sustained rate between 10% and 90% FINished (JVM warm-up excluded), the rate over
the whole run, and Spark's per-batch timings. ``--mode`` picks the source's way to read (its
``mode`` option: ``lease``, executors read nsqd leases; ``driver``, every message passes through
the driver-side runner); ``both`` alternates them, ``--rounds`` times each, on a fresh nsqd
and preload per run, so that a busy moment of the machine hits both alike, after an unreported
warm-up run (``--warmup``: the JVM's JIT would favour whichever mode ran second). The machine's
load average is recorded before and after each run. ``--profile N`` samples the driver-side
source runner (the one Python process every message passes through driver-side) with py-spy for
N seconds mid-run and prints its hottest functions. Target (issue 7, 2-core machine): >= 100k msg/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.run import Broker
from nsqpy.client import Producer
from nsqpy.client.sync import LoopThread

TARGET = 100_000
TOPIC, CHANNEL = "bench", "parquet"


def start_nsqd(cmd: str, data: Path) -> tuple[Broker, str, str]:
    broker = Broker(
        [*shlex.split(cmd), "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
         "--mem-queue-size=100000000", "--max-rdy-count=1000000", f"--data-path={data}"],
        want_http=True,
    )
    tcp, http = broker.wait_listening(30)
    assert http is not None
    return broker, tcp, http


def preload(tcp: str, http: str, count: int, size: int) -> float:
    """Publish ``count`` distinct bodies (MPUB of 500, 64 in flight); returns the seconds taken."""
    create = urllib.request.Request(
        f"http://{http}/channel/create?topic={TOPIC}&channel={CHANNEL}", method="POST")
    urllib.request.urlopen(urllib.request.Request(
        f"http://{http}/topic/create?topic={TOPIC}", method="POST"), timeout=10).close()
    urllib.request.urlopen(create, timeout=10).close()

    async def run() -> None:
        async with Producer(tcp) as p:
            batches = [[b"%012d" % i + b"." * (size - 12) for i in range(s, min(s + 500, count))]
                       for s in range(0, count, 500)]
            for i in range(0, len(batches), 64):
                await asyncio.gather(*(p.multi_publish(TOPIC, b) for b in batches[i : i + 64]))

    began = time.monotonic()
    loop = LoopThread()
    try:
        loop.run(run())
    finally:
        loop.stop()
    return time.monotonic() - began


def remaining(http: str, channel: str = CHANNEL) -> int:
    with urllib.request.urlopen(f"http://{http}/stats?format=json&topic={TOPIC}", timeout=10) as r:
        stats = json.loads(r.read())
    for topic in stats["topics"]:
        for ch in topic["channels"]:
            if ch["channel_name"] == channel:
                return int(ch["depth"] + ch["in_flight_count"] + ch["deferred_count"])
    raise RuntimeError("channel not found")


def runner_pid() -> int | None:
    """The driver-side streaming source runner (python_streaming_source_runner)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"python_streaming_source_runner" in cmd:
            return int(entry.name)
    return None


_ROLES = (
    (b"python_streaming_source_runner", "source runner"),
    (b"nsqpy.nsqd", "nsqd"),
    (b"pyspark.daemon", "python workers"),
    (b"org.apache.spark.deploy.SparkSubmit", "JVM"),
)


def cpu_by_role() -> Counter[str]:
    """CPU seconds used so far by each kind of this benchmark's descendant processes.

    (Other Spark jobs on the machine are left out: only our own process tree counts.)
    """
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, bytes, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        procs[int(entry.name)] = (int(fields[1]), cmd, (int(fields[11]) + int(fields[12])) / tick)
    out: Counter[str] = Counter()
    for pid, (_, cmd, used) in procs.items():
        if not _descends(pid, os.getpid(), procs):
            continue
        role = next((name for key, name in _ROLES if key in cmd), None)
        if role is not None:
            out[role] += used
    return out


def _descends(pid: int, root: int, procs: dict[int, tuple[int, bytes, float]]) -> bool:
    while pid in procs and pid != root:
        pid = procs[pid][0]
    return pid == root


def profile(pid: int, seconds: int, out: Path) -> threading.Thread:
    """py-spy the runner in the background (raw collapsed stacks into ``out``)."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        print("py-spy not found: no profile", file=sys.stderr)
        return threading.Thread()
    cmd = [spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200",
           "--format", "raw", "--output", str(out), "--nonblocking", "--threads"]

    def run() -> None:
        subprocess.run(cmd, capture_output=True, check=False)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def hottest(raw: Path, top: int = 15) -> list[tuple[str, float]]:
    """Leaf functions by share of samples (all threads of the runner)."""
    if not raw.exists():
        return []
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        leaves[frames[-1]] += n
        total += n
    return [(name, n / total) for name, n in leaves.most_common(top)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_500_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-in-flight", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, help="py-spy the runner for N seconds")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--sink", default="parquet", help="parquet, or noop (Spark's no-op sink)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark configuration (repeatable)")
    ap.add_argument("--nsqd-cmd", default=f"{sys.executable} -m nsqpy.nsqd",
                    help="the nsqd to start (flags are appended)")
    ap.add_argument("--mode", choices=("lease", "driver", "both"), default="both",
                    help="the source's way to read; both: alternate them")
    ap.add_argument("--rounds", type=int, default=1, help="runs per mode")
    ap.add_argument("--warmup", type=int, default=300_000,
                    help="messages of an unreported first run (the JVM's JIT is then warm for "
                    "every reported run; 0: none)")
    args = ap.parse_args()

    modes = ["lease", "driver"] if args.mode == "both" else [args.mode]
    if args.warmup:
        print("warm-up run (not reported)", flush=True)
        run_once(argparse.Namespace(**{**vars(args), "messages": args.warmup}), modes[-1])
    results = []
    for _ in range(args.rounds):
        for mode in modes:
            results.append(run_once(args, mode))
            print(json.dumps(results[-1], indent=2), flush=True)
    if len(modes) == 2:
        print(json.dumps(compare(results), indent=2))
    return 0


def run_once(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench_spark_"))
    broker, tcp, http = start_nsqd(args.nsqd_cmd, work / "nsqd")
    try:
        took = preload(tcp, http, args.messages, args.size)
        print(f"[{mode}] preloaded {args.messages} x {args.size} B in {took:.1f}s", flush=True)
        load_before = os.getloadavg()[0]
        result = measure(args, tcp, http, work, mode)
        result["load_average_before_after"] = [round(load_before, 1),
                                               round(os.getloadavg()[0], 1)]
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per mode and lease/driver ratios of the steady rate and of the runner's CPU."""
    def median(mode: str, get: Any) -> float:
        return float(statistics.median(get(r) for r in results if r["settings"]["mode"] == mode))

    steady = {m: median(m, lambda r: r["steady_msg_per_s"]) for m in ("lease", "driver")}
    whole = {m: median(m, lambda r: r["whole_run_msg_per_s"]) for m in ("lease", "driver")}
    runner = {m: median(m, lambda r: r["cpu_us_per_msg_10_to_90pct"].get("source runner", 0))
              for m in ("lease", "driver")}
    return {
        "median_steady_msg_per_s": steady,
        "median_whole_run_msg_per_s": whole,
        "steady_lease_over_driver": round(steady["lease"] / steady["driver"], 2),
        "median_runner_cpu_us_per_msg": runner,
    }


def measure(
    args: argparse.Namespace, tcp: str, http: str, work: Path, mode: str
) -> dict[str, Any]:
    from nsqpy.spark import build_session

    conf = {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(args.partitions),
    }
    conf.update(kv.split("=", 1) for kv in args.conf)
    spark = build_session(args.master, "bench-spark", conf)
    spark.sparkContext.setLogLevel("ERROR")
    total = args.messages
    query = (
        spark.readStream.format("nsq")
        .options(nsqd=tcp, topic=TOPIC, channel=CHANNEL, maxInFlight=str(args.max_in_flight),
                 maxRecordsPerBatch=str(args.batch), numPartitions=str(args.partitions),
                 mode=mode)
        .load()
        .writeStream.format(args.sink)
        .option("path", str(work / "out")).option("checkpointLocation", str(work / "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    began = time.monotonic()
    samples: list[tuple[float, int]] = []
    cpu: list[tuple[int, Counter[str]]] = []  # (FINished, CPU seconds by role) at 10% and 90%
    spy: threading.Thread | None = None
    raw = work / "profile.txt"
    try:
        while True:
            done = total - remaining(http)
            now = time.monotonic()
            samples.append((now, done))
            if len(cpu) < 2 and done >= total * (0.1 if not cpu else 0.9):
                cpu.append((done, cpu_by_role()))
            if args.profile and spy is None and done > total * 0.2 and (pid := runner_pid()):
                spy = profile(pid, args.profile, raw)
            if done >= total or now - began > args.timeout or not query.isActive:
                break
            if len(samples) % 20 == 0:
                print(f"{now - began:6.1f}s  {done} FINished", file=sys.stderr, flush=True)
            time.sleep(0.25)
    finally:
        progress = list(query.recentProgress)
        failure = query.exception()
        query.stop()
        if spy is not None:
            spy.join(args.profile + 30)
        spark.stop()
    if failure is not None:
        raise SystemExit(f"the query failed: {failure}")
    return summarize(args, samples, progress, hottest(raw), cpu, mode)


def _cpu_per_message(cpu: list[tuple[int, Counter[str]]]) -> dict[str, float]:
    if len(cpu) < 2:
        return {}
    (n0, c0), (n1, c1) = cpu
    used = {role: (c1[role] - c0[role]) * 1e6 / (n1 - n0) for role in c1}
    used["total"] = sum(used.values())
    return {role: round(us, 1) for role, us in sorted(used.items())}


def _when(samples: list[tuple[float, int]], count: float) -> float:
    return next(t for t, done in samples if done >= count)


def summarize(
    args: argparse.Namespace,
    samples: list[tuple[float, int]],
    progress: list[Any],
    hot: list[tuple[str, float]],
    cpu: list[tuple[int, Counter[str]]],
    mode: str,
) -> dict[str, Any]:
    total = args.messages
    start, end = samples[0][0], samples[-1][0]
    finished = samples[-1][1]
    t10, t90 = _when(samples, total * 0.1), _when(samples, total * 0.9)
    steady = 0.8 * total / (t90 - t10)
    durations: dict[str, list[float]] = {}
    rows = [p["numInputRows"] for p in progress if p["numInputRows"]]
    for p in progress:
        if p["numInputRows"]:
            for key, ms in p["durationMs"].items():
                durations.setdefault(key, []).append(ms)
    return {
        "settings": {"mode": mode, "master": args.master, "sink": args.sink, "conf": args.conf,
                     "messages": total, "size": args.size,
                     "maxInFlight": args.max_in_flight, "maxRecordsPerBatch": args.batch,
                     "numPartitions": args.partitions, "cpus": os.cpu_count()},
        "finished": finished,
        "steady_msg_per_s": round(steady),
        "whole_run_msg_per_s": round(finished / (end - start)),
        "seconds": round(end - start, 1),
        "target_met": steady >= TARGET,
        "batches_with_rows": len(rows),
        "median_rows_per_batch": statistics.median(rows) if rows else 0,
        "median_duration_ms": {k: statistics.median(v) for k, v in sorted(durations.items())},
        "cpu_us_per_msg_10_to_90pct": _cpu_per_message(cpu),
        "runner_hottest": [f"{share:6.1%}  {name}" for name, share in hot],
    }


if __name__ == "__main__":
    sys.exit(main())

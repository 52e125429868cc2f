"""``nsqpy-archive --available-now`` over a backlog, through leases and driver-side, alternated.

    python -m benchmarks.bench_archive [--messages 1000000] [--size 200] [--master local[2]]
        [--max-in-flight 200000] [--mode lease|driver|both] [--rounds 1]

Each run starts ``python -m nsqpy.nsqd`` (large --mem-queue-size and --max-rdy-count), creates
the archive's channel, preloads --messages JSON bodies of --size bytes, and runs the
``nsqpy-archive`` command on them with ``--source-option mode=<mode>``. Reported per run: the
rows/s of each batch (Spark's processedRowsPerSecond, as the job prints them), the job's own
msg/s over the whole run (its ``archived ... msg/s`` line: from the query's start to its end),
the command's wall time (JVM start included), and the machine's load average. ``both``
alternates the modes so that a busy moment hits both alike. Under AvailableNow a batch takes up
to ``--max-in-flight`` messages in either mode.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.bench_spark import TOPIC, remaining, start_nsqd
from nsqpy.client import Producer
from nsqpy.client.sync import LoopThread

ARCHIVE_CHANNEL = "nsqpy_archive"
_BATCH = re.compile(r"^batch (\d+): (\d+) rows in ([\d.]+) s, (\d+) rows/s$")
_TOTAL = re.compile(r"^archived (\d+) messages in (\d+) batches, ([\d.]+) s \((\d+) msg/s\)$")


def json_bodies(start: int, stop: int, size: int) -> list[bytes]:
    """JSON events padded to ``size`` bytes."""
    out = []
    for i in range(start, stop):
        doc = {"id": i, "user": f"user{i % 1000}", "event": "click", "pad": ""}
        body = json.dumps(doc, separators=(",", ":")).encode()
        out.append(body.replace(b'"pad":""', b'"pad":"' + b"x" * max(0, size - len(body)) + b'"'))
    return out


def preload(tcp: str, http: str, count: int, size: int) -> float:
    for path in (f"/topic/create?topic={TOPIC}",
                 f"/channel/create?topic={TOPIC}&channel={ARCHIVE_CHANNEL}"):  # fmt: skip
        urllib.request.urlopen(urllib.request.Request(f"http://{http}{path}", method="POST"),
                               timeout=10).close()  # fmt: skip

    async def run() -> None:
        async with Producer(tcp) as producer:
            for start in range(0, count, 500 * 64):
                batches = [json_bodies(s, min(s + 500, count), size)
                           for s in range(start, min(start + 500 * 64, count), 500)]  # fmt: skip
                for batch in batches:
                    await producer.multi_publish(TOPIC, batch)

    began = time.monotonic()
    loop = LoopThread()
    try:
        loop.run(run())
    finally:
        loop.stop()
    return time.monotonic() - began


def run_once(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench_archive_"))
    broker, tcp, http = start_nsqd(f"{sys.executable} -m nsqpy.nsqd", work / "nsqd")
    try:
        took = preload(tcp, http, args.messages, args.size)
        print(f"[{mode}] preloaded {args.messages} x {args.size} B in {took:.1f}s", flush=True)
        load_before = os.getloadavg()[0]
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "nsqpy.cli.nsqpy_archive", "--master", args.master,
             "--topic", TOPIC, "--nsqd-tcp-address", tcp, "--output", str(work / "archive"),
             "--checkpoint", str(work / "checkpoint"), "--available-now",
             "--max-in-flight", str(args.max_in_flight), "--source-option", f"mode={mode}"],
            capture_output=True, text=True, timeout=args.timeout, check=False,
        )  # fmt: skip
        wall = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(f"nsqpy-archive failed:\n{done.stderr[-3000:]}")
        left = remaining(http, ARCHIVE_CHANNEL)  # 0: every message FINished
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return summarize(mode, done.stdout, wall, left, load_before)


def summarize(mode: str, stdout: str, wall: float, left: int, load_before: float) -> dict[str, Any]:
    batches = [m for line in stdout.splitlines() if (m := _BATCH.match(line))]
    total = next((m for line in stdout.splitlines() if (m := _TOTAL.match(line))), None)
    if total is None:
        raise SystemExit(f"no totals line in:\n{stdout[-2000:]}")
    rates = [int(m.group(4)) for m in batches]
    return {
        "mode": mode,
        "rows": int(total.group(1)),
        "left_in_channel": left,
        "batches": [{"rows": int(m.group(2)), "seconds": float(m.group(3)),
                     "rows_per_s": int(m.group(4))} for m in batches],
        "median_batch_rows_per_s": statistics.median(rates) if rates else 0,
        "whole_run_msg_per_s": int(total.group(4)),
        "job_seconds": float(total.group(3)),
        "command_wall_seconds": round(wall, 1),
        "load_average_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-in-flight", type=int, default=200_000)
    ap.add_argument("--mode", choices=("lease", "driver", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    modes = ["lease", "driver"] if args.mode == "both" else [args.mode]
    results = []
    for _ in range(args.rounds):
        for mode in modes:
            results.append(run_once(args, mode))
            print(json.dumps(results[-1], indent=2), flush=True)
    if len(modes) == 2:
        def med(mode: str, key: str) -> float:
            return float(statistics.median(r[key] for r in results if r["mode"] == mode))

        summary = {key: {m: med(m, key) for m in modes}
                   for key in ("median_batch_rows_per_s", "whole_run_msg_per_s")}  # fmt: skip
        summary["lease_over_driver"] = {
            key: round(summary[key]["lease"] / summary[key]["driver"], 2) for key in list(summary)
        }
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

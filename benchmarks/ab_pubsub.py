"""A/B of nsqpy's nsqd under NSQ's own PUB+SUB load: variants alternated, pair by pair.

Each variant is nsqpy's nsqd from a source tree (this checkout by default, or another
worktree with its own compiled modules), with its flags and extra environment. Every run
starts a fresh broker, creates ``pubsub/ch`` and runs Go's ``bench_reader`` and
``bench_writer`` at once for ``--runfor`` (the ``pubsub`` phase of ``bench_vs_go``). The
order flips every pair (A B, B A, ...) so that a drift of the machine hits both alike; only
differences that hold over several pairs mean anything (one run moves by 5-10 % here).

``--warm`` first runs ``bench_vs_go``'s other two phases on the same broker, as that run does
(``bench_writer`` into ``sub_bench`` for ``--runfor``, then ``bench_reader`` draining it), so
that the PUB+SUB measured is the one ``bench_vs_go`` reports: after the broker has written
and consumed segments. A fresh broker cannot show what that history changes, such as durable
mode's recycled segments (docs/performance.md, "Issue 21, twenty-first pass").

``--sched`` also samples the broker's threads over the middle of every run: context
switches, CPU and time spent runnable but waiting for a CPU, per MPUB of 200, plus the
machine's idle share. That is how docs/performance.md ("Issue 21, eleventh pass") tells the
loop's own cost from the time it waits for a CPU.

    python -m benchmarks.ab_pubsub --pairs 4 \\
        --variant 'base||--durable --mem-queue-size=0' \\
        --variant 'exp|/work/exp|--durable --mem-queue-size=0|NSQPY_X=1'
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.bench_vs_go import Broker, rate, tool

REPO = Path(__file__).resolve().parent.parent
#: Of the run, when the sample starts and how long it lasts (s): the middle of a 5 s run.
SAMPLE_AT, SAMPLE_FOR = 1.5, 3.0
BATCH = 200


@dataclass
class Variant:
    name: str
    tree: Path
    flags: list[str]
    env: dict[str, str]
    rates: list[float] = field(default_factory=list)


def parse_variant(text: str) -> Variant:
    """``name|tree|flags|K=V,K=V``: everything after the name may be left out or empty."""
    name, tree, flags, env = [*text.split("|"), "", "", ""][:4]
    if not name:
        raise argparse.ArgumentTypeError(f"a variant needs a name: {text!r}")
    pairs = [kv.split("=", 1) for kv in env.split(",") if kv]
    return Variant(name, Path(tree) if tree else REPO, flags.split(), dict(pairs))


def broker_for(variant: Variant) -> Broker:
    env = {
        "PYTHONPATH": str(variant.tree / "src"),
        "NSQPY_REQUIRE_COMPILED": "1",
        **variant.env,
    }
    return Broker([sys.executable, "-m", "nsqpy.nsqd", *variant.flags], env)


Threads = dict[str, tuple[int, int, int, int]]


def threads(pid: int) -> Threads:
    """Per thread of ``pid``: (voluntary and involuntary switches, CPU ticks, ns waiting
    for a CPU), keyed by "tid name"."""
    out: Threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            waited = int((task / "schedstat").read_text().split()[1])
            name = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # the thread ended meanwhile, or no schedstat here
        switches = {
            k: int(v) for k, v in (ln.split(":") for ln in status.splitlines() if "ctxt" in ln)
        }
        if task.name == str(pid):
            name = "(the loop)"
        out[f"{task.name} {name}"] = (
            switches["voluntary_ctxt_switches"],
            switches["nonvoluntary_ctxt_switches"],
            int(stat[11]) + int(stat[12]),
            waited,
        )
    return out


def cpu_times() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def sched_report(
    before: Threads, after: Threads, cpu0: list[int], cpu1: list[int], mpubs: float
) -> str:
    """The sample, per MPUB of the writer's: only threads that ran or switched."""
    tick = os.sysconf("SC_CLK_TCK")
    lines = []
    for key in sorted(after):
        if key not in before:
            continue
        vol, invol, ticks, waited = (b - a for a, b in zip(before[key], after[key], strict=True))
        if ticks == 0 and vol + invol == 0:
            continue
        lines.append(
            f"    {key:<22} CPU {ticks / tick * 1e6 / mpubs:6.1f} us, waiting for a CPU "
            f"{waited / 1e3 / mpubs:6.1f} us, switches {vol / mpubs:.2f} voluntary "
            f"{invol / mpubs:.2f} involuntary, per MPUB"
        )
    delta = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    idle = (delta[3] + delta[4]) / sum(delta)  # idle + iowait
    lines.append(f"    machine idle (with iowait) {idle:.0%}")
    return "\n".join(lines)


def run(
    variant: Variant, go_bin: Path, runfor: str, sched: bool, warm: bool = False
) -> tuple[float, str]:
    broker = broker_for(variant)
    try:
        for topic in ("sub_bench", "pubsub") if warm else ("pubsub",):
            broker.post(f"/topic/create?topic={topic}")
            broker.post(f"/channel/create?topic={topic}&channel=ch")
        if warm:  # bench_vs_go's PUB and SUB phases first
            rate(tool(go_bin, "bench_writer", broker, "sub_bench", runfor))
            rate(tool(go_bin, "bench_reader", broker, "sub_bench", runfor))
        reader = tool(go_bin, "bench_reader", broker, "pubsub", runfor)
        writer = tool(go_bin, "bench_writer", broker, "pubsub", runfor)
        report = ""
        if sched:
            time.sleep(SAMPLE_AT)  # a measurement window, not a wait for a condition
            before, cpu0 = threads(broker.proc.pid), cpu_times()
            time.sleep(SAMPLE_FOR)
            after, cpu1 = threads(broker.proc.pid), cpu_times()
        published, delivered = rate(writer), rate(reader)
        if sched:
            report = sched_report(before, after, cpu0, cpu1, published * SAMPLE_FOR / BATCH)
        return published, f"in={published:,.0f} out={delivered:,.0f}\n{report}".rstrip()
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        required=True,
        help="name|tree|flags|K=V,... (tree defaults to this checkout)",
    )
    parser.add_argument("--pairs", type=int, default=4, help="rounds of every variant")
    parser.add_argument("--runfor", default="5s", help="length of each run (Go duration)")
    parser.add_argument("--go-bin", type=Path, default=Path("/tmp/anch/nsq/bin"))
    parser.add_argument(
        "--sched",
        action="store_true",
        help="per-thread scheduling figures, sampled over seconds 1.5-4.5 (keep --runfor >= 5s)",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="run bench_vs_go's PUB and SUB phases on each broker before its PUB+SUB",
    )
    args = parser.parse_args()
    variants: list[Variant] = args.variant
    for k in range(args.pairs):
        for variant in variants if k % 2 == 0 else variants[::-1]:
            published, line = run(variant, args.go_bin, args.runfor, args.sched, args.warm)
            variant.rates.append(published)
            print(f"{k} {variant.name} {line}", flush=True)
    for variant in variants:
        rates = variant.rates
        print(
            f"{variant.name}: PUB+SUB in mean {statistics.mean(rates):,.0f} median "
            f"{statistics.median(rates):,.0f} ({', '.join(f'{r / 1e3:.0f}k' for r in rates)})"
        )


if __name__ == "__main__":
    main()

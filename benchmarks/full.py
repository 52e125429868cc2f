"""The full benchmark matrix behind ``python -m benchmarks.run --full``.

Each group below gets a fresh broker (and data path), so its peak RSS is its own:

| group | broker | layout | phases |
|---|---|---|---|
| sink 1x1 | benchmarks.sink | 1 topic x 1 channel | pub, sub, pubsub (the generators' ceiling) |
| 1x1 (x3) | --mem-queue-size=1000000 | 1 topic x 1 channel | pub, sub, pubsub |
| 1x4 | memory | 1 topic x 4 channels | pub, sub, pubsub |
| 100 topics | memory | 100 topics x 1 channel | pub, sub, pubsub |
| 1x1 +1000 idle | memory | 1x1 plus 1,000 idle subscribers | pubsub |
| latency | memory | 1x1, paced writer | 1k, 10k, 50k msg/s |
| disk 1x1 | --mem-queue-size=0 | 1 topic x 1 channel | pub, sub, pubsub |

The load is NSQ's bench.sh load: 2 writer processes sending MPUB of 200 x 200 B, each waiting for
its OK; 2 reader processes with RDY 2500 per connection, FIN per message. With several
subscriptions the 2 reader processes share them (1x4: 2 channels each; 100 topics: 50 SUB
connections each with RDY 50). Readers drain after their timed window so that the counts can be
checked (see ``checks``). The three 1x1 repetitions are interleaved with the other groups, and
their rows show medians.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import select
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks import bench_latency, bench_reader, bench_writer, checks, run, wire
from benchmarks.common import parse_duration

LABELS = {"pub": "PUB", "sub": "SUB", "pubsub": "PUB+SUB"}
# Readers drain for at most this long after their timed window.
DRAIN_CAP_S = 60.0
# The targets for the 1x1 memory rows: (row, direction, minimum msg/s).
RATE_TARGETS: tuple[tuple[str, str, float], ...] = (
    ("1x1 PUB", "in", 550_000),
    ("1x1 SUB", "out", 300_000),
    ("1x1 PUB+SUB", "in", 300_000),
    ("1x1 PUB+SUB", "out", 250_000),
)
LATENCY_TARGET = (10_000, "p99", 5.0)  # rate, percentile, maximum ms
# Go nsqd v1.3.0 on this machine class, bench.sh settings (benchmarks/README.md).
GO_CALIBRATION = {"1x1 PUB": 530_000, "1x1 SUB": 275_000}
LATENCY_RATES = (1_000, 10_000, 50_000)


@dataclass(frozen=True)
class Layout:
    """Topics x channels, and the RDY each reader connection opens."""

    topics: int
    channels: int
    rdy: int

    def topic_names(self, prefix: str) -> tuple[str, ...]:
        if self.topics == 1:
            return (prefix,)
        return tuple(f"{prefix}_{i:03d}" for i in range(self.topics))

    def subscriptions(self, topics: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        names = ("ch",) if self.channels == 1 else tuple(f"ch{i}" for i in range(self.channels))
        return tuple((t, c) for t in topics for c in names)


L1X1, L1X4, L100 = Layout(1, 1, 2500), Layout(1, 4, 2500), Layout(100, 1, 50)


@dataclass(frozen=True)
class Group:
    """One broker's worth of the matrix."""

    name: str
    mode: str  # memory | disk | sink
    layout: Layout
    phases: tuple[str, ...]
    runfor: float
    idle: int = 0
    repetition: int = 1


def schedule(args: argparse.Namespace) -> list[Group]:
    """The groups in run order, the 1x1 repetitions spread between the others."""
    short = args.runfor_s if args.runfor_s else 3.0
    full = args.runfor_s if args.runfor_s else 5.0
    rates = tuple(f"lat{r}" for r in args.latency_rates)
    others = [
        Group("1x4", "memory", L1X4, ("pub", "sub", "pubsub"), short),
        Group("100 topics", "memory", L100, ("pub", "sub", "pubsub"), short),
        Group("1x1 +1000 idle", "memory", L1X1, ("pubsub",), full, idle=args.idle_connections),
        Group("latency", "memory", L1X1, rates, full),
        Group("disk 1x1", "disk", L1X1, ("pub", "sub", "pubsub"), full),
    ]
    groups = [Group("sink 1x1", "sink", L1X1, ("pub", "sub", "pubsub"), short)]
    per_rep, extra = divmod(len(others), args.repeat)
    for rep in range(1, args.repeat + 1):
        groups.append(Group("1x1", "memory", L1X1, ("pub", "sub", "pubsub"), full, repetition=rep))
        take = per_rep + (1 if rep <= extra else 0)
        groups.extend(others[:take])
        others = others[take:]
    return groups


# --- one group on one broker --------------------------------------------------------------------


@dataclass
class GroupRun:
    group: Group
    target: run.Target
    stamp: str
    size: int
    published: int = 0  # the last pub phase's count, for the sub phase after it

    @property
    def checked(self) -> bool:
        return self.group.mode != "sink"


def writer_config(gr: GroupRun, topics: tuple[str, ...], runfor: float) -> Any:
    return bench_writer.WriterConfig(
        address=gr.target.tcp, topic=topics[0], topics=topics, size=gr.size, runfor=runfor
    )


def reader_config(gr: GroupRun, topics: tuple[str, ...], runfor: float, **kw: Any) -> Any:
    layout = gr.group.layout
    return bench_reader.ReaderConfig(
        address=gr.target.tcp,
        size=gr.size,
        runfor=runfor,
        rdy=layout.rdy,
        subscriptions=layout.subscriptions(topics),
        processes=2,
        drain=DRAIN_CAP_S if gr.checked else 0.0,
        **kw,
    )


def create_channels(gr: GroupRun, topics: tuple[str, ...]) -> None:
    for topic, channel in gr.group.layout.subscriptions(topics):
        run.create_channel(gr.target.tcp, gr.target.http, topic, channel)


def received(summary: dict[str, Any]) -> int:
    return int(summary["msgs"] + summary.get("counters", {}).get("tail_msgs", 0))


def run_pub(gr: GroupRun) -> dict[str, Any]:
    topics = gr.group.layout.topic_names(f"pub_{gr.stamp}")
    if gr.checked:
        create_channels(gr, topics)
    phase = run.Phase("pub", topics[0], writers=writer_config(gr, topics, gr.group.runfor))
    result = run.run_phase(phase, gr.target, run.Fanout(2, 2), gr.size)
    gr.published = result["in"]["msgs"]
    if gr.checked:
        stats = checks.settled_stats(gr.target.http, topics)
        result["stats"] = stats
        result["checks"] = [checks.check_pub(gr.published, gr.group.layout.channels, stats)]
        if gr.group.name == "1x1" and "broker" in result:  # memory mode, the case
            peak = result["broker"]["peak_rss_mib"]
            result["checks"].append(checks.check_memory(stats, peak, gr.size))
    return result


def run_sub(gr: GroupRun) -> dict[str, Any]:
    topics = gr.group.layout.topic_names(f"pub_{gr.stamp}")
    readers = reader_config(gr, topics, gr.group.runfor, idle_exit=run.DRAIN_IDLE_S)
    result = run.run_phase(
        run.Phase("sub", topics[0], readers=readers), gr.target, run.Fanout(2, 2), gr.size
    )
    add_drain_checks(gr, result, topics, gr.published)
    return result


def run_pubsub(gr: GroupRun) -> dict[str, Any]:
    topics = gr.group.layout.topic_names(f"pubsub_{gr.stamp}")
    phase = run.Phase(
        "pubsub",
        topics[0],
        writers=writer_config(gr, topics, gr.group.runfor),
        readers=reader_config(gr, topics, gr.group.runfor),
    )
    result = run.run_phase(phase, gr.target, run.Fanout(2, 2), gr.size)
    add_drain_checks(gr, result, topics, result["in"]["msgs"])
    return result


def add_drain_checks(
    gr: GroupRun, result: dict[str, Any], topics: tuple[str, ...], published: int
) -> None:
    if not gr.checked:
        return
    stats = checks.settled_stats(gr.target.http, topics)
    result["stats"] = stats
    got = received(result["out"])
    result["checks"] = [checks.check_drained(published, gr.group.layout.channels, got, stats)]


def run_latency(gr: GroupRun, rate: int) -> dict[str, Any]:
    topic = f"lat{rate}_{gr.stamp}"
    tcp, runfor = gr.target.tcp, gr.group.runfor
    phase = run.Phase(
        f"latency {rate}/s",
        topic,
        writers=bench_latency.PacedConfig(tcp, topic, rate, runfor, gr.size),
        readers=bench_latency.LatencyConfig(tcp, topic, runfor=runfor),
        writer_fn=bench_latency.run_paced,
        reader_fn=bench_latency.run_timing_reader,
    )
    result = run.run_phase(phase, gr.target, run.Fanout(1, 1), gr.size)
    published = result["in"]["msgs"]
    result["rate"] = rate
    result["achieved"] = bench_latency.achieved(rate, result["in"]["msgs_per_s"])
    add_drain_checks(gr, result, (topic,), published)
    result["checks"].append(checks.check_unique(result["out"].get("counters", {}), published))
    return result


def run_phases(gr: GroupRun) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name in gr.group.phases:
        print(f"# {gr.group.name}: {name}", flush=True)
        if name.startswith("lat"):
            results[name] = run_latency(gr, int(name[3:]))
        else:
            results[name] = {"pub": run_pub, "sub": run_sub, "pubsub": run_pubsub}[name](gr)
        for check in results[name].get("checks", []):
            print(
                f"    check {check['check']}: {'ok' if check['pass'] else 'FAIL'} "
                f"({check['detail']})",
                flush=True,
            )
    return results


# --- idle connections ---------------------------------------------------------------------------


@contextlib.contextmanager
def idle_connections(tcp: str, count: int, record: dict[str, Any]) -> Any:
    """``count`` idle subscribers held by benchmarks.idle_conns for the duration of the block."""
    if not count:
        yield
        return
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.idle_conns",
        f"--nsqd-tcp-address={tcp}",
        f"--count={count}",
        "--lifetime=600s",
    ]
    proc = subprocess.Popen(cmd, cwd=run.ROOT, stdout=subprocess.PIPE, text=True)
    try:
        record["ready"] = wait_line(proc, "READY", timeout=90.0)
        print(f"# {record['ready']} idle connections", flush=True)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        record["returncode"] = proc.returncode
        record["summary"] = (out or "").strip().splitlines()[-1:] or None


def wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first stdout line of ``proc`` starting with ``prefix`` (bounded wait)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line.strip()
    raise TimeoutError(f"{proc.args!r} did not print {prefix} in time")


def idle_clients(gr: GroupRun) -> int:
    """How many clients the broker lists on the idle topic (-1 without /stats)."""
    stats = checks.fetch_stats(gr.target.http)
    return checks.aggregate(stats, {"idle_bench"})["clients"] if stats else -1


def idle_check(gr: GroupRun, idle: dict[str, Any]) -> dict[str, Any]:
    """All idle subscribers connected, seen by the broker, and none failed or was dropped."""
    want = gr.group.idle
    summary = (idle.get("summary") or ["{}"])[0]
    ok = idle.get("ready", "").startswith(f"READY {want} ") and '"errors": 0' in summary
    ok = ok and f'"subscribed": {want}' in summary and idle.get("broker_clients") == want
    detail = f"{idle.get('broker_clients')} idle clients at the broker after the load; {summary}"
    return checks.verdict("idle", ok, detail)


# --- the broker around a group ------------------------------------------------------------------


def group_args(args: argparse.Namespace, group: Group) -> argparse.Namespace:
    ga = argparse.Namespace(**vars(args))
    ga.sink = group.mode == "sink"
    ga.mode = "memory" if ga.sink else group.mode
    ga.mem_queue_size = None
    ga.runfor = f"{group.runfor}s"
    return ga


def run_group(args: argparse.Namespace, group: Group, index: int) -> dict[str, Any]:
    """Start the group's broker, run its phases, stop it; the group's record."""
    record: dict[str, Any] = {
        "group": group.name,
        "mode": group.mode,
        "repetition": group.repetition,
        "runfor_s": group.runfor,
    }
    ga = group_args(args, group)
    with run.fresh_data_path(run.data_root(args)) as data_path:
        broker = run.Broker(run.broker_command(ga, data_path), want_http=not ga.sink)
        record["broker_cmd"] = broker.cmd
        try:
            tcp, http = broker.wait_listening(parse_duration(args.startup_timeout))
            gr = GroupRun(group, run.Target(tcp, http, broker.pid), f"g{index}", args.size)
            idle: dict[str, Any] = {}
            with idle_connections(tcp, group.idle, idle):
                record["phases"] = run_phases(gr)
                if group.idle:
                    idle["broker_clients"] = idle_clients(gr)
            if group.idle:
                record["idle"] = idle
                record["phases"]["pubsub"]["checks"].append(idle_check(gr, idle))
        except (RuntimeError, TimeoutError, OSError, ValueError, wire.ProtocolError) as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
            print(f"group {group.name} aborted: {exc}", file=sys.stderr)
        finally:
            record["broker_exit"] = end = broker.stop()
    if end["exited_before_stop"] or end["killed"]:
        record.setdefault("error", f"broker ended badly: {end}")
    return record


def run_matrix(args: argparse.Namespace) -> list[dict[str, Any]]:
    records = []
    groups = schedule(args)
    for index, group in enumerate(groups, 1):
        refusal = run.check_free_space(run.data_root(args))
        if refusal:
            print(f"full run stopped early: {refusal}", file=sys.stderr)
            break
        print(
            f"\n## [{index}/{len(groups)}] {group.name} ({group.mode}, "
            f"repetition {group.repetition})",
            flush=True,
        )
        records.append(run_group(args, group, index))
    return records


# --- folding the records into rows ------------------------------------------------------------


def rows_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (group, phase): medians over repetitions, every check."""
    acc: dict[str, dict[str, Any]] = {}
    for rec in records:
        for phase, result in (rec.get("phases") or {}).items():
            if phase.startswith("lat"):
                continue
            name = f"{rec['group']} {LABELS[phase]}"
            row = acc.setdefault(name, new_row(name, rec, phase))
            add_to_row(row, result)
    for row in acc.values():
        for key in ("in", "out", "cpu_s", "cpu_pct", "peak_rss_mib"):
            values = row.pop(f"{key}_all")
            row[key] = statistics.median(values) if values else None
            row[f"{key}_all"] = values
    return list(acc.values())


def new_row(name: str, rec: dict[str, Any], phase: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "row": name,
        "group": rec["group"],
        "mode": rec["mode"],
        "phase": phase,
        "checks": [],
    }
    row.update({f"{k}_all": [] for k in ("in", "out", "cpu_s", "cpu_pct", "peak_rss_mib")})
    return row


def add_to_row(row: dict[str, Any], result: dict[str, Any]) -> None:
    for kind in ("in", "out"):
        if kind in result:
            row[f"{kind}_all"].append(result[kind]["msgs_per_s"])
    broker = result.get("broker")
    if broker:
        row["cpu_s_all"].append(broker["cpu_s"])
        row["cpu_pct_all"].append(broker["cpu_pct_of_one_core"])
        row["peak_rss_mib_all"].append(broker["peak_rss_mib"])
    row["checks"].extend(result.get("checks", []))
    row["errors"] = row.get("errors", []) + [
        e for kind in ("in", "out") for e in (result.get(kind) or {}).get("errors", [])
    ]


def latency_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        for phase, result in (rec.get("phases") or {}).items():
            if not phase.startswith("lat"):
                continue
            out: dict[str, Any] = result.get("out", {})
            broker = result.get("broker") or {}
            rows.append(
                {
                    "rate": result["rate"],
                    "achieved_msgs_per_s": result["in"]["msgs_per_s"],
                    "achieved": result["achieved"],
                    "latency_ms": out.get("latency_ms", {}),
                    "broker_stamp_ms": out.get("broker_stamp_ms", {}),
                    "counters": {**result["in"].get("counters", {}), **out.get("counters", {})},
                    "cpu_s": broker.get("cpu_s"),
                    "peak_rss_mib": broker.get("peak_rss_mib"),
                    "checks": result.get("checks", []),
                }
            )
    return rows


def rate_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {r["row"]: r for r in rows}
    verdicts = []
    for name, kind, minimum in RATE_TARGETS:
        value = (by_name.get(name) or {}).get(kind)
        target = f"{name} {kind} >= {minimum / 1000:,.0f}k msg/s"
        verdicts.append(
            {"target": target, "measured": value, "pass": value is not None and value >= minimum}
        )
    return verdicts


def latency_target(lat: list[dict[str, Any]]) -> dict[str, Any]:
    rate, pct, limit = LATENCY_TARGET
    hit = next((r for r in lat if r["rate"] == rate), None)
    value = hit["latency_ms"].get(pct) if hit else None
    return {
        "target": f"{pct} e2e latency <= {limit:g} ms at {rate / 1000:g}k msg/s",
        "measured": value,
        "unit": "ms" if hit and hit["achieved"] else "ms (rate not achieved)",
        "pass": bool(hit and hit["achieved"] and value is not None and value <= limit),
    }


def counts_target(checks_run: list[dict[str, Any]]) -> dict[str, Any]:
    counts = [c for c in checks_run if c["check"] != "memory"]
    return {
        "target": "no message lost or duplicated, idle connections held (every check)",
        "measured": f"{sum(c['pass'] for c in counts)}/{len(counts)} ok",
        "pass": bool(counts) and all(c["pass"] for c in counts),
    }


def targets(rows: list[dict[str, Any]], lat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target of the issue with its verdict."""
    all_checks = [c for r in rows + lat for c in r["checks"]]
    return [
        *rate_targets(rows),
        latency_target(lat),
        counts_target(all_checks),
        memory_target([c for c in all_checks if c["check"] == "memory"]),
    ]


def memory_target(memory: list[dict[str, Any]]) -> dict[str, Any]:
    """The memory verdict over the 1x1 PUB runs, showing the tightest one."""
    worst = max(memory, key=lambda c: c["peak_rss_mib"] / c["limit_mib"], default=None)
    shown = None if worst is None else f"{worst['detail']} (tightest of {len(memory)})"
    return {
        "target": "1x1 PUB peak RSS <= 2 x held + 100 MiB",
        "measured": shown,
        "pass": bool(memory) and all(c["pass"] for c in memory),
    }


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    rows = rows_of(records)
    lat = latency_rows(records)
    return {
        "rows": rows,
        "latency": lat,
        "targets": targets(rows, lat),
        "go_calibration": GO_CALIBRATION,
    }


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")

"""The disk-mode benchmark matrix: what ``run.py --suite`` runs and how it folds the results.

Each entry of ``MATRIX`` gets its own broker with a fresh data path. Repetitions are
interleaved (memory, disk, durable, durable-8w, then again) so that a noisy minute hits every
mode alike; the table shows medians. ``vs memory`` divides a row's rate (in for PUB and PUB+SUB,
out for SUB) by the memory-mode rate of the same scenario; for PUB rows that is the issue's
"fraction of the in-memory PUB rate".
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

# The targets: (matrix entry, scenario, minimum fraction of the memory-mode PUB rate).
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("disk", "pub", 0.50),
    ("durable-8w", "pub", 0.20),
)
LABELS = {"pub": "PUB", "sub": "SUB", "pubsub": "PUB+SUB"}


@dataclass(frozen=True)
class Spec:
    """One broker run of the matrix."""

    name: str
    mode: str
    scenario: str
    writer_connections: int | None = None  # None: the same as --connections


MATRIX: tuple[Spec, ...] = (
    Spec("memory", "memory", "all"),
    Spec("disk", "disk", "all"),
    Spec("durable", "durable", "all"),
    Spec("durable-8w", "durable", "pub", writer_connections=8),
)


def args_for(args: argparse.Namespace, spec: Spec) -> argparse.Namespace:
    """The suite's flags with this entry's mode, scenario and writer count."""
    run_args = argparse.Namespace(**vars(args))
    run_args.suite = False
    run_args.mode = spec.mode
    run_args.scenario = spec.scenario
    run_args.writer_connections = spec.writer_connections or args.connections
    run_args.mem_queue_size = None  # the mode decides
    return run_args


def entry(spec: Spec, repetition: int, doc: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "mode": spec.mode,
        "repetition": repetition,
        "writer_connections": spec.writer_connections,
        "doc": doc,
    }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _primary(phase: str) -> str:
    return "out" if phase == "sub" else "in"


def _new_row(name: str, mode: str, phase: str, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "mode": mode,
        "scenario": phase,
        "writer_connections": result.get("writer_connections", 0),
        "reader_connections": result.get("reader_connections", 0),
        **{k: [] for k in ("in", "out", "cpu_pct", "peak_rss_mib")},
    }


def _add(row: dict[str, Any], result: dict[str, Any]) -> None:
    for kind in ("in", "out"):
        if kind in result:
            row[kind].append(result[kind]["msgs_per_s"])
    broker = result.get("broker") or {}
    if broker.get("cpu_pct_of_one_core") is not None:
        row["cpu_pct"].append(broker["cpu_pct_of_one_core"])
        row["peak_rss_mib"].append(broker["peak_rss_mib"])


def _collect(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (matrix entry, scenario): every repetition's figures, in matrix order."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        for phase, result in ((run["doc"] or {}).get("scenarios") or {}).items():
            key = (run["name"], phase)
            if key not in rows:
                rows[key] = _new_row(run["name"], run["mode"], phase, result)
            _add(rows[key], result)
    return rows


def _verdict(
    rows: dict[tuple[str, str], dict[str, Any]], name: str, phase: str, minimum: float
) -> dict[str, Any]:
    measured: float | None = (rows.get((name, phase)) or {}).get("vs_memory")
    return {
        "row": f"{name} {LABELS[phase]}",
        "min_vs_memory_pub": minimum,
        "measured": measured,
        "pass": measured is not None and measured >= minimum,
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per row, the ratio to memory mode, and the targets' verdicts."""
    rows = _collect(runs)
    for row in rows.values():
        row["median"] = {k: _median(row[k]) for k in ("in", "out", "cpu_pct", "peak_rss_mib")}
    for (name, phase), row in rows.items():
        base = rows.get(("memory", phase))
        rate = row["median"][_primary(phase)]
        base_rate = base["median"][_primary(phase)] if base else None
        ratio = rate / base_rate if name != "memory" and rate and base_rate else None
        row["vs_memory"] = round(ratio, 3) if ratio is not None else None
    targets = [_verdict(rows, name, phase, minimum) for name, phase, minimum in TARGETS]
    return {"summary": list(rows.values()), "targets": targets}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _range(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    return f"{min(values) / 1000:,.0f}k-{max(values) / 1000:,.0f}k"


def print_table(summary: dict[str, Any], args: argparse.Namespace) -> None:
    head = ("scenario", "w/r", "in msg/s", "out msg/s", "range", "CPU %", "RSS MiB", "vs mem", "n")
    widths = (20, 6, 11, 11, 13, 7, 9, 8, 3)

    def line(cells: tuple[str, ...]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        return first + "".join(f"{c:>{w}}" for c, w in zip(cells[1:], widths[1:], strict=True))

    print(f"\n# suite: --runfor {args.runfor}, medians of {args.repeat} repetition(s)")
    print(line(head))
    for row in summary["summary"]:
        med = row["median"]
        cells = (
            f"{row['name']} {LABELS[row['scenario']]}",
            f"{row['writer_connections']}/{row['reader_connections']}",
            _fmt(med["in"], ",.0f"),
            _fmt(med["out"], ",.0f"),
            _range(row[_primary(row["scenario"])]),
            _fmt(med["cpu_pct"], ".0f"),
            _fmt(med["peak_rss_mib"], ",.0f"),
            _fmt(row["vs_memory"], ".2f"),
            str(len(row[_primary(row["scenario"])])),
        )
        print(line(cells))
    for target in summary["targets"]:
        verdict = "PASS" if target["pass"] else "FAIL"
        print(
            f"target {target['row']} >= {target['min_vs_memory_pub']:.0%} of memory PUB: "
            f"{_fmt(target['measured'], '.2f')} -> {verdict}"
        )

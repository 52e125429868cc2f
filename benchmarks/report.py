"""Presenting a full run: the console table, the Markdown block for docs, and the PNG chart.

``write_chart`` needs matplotlib (the ``dev`` extra); without it the run still writes its JSON
and table and says that the chart was skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchmarks.full import GO_CALIBRATION, LABELS, LATENCY_TARGET, RATE_TARGETS

DOCS_BEGIN = "<!-- full-results:begin -->"
DOCS_END = "<!-- full-results:end -->"


def _k(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _checks(row: dict[str, Any]) -> str:
    checks = row.get("checks") or []
    if row.get("errors"):
        return "ERROR"
    if not checks:
        return "-"
    return "ok" if all(c["pass"] for c in checks) else "FAIL"


def _rss(row: dict[str, Any]) -> str:
    return "-" if row.get("peak_rss_mib") is None else f"{row['peak_rss_mib']:,.0f}"


def _cpu(row: dict[str, Any]) -> str:
    if row.get("cpu_s") is None:
        return "-"
    return f"{row['cpu_s']:.2f} ({row['cpu_pct']:.0f}%)"


def _goal(name: str) -> str:
    """The row's targets and Go's calibration figure, e.g. ``>=550k in; Go 530k``."""
    parts = [f">={m / 1000:,.0f}k {kind}" for row, kind, m in RATE_TARGETS if row == name]
    if name in GO_CALIBRATION:
        parts.append(f"Go {GO_CALIBRATION[name] / 1000:,.0f}k")
    return "; ".join(parts) or "-"


def throughput_cells(row: dict[str, Any]) -> tuple[str, ...]:
    n = max(len(row.get("in_all") or []), len(row.get("out_all") or []))
    rates = (_k(row["in"]), _k(row["out"]), _goal(row["row"]))
    return (row["row"], *rates, _cpu(row), _rss(row), _checks(row), str(n))


THROUGHPUT_HEAD = (
    "scenario",
    "in msg/s",
    "out msg/s",
    "target; Go",
    "broker cpu-s (%)",
    "peak RSS MiB",
    "counts",
    "n",
)


def latency_cells(row: dict[str, Any]) -> tuple[str, ...]:
    lat = row["latency_ms"]
    stamp = row["broker_stamp_ms"]

    def ms(d: dict[str, float], key: str) -> str:
        return "-" if key not in d else f"{d[key]:.2f}"

    rate = f"{row['achieved_msgs_per_s']:,.0f}" + ("" if row["achieved"] else " (missed)")
    ok = "ok" if row["checks"] and all(c["pass"] for c in row["checks"]) else "FAIL"
    return (
        f"{row['rate'] / 1000:g}k msg/s",
        rate,
        ms(lat, "p50"),
        ms(lat, "p99"),
        ms(lat, "p99.9"),
        ms(lat, "max"),
        ms(stamp, "p99"),
        ok,
    )


LATENCY_HEAD = (
    "target rate",
    "achieved msg/s",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "p99 from nsqd stamp",
    "counts/dups",
)


def target_cells(target: dict[str, Any]) -> tuple[str, ...]:
    value = target["measured"]
    if isinstance(value, float | int):
        shown = f"{value:,.2f}" if value < 1000 else f"{value:,.0f}"
    else:
        shown = str(value)
    unit = target.get("unit", "")
    return (
        target["target"],
        f"{shown} {unit}".strip(),
        "**pass**" if target["pass"] else "**FAIL**",
    )


def print_table(summary: dict[str, Any], title: str) -> None:
    print(f"\n# {title}")
    _console(THROUGHPUT_HEAD, [throughput_cells(r) for r in summary["rows"]])
    print()
    _console(LATENCY_HEAD, [latency_cells(r) for r in summary["latency"]])
    print()
    for target in summary["targets"]:
        cells = target_cells(target)
        print(f"target {cells[0]}: {cells[1]} -> {cells[2].strip('*').upper()}")
    failed = [c for r in summary["rows"] + summary["latency"] for c in r["checks"] if not c["pass"]]
    for check in failed:
        print(f"failed check {check['check']}: {check['detail']}")


def _console(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]
    for cells in (head, *rows):
        first = f"{cells[0]:<{widths[0]}}"
        rest = "".join(f"  {c:>{w}}" for c, w in zip(cells[1:], widths[1:], strict=True))
        print(first + rest)


def _md(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def markdown(summary: dict[str, Any], meta: dict[str, str]) -> str:
    """The results block of docs/performance.md."""
    lines = [
        f"Run `{meta['stamp']}`: `{meta['command']}` ({meta['host']}, load average at start "
        f"{meta['load']}); raw results [`{meta['json']}`]({meta['json_link']}).",
        "",
        f"![throughput and latency]({meta['png_link']})",
        "",
        *_md(THROUGHPUT_HEAD, [throughput_cells(r) for r in summary["rows"]]),
        "",
        *_md(LATENCY_HEAD, [latency_cells(r) for r in summary["latency"]]),
        "",
        *_md(("target", "measured", "verdict"), [target_cells(t) for t in summary["targets"]]),
    ]
    return "\n".join(lines)


def update_docs(path: Path, block: str) -> bool:
    """Replace the marked results block in ``path``; False when the markers are missing."""
    text = path.read_text()
    pattern = re.compile(re.escape(DOCS_BEGIN) + ".*?" + re.escape(DOCS_END), re.S)
    if not pattern.search(text):
        return False
    path.write_text(pattern.sub(lambda _: f"{DOCS_BEGIN}\n{block}\n{DOCS_END}", text))
    return True


# --- chart ------------------------------------------------------------------------------------


def write_chart(summary: dict[str, Any], path: Path, title: str) -> bool:
    """Throughput bars per scenario (with targets and Go's figures) and latency bars."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 12), gridspec_kw={"height_ratios": [3, 1.3]}
    )
    _throughput(top, summary)
    _latency(bottom, summary)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _bars(ax: Any, y: list[float], values: list[float], label: str, color: str) -> None:
    bars = ax.barh(y, values, height=0.4, label=label, color=color)
    texts = [f"{v:,.0f}k" if v else "" for v in values]
    ax.bar_label(bars, labels=texts, fontsize=7, padding=2)


def _throughput(ax: Any, summary: dict[str, Any]) -> None:
    rows = [r for r in summary["rows"] if r["mode"] != "sink"]
    names = [r["row"] for r in rows]
    y = list(range(len(rows)))
    _bars(
        ax, [i - 0.2 for i in y], [(r["in"] or 0) / 1000 for r in rows], "in (published)", "#4c72b0"
    )
    _bars(
        ax,
        [i + 0.2 for i in y],
        [(r["out"] or 0) / 1000 for r in rows],
        "out (delivered, all channels)",
        "#55a868",
    )
    for name, kind, minimum in RATE_TARGETS:
        if name in names:
            at = names.index(name) + (-0.2 if kind == "in" else 0.2)
            ax.plot([minimum / 1000] * 2, [at - 0.25, at + 0.25], color="#c44e52", lw=2.5)
    for name, rate in GO_CALIBRATION.items():
        if name in names:
            at = names.index(name) + (0.2 if name.endswith("SUB") else -0.2)
            ax.plot(rate / 1000, at, marker="D", color="black", ls="none")
    ax.plot([], [], color="#c44e52", lw=2.5, label="target (1x1 memory)")
    ax.plot([], [], marker="D", color="black", ls="none", label="Go nsqd v1.3.0 (calibration)")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("thousand messages / s (1x1 rows: median of repetitions)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(_sink_note(summary), fontsize=9)


def _sink_note(summary: dict[str, Any]) -> str:
    sink = {r["phase"]: r for r in summary["rows"] if r["mode"] == "sink"}
    if not sink:
        return "msgs/s per scenario"
    parts = [
        f"{LABELS[k]} {d} {(sink[k][d] or 0) / 1e6:.2f}M"
        for k, d in (("pub", "in"), ("sub", "out"), ("pubsub", "in"), ("pubsub", "out"))
        if k in sink
    ]
    return "msgs/s per scenario; load generators' ceiling (sink): " + ", ".join(parts)


def _latency(ax: Any, summary: dict[str, Any]) -> None:
    from matplotlib.ticker import FormatStrFormatter

    rows = summary["latency"]
    x = list(range(len(rows)))
    peak = LATENCY_TARGET[2]
    for j, (key, color) in enumerate(
        (("p50", "#8172b2"), ("p99", "#dd8452"), ("p99.9", "#c44e52"))
    ):
        values = [r["latency_ms"].get(key, 0) for r in rows]
        peak = max([peak, *values])
        bars = ax.bar([i + (j - 1) * 0.27 for i in x], values, width=0.27, label=key, color=color)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=1)
    ax.axhline(
        LATENCY_TARGET[2],
        color="black",
        ls="--",
        lw=1,
        label=f"target: p99 <= {LATENCY_TARGET[2]:g} ms at 10k/s",
    )
    labels = [
        f"{r['rate'] / 1000:g}k msg/s" + ("" if r["achieved"] else " (rate missed)") for r in rows
    ]
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylim(top=peak * 2)
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_ylabel("publish -> delivery, ms (log)")
    ax.set_title("end-to-end latency at fixed rates (paced writer, 1 reader, FIN each)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncols=4)

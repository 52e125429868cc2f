"""A report as a text table and as a PNG chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nsqpy.spark.jobs.errors import JobError
from nsqpy.spark.jobs.report import PERCENTILES, Report


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned first column, right-aligned numbers, columns as wide as their content."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        lines.append("  ".join([first, *rest]).rstrip())
    return lines


def _ms(value: float) -> str:
    return f"{value:.1f}"


def format_report(report: Report) -> str:
    duplicates = report.rows - report.messages
    lines = [f"{report.messages} messages ({report.rows} archived rows, {duplicates} duplicates)"]
    lines += ["", "messages and bytes per topic per hour (UTC)"]
    lines += _table(
        ["topic", "hour", "messages", "bytes"],
        [(r.topic, r.hour.strftime("%Y-%m-%d %H:00"), r.messages, r.bytes) for r in report.hourly],
    )
    lines += ["", "attempts (deliveries before the message was archived)"]
    lines += _table(["attempts", "messages"], report.attempts)
    lines += ["", "publish-to-archive delay (ms)"]
    names = [f"p{round(p * 100)}" for p in PERCENTILES]
    lines += _table(
        ["topic", "messages", *names, "max"],
        [(d.topic, d.messages, *map(_ms, d.percentiles), _ms(d.max)) for d in report.delays],
    )
    return "\n".join(lines)


def write_chart(report: Report, path: Path) -> None:
    """Three panels: messages per hour per topic, attempts histogram, delay percentiles."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a server; must precede pyplot
        from matplotlib import pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise JobError("the chart needs matplotlib: pip install 'nsqpy[spark]'") from None
    fig, (hours, tries, delay) = plt.subplots(3, 1, figsize=(10, 11))
    for topic in sorted({r.topic for r in report.hourly}):
        rows = [r for r in report.hourly if r.topic == topic]
        hours.plot([r.hour for r in rows], [r.messages for r in rows], marker="o", label=topic)
    hours.set_title("messages per hour (UTC)")
    if report.hourly:
        hours.legend()
    tries.bar([str(a) for a, _ in report.attempts], [n for _, n in report.attempts])
    tries.set_title("messages by attempts")
    for counts in (hours, tries):
        counts.yaxis.set_major_locator(MaxNLocator(integer=True))
    names = [f"p{round(p * 100)}" for p in PERCENTILES]
    width = 0.8 / max(1, len(report.delays))
    for index, row in enumerate(report.delays):
        xs = [i + index * width for i in range(len(names))]
        delay.bar(xs, list(row.percentiles), width=width, label=row.topic)
    centre = width * (len(report.delays) - 1) / 2
    delay.set_xticks([i + centre for i in range(len(names))], names)
    delay.set_title("publish-to-archive delay (ms)")
    if report.delays:
        delay.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

"""The Prometheus text exposition format (version 0.0.4), written by hand, plus process metrics.

Why not ``prometheus_client``: its registry, collectors and locks suit a program that updates
metrics as it works; our daemons already keep every counter for ``/stats``, so a scrape only
has to print them, and printing a few thousand lines is all this module does. The tests parse
the output with ``prometheus_client``'s parser (a dev dependency only).

The format, as 0.0.4 defines it:

- one ``# HELP <name> <text>`` and one ``# TYPE <name> <type>`` line per family, then its
  samples ``<name>{<label>="<value>",...} <number>``, one per line, ``\\n`` line ends;
- in HELP text ``\\`` and newline are escaped as ``\\\\`` and ``\\n``; in label values also
  ``"`` as ``\\"``;
- numbers are Go ``ParseFloat`` syntax: ``NaN``, ``+Inf``, ``-Inf`` for the special values.

A counter's family is named as its samples are, ``_total`` included (what 0.0.4 exporters
write; the parser strips the suffix from the family name itself).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import re
import resource
import sys
import time
from collections.abc import Iterable
from typing import Final, Literal

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

MetricType = Literal["counter", "gauge", "summary", "untyped"]

_NAME_RE: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_ESCAPES: Final = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})
_HELP_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\n": "\\n"})


def escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.translate(_LABEL_ESCAPES)
    return value  # topic and channel names never need escaping: skip the translate


def escape_help(text: str) -> str:
    return text.translate(_HELP_ESCAPES)


def format_value(value: float) -> str:
    """A sample value: integers exactly, floats shortest round-trip, NaN/+Inf/-Inf spelled."""
    if type(value) is int:
        return str(value)
    if isinstance(value, int):
        return str(int(value))  # int(True) == 1: a bool prints as 1 or 0
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def labels(*pairs: tuple[str, str]) -> str:
    """``{name="value",...}`` with values escaped; ``""`` for no labels.

    Built once per topic or channel and shared by all of its samples, so a scrape formats each
    name once rather than once per family.
    """
    if not pairs:
        return ""
    return "{" + _pairs_text(pairs) + "}"


def more_labels(label_text: str, *pairs: tuple[str, str]) -> str:
    """``label_text`` (from ``labels``) with ``pairs`` added at the end."""
    if not label_text:
        return labels(*pairs)
    return label_text[:-1] + "," + _pairs_text(pairs) + "}"


_CHECKED_LABEL_NAMES: Final[set[str]] = set()


def _pairs_text(pairs: tuple[tuple[str, str], ...]) -> str:
    for name, _ in pairs:
        if name not in _CHECKED_LABEL_NAMES:  # a handful of names, checked once each
            if not _LABEL_RE.fullmatch(name) or name.startswith("__"):
                raise ValueError(f"invalid label name {name!r}")
            _CHECKED_LABEL_NAMES.add(name)
    return ",".join([f'{name}="{escape_label_value(value)}"' for name, value in pairs])


class Family:
    """One metric family: name, type, help, and its samples as (label text, value)."""

    __slots__ = ("help", "kind", "name", "samples")

    def __init__(self, name: str, kind: MetricType, help_text: str) -> None:
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"invalid metric name {name!r}")
        self.name = name
        self.kind = kind
        self.help = help_text
        self.samples: list[tuple[str, float]] = []

    def add(self, value: float, label_text: str = "") -> None:
        """A sample; ``label_text`` comes from ``labels``."""
        self.samples.append((label_text, value))


def render(families: Iterable[Family]) -> str:
    """The exposition text of ``families``; each name must appear once."""
    lines: list[str] = []
    seen: set[str] = set()
    for family in families:
        name = family.name
        if name in seen:
            raise ValueError(f"metric family {name} appears twice")
        seen.add(name)
        lines.append(f"# HELP {name} {escape_help(family.help)}")
        lines.append(f"# TYPE {name} {family.kind}")
        lines.extend(
            [
                # ints (most samples) inline: a call per sample is a tenth of the scrape
                f"{name}{text} {value}"
                if type(value) is int
                else f"{name}{text} {format_value(value)}"
                for text, value in family.samples
            ]
        )
    lines.append("")
    return "\n".join(lines)


# -- the process ----------------------------------------------------------------------------------


def _statm_bytes() -> tuple[int, int] | None:
    """(virtual, resident) bytes from /proc/self/statm; None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            fields = statm.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return int(fields[0]) * page, int(fields[1]) * page
    except (OSError, ValueError, IndexError):
        return None


def _open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def _boot_start_time() -> float | None:
    """The process's start as unix seconds: /proc/self/stat field 22 plus the boot time."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            # the command name (field 2) may hold spaces: count fields after its ")"
            after_name = stat.read().rpartition(b")")[2].split()
        ticks = int(after_name[19])
        with open("/proc/stat", "rb") as system:
            btime = next(int(line.split()[1]) for line in system if line.startswith(b"btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


#: Read once: it never changes, and /proc/stat is not free to scan.
_START_TIME: Final = _boot_start_time() or time.time()


def process_families() -> list[Family]:
    """The process metrics every Prometheus client library exports, under the same names,
    so existing dashboards and alerts work: memory, CPU, file descriptors, start time, and
    Python's own (garbage collections per generation, interpreter version)."""
    families: list[Family] = []
    memory = _statm_bytes()
    resident = Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
    if memory is not None:
        virtual = Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
        virtual.add(memory[0])
        resident.add(memory[1])
        families.append(virtual)
    else:  # the peak, where there is no /proc (kilobytes on Linux, bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        resident.add(peak if sys.platform == "darwin" else peak * 1024)
    families.append(resident)
    times = os.times()
    cpu = Family(
        "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds."
    )
    cpu.add(times.user + times.system)
    families.append(cpu)
    fds = _open_fds()
    if fds is not None:
        open_fds = Family("process_open_fds", "gauge", "Number of open file descriptors.")
        open_fds.add(fds)
        families.append(open_fds)
    max_fds = Family("process_max_fds", "gauge", "Maximum number of open file descriptors.")
    soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    max_fds.add(math.inf if soft_limit == resource.RLIM_INFINITY else soft_limit)
    families.append(max_fds)
    start = Family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    )
    start.add(_START_TIME)
    families.append(start)
    families.extend(python_families())
    return families


def python_families() -> list[Family]:
    """``python_gc_*`` per generation and ``python_info``, as prometheus_client names them."""
    collections = Family(
        "python_gc_collections_total", "counter", "Number of times this generation was collected"
    )
    collected = Family(
        "python_gc_objects_collected_total", "counter", "Objects collected during gc"
    )
    uncollectable = Family(
        "python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC"
    )
    for generation, counts in enumerate(gc.get_stats()):
        text = labels(("generation", str(generation)))
        collections.add(counts["collections"], text)
        collected.add(counts["collected"], text)
        uncollectable.add(counts["uncollectable"], text)
    info = Family("python_info", "gauge", "Python platform information")
    major, minor, patch = platform.python_version_tuple()
    info.add(
        1,
        labels(
            ("implementation", platform.python_implementation()),
            ("major", major),
            ("minor", minor),
            ("patchlevel", patch),
            ("version", platform.python_version()),
        ),
    )
    return [collections, collected, uncollectable, info]

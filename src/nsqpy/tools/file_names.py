"""nsq_to_file's file names and the options that shape them, plus the clock they read.

A name is ``--filename-format`` with ``<TOPIC> <HOST> <PID>`` fixed per topic at start-up,
``<DATETIME>`` (strftime of the wall clock) filled in whenever a file is opened, and ``<REV>``
(``-%06d``) bumped until a name is free. ``<REV>`` is required whenever names could repeat:
gzip (a file is never appended to), rotation, or a separate work dir.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from dataclasses import dataclass
from typing import Final, Protocol

REV_REQUIRED: Final = "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"


class Clock(Protocol):
    """Where the logger reads time: wall clock for names, monotonic for rotate-interval."""

    def now(self) -> dt.datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock: local wall time (as Go's ``time.Now``) and ``time.monotonic``."""

    def now(self) -> dt.datetime:
        return dt.datetime.now().astimezone()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class FileOptions:
    """The flags that decide file names and rotation (seconds for durations)."""

    output_dir: str = "/tmp"
    work_dir: str = ""  # "" means the output dir, as in NSQ
    datetime_format: str = "%Y-%m-%d_%H"
    filename_format: str = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    host_identifier: str = ""
    gzip: bool = False
    gzip_level: int = 6
    rotate_size: int = 0
    rotate_interval: float = 0.0

    @property
    def effective_work_dir(self) -> str:
        return self.work_dir or self.output_dir

    @property
    def needs_rev(self) -> bool:
        """Whether names can repeat, so ``<REV>`` must be there to tell files apart."""
        return (
            self.gzip
            or self.rotate_size > 0
            or self.rotate_interval > 0
            or self.effective_work_dir != self.output_dir
        )


def host_identifier(template: str, hostname: str) -> str:
    """The ``<HOST>`` value: the short hostname, or ``--host-identifier`` with its tokens."""
    short = hostname.split(".")[0]
    if not template:
        return short
    return template.replace("<SHORT_HOST>", short).replace("<HOSTNAME>", hostname)


def compute_filename_format(
    opts: FileOptions, topic: str, *, hostname: str | None = None, pid: int | None = None
) -> str:
    """The per-topic name template, still holding ``<DATETIME>`` (and ``<REV>`` when needed).

    Raises ValueError with NSQ's message when ``<REV>`` is needed but missing.
    """
    name = opts.filename_format
    if opts.needs_rev:
        if "<REV>" not in name:
            raise ValueError(REV_REQUIRED)
    else:
        name = name.replace("<REV>", "")
    host = host_identifier(opts.host_identifier, hostname or socket.gethostname())
    name = name.replace("<TOPIC>", topic).replace("<HOST>", host)
    name = name.replace("<PID>", str(os.getpid() if pid is None else pid))
    if opts.gzip and not name.endswith(".gz"):
        name += ".gz"
    return name


def go_path_join(*parts: str) -> str:
    """Go's ``path.Join``: join the non-empty parts with "/" and clean the result."""
    joined = "/".join(part for part in parts if part)
    return os.path.normpath(joined) if joined else ""


def rev_name(template: str, rev: int) -> str:
    return template.replace("<REV>", f"-{rev:06d}")

"""Daemons for tests: as their own process (ports read from the log), or in-process."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

LISTENING = re.compile(rb"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")

Started = tuple[asyncio.subprocess.Process, dict[str, int], list[bytes]]


async def start_process(cmd: Sequence[str], *args: str) -> Started:
    """Run ``cmd args``; return once it logged its TCP and HTTP ports (with the lines so far)."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    ports: dict[str, int] = {}
    lines: list[bytes] = []
    async with asyncio.timeout(20):
        while len(ports) < 2:
            line = await proc.stderr.readline()
            assert line, b"".join(lines)
            lines.append(line)
            if match := LISTENING.search(line):
                ports[match.group(1).decode()] = int(match.group(2))
    return proc, ports, lines


async def stop_process(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> int:
    """Signal the daemon and return its exit status."""
    proc.send_signal(sig)
    async with asyncio.timeout(10):
        return await proc.wait()


class Daemon(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


D = TypeVar("D", bound=Daemon)
OptionsT = TypeVar("OptionsT")


@asynccontextmanager
async def in_process(
    build: Callable[[int, dict[str, Any]], D],
) -> AsyncIterator[Callable[..., Awaitable[D]]]:
    """A factory of in-process daemons: ``start(**overrides)`` builds the n-th one with
    ``build(n, overrides)`` and starts it; every one started is stopped on exit."""
    started: list[D] = []

    async def start(**overrides: Any) -> D:
        daemon = build(len(started), overrides)
        await daemon.start()
        started.append(daemon)
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            await daemon.stop()


def with_overrides(opts: OptionsT, overrides: dict[str, Any]) -> OptionsT:
    """``opts`` with each override set by field name."""
    for name, value in overrides.items():
        setattr(opts, name, value)
    return opts

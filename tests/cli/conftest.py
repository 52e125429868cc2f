"""Utilities as real processes (``python -m nsqpy.cli.<name>``) against in-process daemons.

The daemons run in the test's event loop, so every wait here is async: a tool is a subprocess
whose stdout lines arrive on a queue and whose stderr is collected as it comes.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from conftest import POLL_INTERVAL
from v2client import RawV2

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions
from nsqpy.protocol.frames import Message

#: What Go's log package writes before a message: ``2006/01/02 15:04:05 ``.
GO_LOG_PREFIX = r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d "
ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}


def fatal_line(message: str) -> re.Pattern[str]:
    """The whole stderr of a utility that stopped with ``log.Fatal(message)``."""
    return re.compile(GO_LOG_PREFIX + re.escape(message) + r"\n\Z")


@dataclass
class Result:
    code: int
    out: bytes
    err: str


async def run_tool(name: str, *args: str, stdin: bytes = b"", timeout: float = 30) -> Result:
    """Run a utility to completion with ``stdin`` as its input."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", f"nsqpy.cli.{name}", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(timeout):
        out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return Result(proc.returncode, out, err.decode())


class Tool:
    """A long-running utility: lines from stdout on demand, stderr collected, signals."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr = ""
        self._lines: asyncio.Queue[bytes] = asyncio.Queue()
        self._readers = [
            asyncio.ensure_future(self._read_stdout()),
            asyncio.ensure_future(self._read_stderr()),
        ]

    @classmethod
    async def start(cls, name: str, *args: str) -> Tool:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", f"nsqpy.cli.{name}", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc)

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self._lines.put_nowait(line)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(4096):
            self.stderr += chunk.decode()

    async def line(self, timeout: float = 10) -> bytes:
        async with asyncio.timeout(timeout):
            return await self._lines.get()

    async def lines(self, count: int, timeout: float = 10) -> list[bytes]:
        return [await self.line(timeout) for _ in range(count)]

    def pending_lines(self) -> list[bytes]:
        out = []
        while not self._lines.empty():
            out.append(self._lines.get_nowait())
        return out

    async def stderr_contains(self, text: str, timeout: float = 10) -> None:
        try:
            async with asyncio.timeout(timeout):
                while text not in self.stderr:
                    await asyncio.sleep(POLL_INTERVAL)
        except TimeoutError:
            raise AssertionError(f"{text!r} not in stderr: {self.stderr!r}") from None

    async def wait(self, timeout: float = 15) -> int:
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            await asyncio.gather(*self._readers)
        return code

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return await self.wait()

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


@pytest.fixture
async def tools() -> AsyncIterator[Callable[..., Any]]:
    """Start tools that are killed after the test if still running."""
    started: list[Tool] = []

    async def start(name: str, *args: str) -> Tool:
        tool = await Tool.start(name, *args)
        started.append(tool)
        return tool

    yield start
    for tool in started:
        tool.kill()
        await tool.wait()


def tcp(nsqd: NSQD) -> str:
    return f"127.0.0.1:{nsqd.tcp_port}"


def http(nsqd: NSQD) -> str:
    return f"127.0.0.1:{nsqd.http_port}"


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url, headers=ACCEPT_V1) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())
        return json.loads(await resp.read())


async def post(url: str, data: bytes) -> None:
    async with aiohttp.ClientSession() as session, session.post(url, data=data) as resp:
        assert resp.status == 200, (url, resp.status, await resp.text())


async def publish(nsqd: NSQD, topic: str, *bodies: bytes) -> None:
    """Publish over HTTP, in order, one MPUB (bodies must not contain newlines)."""
    await post(f"http://{http(nsqd)}/mpub?topic={topic}", b"\n".join(bodies))


async def topic_stats(nsqd: NSQD, topic: str) -> dict[str, Any] | None:
    doc = await get_json(f"http://{http(nsqd)}/stats?format=json&topic={topic}")
    for stats in doc["topics"] or []:
        if stats["topic_name"] == topic:
            result: dict[str, Any] = stats
            return result
    return None


async def channel_stats(nsqd: NSQD, topic: str, channel: str) -> dict[str, Any] | None:
    stats = await topic_stats(nsqd, topic)
    for ch in (stats or {}).get("channels") or []:
        if ch["channel_name"] == channel:
            result: dict[str, Any] = ch
            return result
    return None


async def eventually(
    probe: Callable[[], Any], check: Callable[[Any], bool], timeout: float = 10
) -> Any:
    """Poll the async ``probe`` until ``check`` accepts its value; that value."""
    last: Any = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                last = await probe()
                if check(last):
                    return last
                await asyncio.sleep(POLL_INTERVAL)
    except TimeoutError:
        raise AssertionError(f"condition not met; last value {last!r}") from None


async def receive(nsqd: NSQD, topic: str, count: int, channel: str = "check") -> list[Message]:
    """Subscribe and take ``count`` messages (FINished), in delivery order."""
    conn = await RawV2.connect(nsqd.tcp_port)
    try:
        await conn.sub(topic, channel, rdy=count)
        messages = []
        for _ in range(count):
            msg = await conn.message()
            conn.cmd(f"FIN {msg.id.decode()}")
            messages.append(msg)
        return messages
    finally:
        await conn.close()


async def bodies(nsqd: NSQD, topic: str, count: int, channel: str = "check") -> list[bytes]:
    return [m.body for m in await receive(nsqd, topic, count, channel)]


@pytest.fixture
async def lookupd() -> AsyncIterator[NSQLookupd]:
    daemon = NSQLookupd(
        NsqlookupdOptions(
            tcp_address="127.0.0.1:0", http_address="127.0.0.1:0", broadcast_address="127.0.0.1"
        )
    )
    await daemon.start()
    yield daemon
    await daemon.stop()

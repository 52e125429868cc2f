"""Start-up imports: ``--version`` imports no daemon, a started daemon no HTTP client.

Each case runs a fresh interpreter, since what matters is what a new process imports; the
module lists come from ``-X importtime`` (or ``sys.modules``), so nothing here is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

LISTENING = re.compile(rb"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")
IMPORTED = re.compile(rb"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", re.MULTILINE)
#: aiohttp's client half: what a daemon needs only for auth servers and lookupd queries.
CLIENT = {"aiohttp.client", "aiohttp.connector", "aiohttp.client_reqrep"}


def imported(stderr: bytes) -> set[str]:
    return {m.decode() for m in IMPORTED.findall(stderr)}


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd"])
def test_version_imports_neither_the_daemon_nor_aiohttp(daemon: str) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", f"nsqpy.{daemon}", "--version"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith(f"{daemon} v1.3.0".encode())
    modules = imported(done.stderr)
    assert f"nsqpy.{daemon}.options" in modules  # the list is read right
    assert not {m for m in modules if m.startswith("aiohttp")}
    assert f"nsqpy.{daemon}.app" not in modules


class Daemon:
    """A daemon run with ``-X importtime``; its stderr (log and import lines) kept in order."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        self.stderr = proc.stderr
        self.lines: list[bytes] = []
        self.ports: dict[bytes, int] = {}

    async def read_line(self) -> bytes:
        line = await self.stderr.readline()
        assert line, b"".join(self.lines)  # the daemon ended
        self.lines.append(line)
        if match := LISTENING.search(line):
            self.ports[match.group(1)] = int(match.group(2))
        return line

    async def read_until(self, pattern: re.Pattern[bytes]) -> int:
        """Read up to the next line that matches; the number of lines read so far."""
        while not pattern.search(await self.read_line()):
            pass
        return len(self.lines)

    async def listening(self) -> int:
        """Read up to the TCP and HTTP listening lines; the number of lines read so far."""
        while len(self.ports) < 2:
            await self.read_line()
        return len(self.lines)

    def imported(self, first: int = 0, last: int | None = None) -> set[str]:
        return imported(b"".join(self.lines[first:last]))


@contextlib.asynccontextmanager
async def importtime_daemon(daemon: str, *flags: str) -> AsyncIterator[Daemon]:
    """Start ``daemon``; on the way out stop it with SIGTERM and check it exited cleanly."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-X", "importtime", "-m", f"nsqpy.{daemon}"),
        *("--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *flags),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    running = Daemon(proc)
    try:
        async with asyncio.timeout(30):
            yield running
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            running.lines.append(await running.stderr.read())
            assert await proc.wait() == 0, b"".join(running.lines)


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd"])
async def test_a_started_daemon_answers_ping_without_aiohttps_client(
    daemon: str, tmp_path: Path
) -> None:
    extra = [f"--data-path={tmp_path}"] if daemon == "nsqd" else []
    async with importtime_daemon(daemon, *extra) as running:
        await running.listening()
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{running.ports[b'HTTP']}/ping") as resp,
        ):
            assert resp.status == 200
    modules = running.imported()
    assert "aiohttp.web_app" in modules  # the server is there
    assert not modules & CLIENT, sorted(modules & CLIENT)


async def test_nsqd_with_a_lookupd_imports_the_client_before_it_listens(tmp_path: Path) -> None:
    """The first topic makes nsqd ask lookupd over HTTP; completing aiohttp's import then
    would hold the loop (and the topic's REGISTER) for ~0.07 s, which gnsq's suite saw."""
    flags = (f"--data-path={tmp_path}", "--lookupd-tcp-address=127.0.0.1:9")  # nothing there
    async with importtime_daemon("nsqd", *flags) as running:
        first_listening = await running.read_until(LISTENING)
    before_listening = running.imported(0, first_listening)
    assert "aiohttp.web_app" in before_listening  # the list is read right
    assert not CLIENT - before_listening, sorted(CLIENT - before_listening)


async def test_nsqd_imports_the_client_when_put_config_adds_a_lookupd(tmp_path: Path) -> None:
    """A lookupd added at run time: the import happens in that PUT, not at the next topic."""
    async with importtime_daemon("nsqd", f"--data-path={tmp_path}") as running:
        listening = await running.listening()
        url = f"http://127.0.0.1:{running.ports[b'HTTP']}/config/nsqlookupd_tcp_addresses"
        async with aiohttp.ClientSession() as http, http.put(url, data=b'["127.0.0.1:9"]'):
            pass
        put_logged = await running.read_until(re.compile(rb"PUT /config/nsqlookupd_tcp_addr"))
    assert not running.imported(0, listening) & CLIENT  # not at start-up: no lookupd yet
    in_the_put = running.imported(listening, put_logged)
    assert not CLIENT - in_the_put, sorted(CLIENT - in_the_put)


HELPER_SCRIPT = """
import json, sys
from nsqpy._internal import aioweb
web = aioweb.import_web()
client = {"aiohttp.client", "aiohttp.connector", "aiohttp.client_reqrep"}
before = sorted(client & set(sys.modules))
app = web.Application()  # the server half works on its own
import aiohttp
import aiohttp.hdrs
session_type = aiohttp.ClientSession  # the first other name runs the package's __init__
from aiohttp import ClientTimeout, web as again
from importlib.metadata import version
print(json.dumps({
    "before": before,
    "session": session_type.__module__,
    "timeout": ClientTimeout.__module__,
    "same_web": again is web,
    "version": aiohttp.__version__ == version("aiohttp"),
    "all": "ClientSession" in aiohttp.__all__,
}))
"""


def test_the_client_half_comes_with_the_first_name_that_needs_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HELPER_SCRIPT], capture_output=True, timeout=60, check=True
    )
    result = json.loads(done.stdout)
    assert result == {
        "before": [],
        "session": "aiohttp.client",
        "timeout": "aiohttp.client",
        "same_web": True,
        "version": True,
        "all": True,
    }


def test_an_aiohttp_imported_already_is_left_alone() -> None:
    script = (
        "import aiohttp, sys\n"
        "from nsqpy._internal import aioweb\n"
        "before = sys.modules['aiohttp']\n"
        "aioweb.import_web()\n"
        "print(sys.modules['aiohttp'] is before and 'aiohttp.client' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=True
    )
    assert done.stdout.strip() == b"True"

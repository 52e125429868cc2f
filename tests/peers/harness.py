"""Running a real ``python -m nsqpy.nsqd`` and third-party client peers as subprocesses.

The daemon is started exactly as a user would start it, its real ports are read from its
``TCP: listening on`` / ``HTTP: listening on`` log lines, and it is stopped with SIGTERM.
Each peer (``scripts/*_peer.*``) runs one scenario with a real client library in its own
process and prints one JSON line, so gevent's monkey-patching and tornado's IOLoop never
touch the pytest process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
NSQJS_DIR = HERE / "nsqjs"

START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0

_LISTENING = re.compile(r"INFO: (TCP|HTTP): listening on (\S+)\s*$")

#: Bodies that break naive framing: NULs, newlines, CRs, high bytes, UTF-8 and a 70 KB one
#: (bigger than nsqd's 16 KiB default output buffer and bufio sizes).
BINARY_BODIES: list[bytes] = [
    b"\x00",
    b"\x00\x01\x02\x00\x00",
    b"line one\nline two\n",
    b"\r\n\r\n\n",
    b"\xff\xfe\xfd\x00\n\x00\xff",
    "héllo wörld ✓ 日本".encode(),
    bytes(range(256)),
    b"MPUB topic\n\x00\x00\x00\x01",  # looks like a command
    bytes((i * 7 + 3) % 256 for i in range(70_000)),
]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64list(bodies: Iterable[bytes]) -> list[str]:
    return [b64(b) for b in bodies]


def bodies_of(deliveries: Iterable[dict[str, Any]]) -> list[bytes]:
    return [base64.b64decode(d["body"]) for d in deliveries]


def valid_name(text: str, suffix: str = "") -> str:
    """An NSQ topic/channel name (``[.a-zA-Z0-9_-]``, at most 64 bytes) made unique."""
    clean = re.sub(r"[^.a-zA-Z0-9_-]", "_", text)
    tail = f"-{uuid.uuid4().hex[:8]}{suffix}"
    return clean[: 64 - len(tail)] + tail


class NsqdProcess:
    """One ``python -m nsqpy.nsqd`` subprocess listening on ephemeral ports."""

    def __init__(self, data_path: Path, flags: Sequence[str] = ()) -> None:
        self.data_path = data_path
        self.flags = list(flags)
        self.tcp = ""
        self.http = ""
        self.lines: list[str] = []
        self.returncode: int | None = None
        self._cond = threading.Condition()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def tcp_port(self) -> int:
        return int(self.tcp.rpartition(":")[2])

    @property
    def http_port(self) -> int:
        return int(self.http.rpartition(":")[2])

    def log(self) -> str:
        with self._cond:
            return "".join(self.lines)

    def start(self) -> NsqdProcess:
        self.data_path.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "nsqpy.nsqd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={self.data_path}",
            *self.flags,
        ]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        with self._cond:
            while not (self.tcp and self.http):
                remaining = deadline - time.monotonic()
                if self._proc.poll() is not None or remaining <= 0:
                    break
                self._cond.wait(min(remaining, 0.5))
        if not (self.tcp and self.http):
            self.kill()
            pytest.fail(f"nsqd did not report its listeners ({cmd}):\n{self.log()}")
        return self

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            with self._cond:
                self.lines.append(line)
                match = _LISTENING.search(line)
                if match:
                    if match.group(1) == "TCP":
                        self.tcp = match.group(2)
                    else:
                        self.http = match.group(2)
                self._cond.notify_all()

    def stop(self) -> int:
        """SIGTERM; returns the exit code (killing it and failing after STOP_TIMEOUT)."""
        proc = self._proc
        assert proc is not None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"nsqd ignored SIGTERM for {STOP_TIMEOUT}s:\n{self.log()[-4000:]}")
        if self._reader is not None:
            self._reader.join(5)
        return self.returncode

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5)

    def assert_clean_exit(self) -> None:
        rc = self.stop()
        log = self.log()
        assert rc == 0, f"nsqd exited {rc} after SIGTERM:\n{log[-4000:]}"
        assert "Traceback" not in log, f"nsqd logged a traceback:\n{log[-8000:]}"


# -- peers --------------------------------------------------------------------------------------
def nsqjs_missing() -> str | None:
    """Why nsqjs peers cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (NSQJS_DIR / "node_modules" / "nsqjs" / "package.json").is_file():
        return "nsqjs is not installed (run npm install in tests/peers/nsqjs)"
    return None


def peer_command(client: str) -> list[str]:
    if client == "pynsq":
        return [sys.executable, str(SCRIPTS / "pynsq_peer.py")]
    if client == "gnsq":
        return [sys.executable, str(SCRIPTS / "gnsq_peer.py")]
    if client == "nsqjs":
        reason = nsqjs_missing()
        if reason:
            pytest.skip(reason)
        node = shutil.which("node")
        assert node is not None
        return [node, str(SCRIPTS / "nsqjs_peer.js")]
    raise ValueError(client)


async def run_peer(
    client: str,
    scenario: str,
    params: dict[str, Any],
    *,
    timeout: float = 15.0,
    expect_ok: bool = True,
) -> dict[str, Any]:
    """Run one peer scenario; returns its JSON result (failing the test when it failed)."""
    params = {"timeout": timeout, **params}
    cmd = [*peer_command(client), scenario, json.dumps(params)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(SCRIPTS),
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout + 10)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        pytest.fail(f"{client} peer {scenario} hung past {timeout + 10}s\n{err.decode()[-3000:]}")
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        pytest.fail(
            f"{client} peer {scenario} printed no JSON (rc={proc.returncode})\n"
            f"stdout: {out.decode()[-2000:]}\nstderr: {err.decode()[-3000:]}"
        )
    if expect_ok and (proc.returncode != 0 or not result.get("ok")):
        pytest.fail(
            f"{client} peer {scenario} failed (rc={proc.returncode}): "
            f"{json.dumps(result)[:3000]}\nstderr: {err.decode()[-3000:]}"
        )
    result["_rc"] = proc.returncode
    return result


def attempts_by_id(deliveries: Iterable[dict[str, Any]]) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for d in deliveries:
        seen.setdefault(d["id"], []).append(d["attempts"])
    return seen

"""An nsqd daemon as a real process, for tests that restart or kill it."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from daemon_process import LISTENING

NSQD = [sys.executable, "-m", "nsqpy.nsqd"]


class NsqdProcess:
    """One nsqd process; its stderr is read continuously (a full pipe would block it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[bytes] = []
        self.ports: dict[str, int] = {}
        self._listening = asyncio.Event()
        self._reader = asyncio.create_task(self._read_stderr())

    @classmethod
    async def start(cls, data_path: Path, *flags: str) -> NsqdProcess:
        proc = await asyncio.create_subprocess_exec(
            *NSQD,
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={data_path}",
            *flags,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        daemon = cls(proc)
        try:
            async with asyncio.timeout(20):
                await daemon._listening.wait()
        except TimeoutError:
            daemon.proc.kill()
            await daemon.wait()
            raise AssertionError(daemon.log) from None
        assert len(daemon.ports) == 2, daemon.log
        return daemon

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line)
            if match := LISTENING.search(line):
                self.ports[match.group(1).decode()] = int(match.group(2))
                if len(self.ports) == 2:
                    self._listening.set()
        self._listening.set()  # exited: start() reports the log

    @property
    def tcp_port(self) -> int:
        return self.ports["TCP"]

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.ports['HTTP']}"

    @property
    def log(self) -> str:
        return b"".join(self.lines).decode(errors="replace")

    async def wait(self, timeout: float = 15) -> int:
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            await self._reader
        return code

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return await self.wait()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.wait()

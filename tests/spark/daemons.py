"""nsqd and nsqlookupd as real processes on 127.0.0.1 port 0, driven from blocking tests.

Spark tests block in py4j calls for seconds, so the daemons cannot share the test's event loop;
as processes they also survive a SIGKILL of a Spark driver's process group.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import POLL_INTERVAL

LISTENING = re.compile(r"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL_INTERVAL)


class Daemon:
    """One daemon process; stderr is read continuously (a full pipe would block it)."""

    def __init__(self, module: str, *flags: str, command: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", module]), "--tcp-address=127.0.0.1:0",
             "--http-address=127.0.0.1:0", *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self.ports: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: len(self.ports) == 2 or self.proc.poll() is not None, 30,
                   f"{module} to listen")
        assert len(self.ports) == 2, self.log

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if match := LISTENING.search(line):
                self.ports[match.group(1)] = int(match.group(2))

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.ports['TCP']}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.ports['HTTP']}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://{self.http_address}{path}", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self._reader.join(5)


class Nsqd(Daemon):
    def __init__(self, data_path: Path, *flags: str, command: list[str] | None = None) -> None:
        data_path.mkdir(parents=True, exist_ok=True)
        super().__init__("nsqpy.nsqd", f"--data-path={data_path}", *flags, command=command)

    def channel(self, topic: str, channel: str) -> dict[str, Any]:
        """The channel's /stats entry (depth, in_flight_count, ...); {} when it does not exist."""
        stats = self.get(f"/stats?format=json&topic={topic}")
        for t in stats.get("topics", []):
            if t["topic_name"] != topic:
                continue
            for c in t["channels"]:
                if c["channel_name"] == channel:
                    return dict(c)
        return {}

    def topic_depth(self, topic: str) -> int:
        """Messages the topic itself still holds (before any channel took them)."""
        stats = self.get(f"/stats?format=json&topic={topic}")
        return sum(t["depth"] for t in stats.get("topics", []) if t["topic_name"] == topic)

    def create_channel(self, topic: str, channel: str) -> None:
        """Create the topic and channel, so that messages published later queue there."""
        for path in (f"/topic/create?topic={topic}",
                     f"/channel/create?topic={topic}&channel={channel}"):
            req = urllib.request.Request(f"http://{self.http_address}{path}", method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200


class Lookupd(Daemon):
    def __init__(self) -> None:
        super().__init__("nsqpy.nsqlookupd")


#: Go nsqd v1.3.0 (no leases), built by /work/shared/tools/build-go-nsq.sh; NSQPY_GO_NSQD
#: names another binary.
GO_NSQD = Path(os.environ.get("NSQPY_GO_NSQD", "/tmp/anch/nsq/bin/nsqd"))


class GoNsqd(Nsqd):
    """Go's nsqd: the same flags and log lines; its channel stats have the same fields."""

    def __init__(self, data_path: Path, *flags: str) -> None:
        super().__init__(data_path, *flags, command=[str(GO_NSQD)])

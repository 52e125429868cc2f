"""Discovery clusters on loopback: in-process nsqlookupd daemons and real nsqd processes.

Every daemon binds 127.0.0.1 port 0 and uses a tmp data path; the ``cluster`` fixture kills
whatever is still running afterwards. nsqlookupd runs in the test's loop on an
``OffsetClock`` (the wall clock plus a test-controlled offset) so inactivity and tombstone
lifetimes can be crossed without sleeping; nsqd runs as ``python -m nsqpy.nsqd`` so it can
be SIGKILLed and restarted on its data path.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from conftest import POLL_INTERVAL
from nsqd_process import NsqdProcess

from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions

SECOND = 1_000_000_000
ACCEPT_V1 = {"Accept": "application/vnd.nsq; version=1.0"}
#: How long registration changes may take to show up in lookupd (nsqd reconnects after 1 s).
BOUND = 5.0


class OffsetClock:
    """Wall-clock nanoseconds plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self) -> int:
        return time.time_ns() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += int(seconds * SECOND)


class Cluster:
    """Starts daemons, talks HTTP to them, and tears everything down."""

    def __init__(self, tmp_path: Path, http: aiohttp.ClientSession) -> None:
        self.tmp_path = tmp_path
        self.http = http
        self.clock = OffsetClock()
        self.lookupds: list[NSQLookupd] = []
        self.nsqds: list[NsqdProcess] = []
        self.data_paths: dict[NsqdProcess, Path] = {}
        self._n = 0

    # -- daemons ----------------------------------------------------------------------------
    async def start_lookupd(
        self, tcp_port: int = 0, http_port: int = 0, **overrides: Any
    ) -> NSQLookupd:
        opts = NsqlookupdOptions(
            tcp_address=f"127.0.0.1:{tcp_port}",
            http_address=f"127.0.0.1:{http_port}",
            broadcast_address="127.0.0.1",
        )
        for name, value in overrides.items():
            setattr(opts, name, value)
        daemon = NSQLookupd(opts, clock=self.clock)
        await daemon.start()
        self.lookupds.append(daemon)
        return daemon

    async def restart_lookupd(self, old: NSQLookupd) -> NSQLookupd:
        """Stop ``old`` and start a fresh one (empty registry) on the same ports."""
        await old.stop()
        self.lookupds.remove(old)
        return await self.start_lookupd(old.tcp_port, old.http_port)

    def new_data_path(self) -> Path:
        self._n += 1
        path = self.tmp_path / f"nsqd{self._n}"
        path.mkdir()
        return path

    async def start_nsqd(
        self, *lookupds: NSQLookupd, data_path: Path | None = None, flags: tuple[str, ...] = ()
    ) -> NsqdProcess:
        data_path = data_path or self.new_data_path()
        lookup_flags = [f"--lookupd-tcp-address=127.0.0.1:{ld.tcp_port}" for ld in lookupds]
        daemon = await NsqdProcess.start(
            data_path, "--broadcast-address=127.0.0.1", *lookup_flags, *flags
        )
        self.data_paths[daemon] = data_path
        self.nsqds.append(daemon)
        return daemon

    async def start_nsqds(self, count: int, *lookupds: NSQLookupd) -> list[NsqdProcess]:
        return list(await asyncio.gather(*(self.start_nsqd(*lookupds) for _ in range(count))))

    async def close(self) -> None:
        for nsqd in self.nsqds:
            try:
                await nsqd.kill()
            except Exception:  # noqa: BLE001  (teardown: keep killing the rest)
                pass
        for lookupd in self.lookupds:
            await lookupd.stop()

    # -- HTTP ---------------------------------------------------------------------------------
    async def request(
        self, method: str, url: str, data: bytes | str | None = None, **params: str
    ) -> tuple[int, Any]:
        async with self.http.request(
            method, url, params=params, data=data, headers=ACCEPT_V1
        ) as resp:
            body = await resp.read()
            try:
                return resp.status, json.loads(body)
            except ValueError:
                return resp.status, body

    async def get(self, url: str, **params: str) -> Any:
        status, body = await self.request("GET", url, **params)
        assert status == 200, (url, params, status, body)
        return body

    async def post(self, url: str, data: bytes | str | None = None, **params: str) -> Any:
        status, body = await self.request("POST", url, data, **params)
        assert status == 200, (url, params, status, body)
        return body

    async def lookup(self, lookupd: NSQLookupd, topic: str) -> dict[str, Any] | None:
        """lookupd's /lookup for ``topic``; None on 404 TOPIC_NOT_FOUND."""
        status, body = await self.request("GET", lhttp(lookupd) + "/lookup", topic=topic)
        if status == 404:
            return None
        assert status == 200, body
        result: dict[str, Any] = body
        return result

    async def producer_ports(self, lookupd: NSQLookupd, topic: str) -> set[int]:
        """The tcp_ports of the producers /lookup returns (each checked to be dialable)."""
        data = await self.lookup(lookupd, topic)
        if data is None:
            return set()
        for producer in data["producers"]:
            assert producer["broadcast_address"] == "127.0.0.1", producer
        return {p["tcp_port"] for p in data["producers"]}

    async def node_ports(self, lookupd: NSQLookupd) -> set[int]:
        data = await self.get(lhttp(lookupd) + "/nodes")
        return {p["tcp_port"] for p in data["producers"]}

    async def eventually(
        self, probe: Callable[[], Any], expected: Any, timeout: float = BOUND
    ) -> None:
        """Poll the async ``probe`` until it returns ``expected`` (failing with the last value)."""
        last: list[Any] = [None]
        try:
            async with asyncio.timeout(timeout):
                while True:
                    last[0] = await probe()
                    if last[0] == expected:
                        return
                    await asyncio.sleep(POLL_INTERVAL)
        except TimeoutError:
            raise AssertionError(f"after {timeout}s: {last[0]!r} != {expected!r}") from None


def lhttp(lookupd: NSQLookupd) -> str:
    return f"http://127.0.0.1:{lookupd.http_port}"

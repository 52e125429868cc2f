"""nsqadmin test clusters: nsqlookupd + 2 nsqd + nsqadmin, every daemon on 127.0.0.1 port 0.

Two flavours:

* ``admin_cluster`` (async, function scope): everything in the test's event loop. nsqlookupd
  and both nsqd are in-process daemons registered with that lookupd (broadcast 127.0.0.1);
  ``cluster.admin`` is an in-process ``NSQAdmin`` pointed at the lookupd, sampling every
  ``SAMPLE_INTERVAL`` seconds. Use it from ``async def`` tests::

      async def test_x(admin_cluster: AdminCluster) -> None:
          await admin_cluster.publish("t", [b"a", b"b"], node=1)  # nsqd[1] /mpub
          reply = await admin_cluster.api("GET", "/api/topics/t")  # -> Reply (tests/http_reply)
          other = await admin_cluster.start_admin(base_path="/admin", admin_users=["bob"])

  ``nsqds[i]`` are ``NSQD`` objects (``.http_address``, ``.tcp_port``, ``.broker``), ``node(i)``
  is the ``host:http_port`` name nsqadmin gives that nsqd, ``await stop_nsqd(i)`` takes one
  down, ``await wait_producers(topic, n)`` waits until lookupd lists n producers of a topic.
  The ``receiver`` fixture is an HTTP endpoint collecting notifications (``await next()``).

* ``process_cluster`` (sync, module scope): the same cluster as real processes
  (``python -m nsqpy.nsqlookupd`` / ``nsqpy.nsqd`` / ``nsqpy.nsqadmin``), for tests that must
  not run inside an asyncio loop (Playwright's sync API). ``ProcessCluster`` has ``admin_url``
  (``http://127.0.0.1:PORT/``), ``lookupd_http``, ``nsqd_http`` and ``nsqd_tcp`` (lists of
  ``127.0.0.1:PORT``), ``publish(topic, bodies, node=0)``, ``create_channel``, ``stats(node)``
  (nsqd's /stats JSON), ``get_json(url)``, ``consumer(topic, channel, node=0)`` (an ``nsq_tail``
  process that FINs everything; ``.terminate()`` it or let ``close()`` do it) and ``close()``.
  ``process_cluster_factory(admin_flags=[...], nsqd_flags=[...], nsqd_count=2)`` starts another
  one with extra nsqadmin flags (e.g. ``--admin-user=alice``) and extra flags for every nsqd
  (e.g. ``--e2e-processing-latency-percentile=0.99,0.5``, ``--alert-depth=t:c=20``); each is
  closed at the end of the test.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import pytest
from aiohttp import web
from http_reply import HttpApi, Reply

from nsqpy.nsqadmin.app import NSQAdmin
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.options import NsqdOptions
from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.options import NsqlookupdOptions

#: nsqadmin's sampling interval in these clusters (seconds): short, so charts fill quickly.
SAMPLE_INTERVAL = 0.2
#: How long registrations may take to reach lookupd, and processes to start.
BOUND = 10.0
POLL = 0.01


# ---------------------------------------------------------------------------------------------
# In-process cluster (async)
# ---------------------------------------------------------------------------------------------


class AdminCluster:
    """nsqlookupd + 2 nsqd + nsqadmin in the running loop; see the module docstring."""

    def __init__(self, tmp_path: Path, http: aiohttp.ClientSession) -> None:
        self.tmp_path = tmp_path
        self.http = http
        self.lookupd: NSQLookupd | None = None
        self.nsqds: list[NSQD] = []
        self.admins: list[NSQAdmin] = []
        self._stopped: set[int] = set()

    async def start(self, nsqd_count: int = 2) -> None:
        self.lookupd = NSQLookupd(
            NsqlookupdOptions(
                tcp_address="127.0.0.1:0",
                http_address="127.0.0.1:0",
                broadcast_address="127.0.0.1",
            )
        )
        await self.lookupd.start()
        for _ in range(nsqd_count):
            await self.start_nsqd()
        await self.start_admin()

    async def start_nsqd(self, **overrides: Any) -> NSQD:
        assert self.lookupd is not None
        opts = NsqdOptions()
        opts.tcp_address = "127.0.0.1:0"
        opts.http_address = "127.0.0.1:0"
        opts.broadcast_address = "127.0.0.1"
        opts.data_path = str(self.tmp_path / f"nsqd{len(self.nsqds)}")
        opts.nsqlookupd_tcp_addresses = [f"127.0.0.1:{self.lookupd.tcp_port}"]
        for name, value in overrides.items():
            setattr(opts, name, value)
        daemon = NSQD(opts)
        await daemon.start()
        self.nsqds.append(daemon)
        return daemon

    async def start_admin(
        self, clock: Callable[[], float] | None = None, **overrides: Any
    ) -> NSQAdmin:
        """Another nsqadmin on this cluster (option overrides by field name; ``clock``: the
        wall clock its sampler stamps points with)."""
        assert self.lookupd is not None
        opts = NsqadminOptions(
            http_address="127.0.0.1:0",
            nsqlookupd_http_addresses=[self.lookupd_http],
            sample_interval=int(SAMPLE_INTERVAL * 1e9),
        )
        for name, value in overrides.items():
            setattr(opts, name, value)
        admin = NSQAdmin(opts) if clock is None else NSQAdmin(opts, clock=clock)
        self.admins.append(admin)
        await admin.start()
        return admin

    @property
    def admin(self) -> NSQAdmin:
        return self.admins[0]

    @property
    def url(self) -> str:
        """The first nsqadmin's root, ``http://127.0.0.1:PORT`` (no base path, no slash)."""
        return f"http://{self.admin.http_address}"

    @property
    def lookupd_http(self) -> str:
        assert self.lookupd is not None
        return f"127.0.0.1:{self.lookupd.http_port}"

    def nsqd_http(self, i: int) -> str:
        return f"127.0.0.1:{self.nsqds[i].http_port}"

    def node(self, i: int) -> str:
        """The node name nsqadmin uses for nsqd ``i`` (broadcast address:http port)."""
        return self.nsqd_http(i)

    def client(self, admin: NSQAdmin | None = None) -> HttpApi:
        """Raw HTTP calls to an nsqadmin (the first one by default)."""
        return HttpApi(self.http, f"http://{(admin or self.admin).http_address}")

    async def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        admin: NSQAdmin | None = None,
    ) -> Reply:
        """Call nsqadmin; a dict/list ``body`` is sent as JSON."""
        data = json.dumps(body) if isinstance(body, dict | list) else body
        return await self.client(admin).call(method, path, data, headers)

    async def get_json(self, path: str, admin: NSQAdmin | None = None) -> Any:
        reply = await self.api("GET", path, admin=admin)
        assert reply.status == 200, (path, reply.status, reply.body)
        return reply.json

    async def publish(self, topic: str, bodies: Sequence[bytes], node: int = 0) -> None:
        url = f"http://{self.nsqd_http(node)}/mpub?topic={topic}"
        async with self.http.post(url, data=b"\n".join(bodies)) as resp:
            assert resp.status == 200, await resp.text()

    async def nsqd_post(self, node: int, path: str) -> None:
        async with self.http.post(f"http://{self.nsqd_http(node)}{path}") as resp:
            assert resp.status == 200, await resp.text()

    async def nsqd_stats(self, node: int, topic: str = "") -> Any:
        url = f"http://{self.nsqd_http(node)}/stats?format=json"
        if topic:
            url += f"&topic={topic}"
        async with self.http.get(url) as resp:
            return await resp.json()

    async def lookup_producers(self, topic: str) -> int:
        async with self.http.get(f"http://{self.lookupd_http}/lookup?topic={topic}") as resp:
            if resp.status == 404:
                return 0
            return len((await resp.json())["producers"])

    async def wait_producers(self, topic: str, count: int) -> None:
        """Wait until lookupd's /lookup lists ``count`` producers of ``topic``."""
        await eventually(lambda: self.lookup_producers(topic), count)

    async def stop_nsqd(self, i: int) -> None:
        self._stopped.add(i)
        await self.nsqds[i].stop()

    async def close(self) -> None:
        for admin in self.admins:
            await admin.close()
        for i, nsqd in enumerate(self.nsqds):
            if i not in self._stopped:
                await nsqd.stop()
        if self.lookupd is not None:
            await self.lookupd.stop()


async def eventually(probe: Callable[[], Any], expected: Any, timeout: float = BOUND) -> None:
    """Poll the async ``probe`` until it returns ``expected`` (failing with the last value)."""
    last: Any = None
    try:
        async with asyncio.timeout(timeout):
            while (last := await probe()) != expected:
                await asyncio.sleep(POLL)
    except TimeoutError:
        raise AssertionError(f"after {timeout}s: {last!r} != {expected!r}") from None


@pytest.fixture
async def admin_cluster(tmp_path: Path) -> AsyncIterator[AdminCluster]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        cluster = AdminCluster(tmp_path, http)
        try:
            await cluster.start()
            yield cluster
        finally:
            await cluster.close()


# ---------------------------------------------------------------------------------------------
# Notification endpoint
# ---------------------------------------------------------------------------------------------


class Receiver:
    """A tiny HTTP server collecting the notifications POSTed to it."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.put_nowait((request.content_type, json.loads(await request.read())))
        return web.Response(text="ok")

    async def next(self) -> tuple[str, dict[str, Any]]:
        async with asyncio.timeout(5):
            return await self.received.get()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    recv = Receiver()
    app = web.Application()
    app.router.add_post("/hook", recv.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    recv.url = f"http://127.0.0.1:{port}/hook"
    yield recv
    await runner.cleanup()


# ---------------------------------------------------------------------------------------------
# Process cluster (sync, for browser tests)
# ---------------------------------------------------------------------------------------------

LISTENING = re.compile(r"(TCP|HTTP): listening on (\S+)")


@dataclass
class Daemon:
    """One daemon process; its stderr is drained by a thread (a full pipe would block it)."""

    name: str
    proc: subprocess.Popen[str]
    addresses: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @classmethod
    def spawn(cls, module: str, args: Sequence[str]) -> Daemon:
        proc = subprocess.Popen(
            [sys.executable, "-m", f"nsqpy.{module}", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        return cls(module, proc)

    def wait_listening(self, count: int) -> None:
        """Read start-up lines until ``count`` listeners are named, then drain in a thread."""
        stream = self.proc.stderr
        assert stream is not None
        deadline = time.monotonic() + BOUND * 2
        while len(self.addresses) < count:
            line = stream.readline()
            if not line or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"{self.name} did not start:\n{''.join(self.lines)}")
            self.lines.append(line)
            if match := LISTENING.search(line):
                self.addresses[match.group(1)] = match.group(2)
        threading.Thread(target=self._drain, args=(stream,), daemon=True).start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ProcessCluster:
    """nsqlookupd + 2 nsqd + nsqadmin as processes; see the module docstring."""

    def __init__(
        self,
        tmp_path: Path,
        admin_flags: Sequence[str] = (),
        nsqd_count: int = 2,
        nsqd_flags: Sequence[str] = (),
    ) -> None:
        self.daemons: list[Daemon] = []
        self.consumers: list[subprocess.Popen[bytes]] = []
        try:
            self._start(tmp_path, admin_flags, nsqd_count, nsqd_flags)
        except BaseException:
            self.close()
            raise

    def _start(
        self,
        tmp_path: Path,
        admin_flags: Sequence[str],
        nsqd_count: int,
        nsqd_flags: Sequence[str],
    ) -> None:
        lookupd = self._spawn(
            "nsqlookupd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--broadcast-address=127.0.0.1",
        )
        lookupd.wait_listening(2)
        self.lookupd_http = lookupd.addresses["HTTP"]
        nsqds = []
        for i in range(nsqd_count):
            data = tmp_path / f"proc-nsqd{i}"
            data.mkdir(parents=True, exist_ok=True)
            nsqds.append(
                self._spawn(
                    "nsqd",
                    "--tcp-address=127.0.0.1:0",
                    "--http-address=127.0.0.1:0",
                    "--broadcast-address=127.0.0.1",
                    f"--data-path={data}",
                    f"--lookupd-tcp-address={lookupd.addresses['TCP']}",
                    *nsqd_flags,
                )
            )
        admin = self._spawn(
            "nsqadmin",
            "--http-address=127.0.0.1:0",
            f"--lookupd-http-address={self.lookupd_http}",
            f"--sample-interval={int(SAMPLE_INTERVAL * 1000)}ms",
            *admin_flags,
        )
        for nsqd in nsqds:  # started together, waited for in turn
            nsqd.wait_listening(2)
        admin.wait_listening(1)
        self.nsqd_http = [n.addresses["HTTP"] for n in nsqds]
        self.nsqd_tcp = [n.addresses["TCP"] for n in nsqds]
        self.admin_address = admin.addresses["HTTP"]
        base = next((f for f in admin_flags if "base-path" in f), "=/").split("=", 1)[1]
        self.base_path = "/" + base.strip("/") + "/" if base.strip("/") else "/"
        self.admin_url = f"http://{self.admin_address}{self.base_path}"

    def _spawn(self, module: str, *args: str) -> Daemon:
        daemon = Daemon.spawn(module, args)
        self.daemons.append(daemon)
        return daemon

    # -- HTTP helpers -------------------------------------------------------------------------
    @staticmethod
    def request(method: str, url: str, data: bytes | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(url, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=BOUND) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def get_json(self, url: str) -> Any:
        status, body = self.request("GET", url)
        assert status == 200, (url, status, body)
        return json.loads(body)

    def publish(self, topic: str, bodies: Sequence[bytes], node: int = 0) -> None:
        url = f"http://{self.nsqd_http[node]}/mpub?topic={topic}"
        status, body = self.request("POST", url, b"\n".join(bodies))
        assert status == 200, body

    def create_channel(self, topic: str, channel: str, node: int = 0) -> None:
        base = f"http://{self.nsqd_http[node]}"
        paths = (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel={channel}")
        for path in paths:
            status, body = self.request("POST", base + path)
            assert status == 200, body

    def stats(self, node: int = 0) -> Any:
        return self.get_json(f"http://{self.nsqd_http[node]}/stats?format=json")

    def consumer(self, topic: str, channel: str, node: int = 0) -> subprocess.Popen[bytes]:
        """An ``nsq_tail`` process consuming (and FINning) ``topic``/``channel`` on one nsqd."""
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nsqpy.cli.nsq_tail",
                f"--topic={topic}",
                f"--channel={channel}",
                f"--nsqd-tcp-address={self.nsqd_tcp[node]}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.consumers.append(proc)
        return proc

    def wait_until(self, predicate: Callable[[], bool], timeout: float = BOUND) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            threading.Event().wait(POLL * 5)  # a poll interval, not a fixed delay

    def close(self) -> None:
        for proc in self.consumers:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for daemon in reversed(self.daemons):  # nsqadmin, nsqd, then nsqlookupd
            daemon.stop()


@pytest.fixture(scope="module")
def process_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(tmp_path_factory.mktemp("proc-cluster"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def process_cluster_factory(
    tmp_path: Path,
) -> Iterator[Callable[..., ProcessCluster]]:
    started: list[ProcessCluster] = []

    def start(
        admin_flags: Sequence[str] = (), nsqd_count: int = 2, nsqd_flags: Sequence[str] = ()
    ) -> ProcessCluster:
        cluster = ProcessCluster(tmp_path / f"c{len(started)}", admin_flags, nsqd_count, nsqd_flags)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.close()

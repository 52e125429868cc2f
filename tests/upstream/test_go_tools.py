"""NSQ v1.3.0's own tools, Go binaries, against nsqpy's nsqlookupd and nsqd.

``to_nsq`` publishes; ``nsq_tail``, ``nsq_to_file``, ``nsq_to_nsq`` and ``nsq_to_http`` each
read the topic through their own channel; ``nsq_stat`` reports it; Go's ``nsqadmin`` shows the
cluster and pauses a channel. The binaries come from ``/work/shared/tools/build-go-nsq.sh``
(``NSQPY_GO_BIN``, default ``/tmp/anch/nsq/bin``); without them these tests are skipped, as
on a machine that never built them.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import POLL_INTERVAL

pytestmark = [pytest.mark.peers, pytest.mark.slow]

GO_BIN = Path(os.environ.get("NSQPY_GO_BIN", "/tmp/anch/nsq/bin"))
TOOLS = ("to_nsq", "nsq_tail", "nsq_to_file", "nsq_to_nsq", "nsq_to_http", "nsq_stat", "nsqadmin")
TOPIC = "go_tools"
CHANNELS = ("keep", "tail", "file", "copy", "http")
BODIES = [b"a", b"b", b"c"]
LISTENING = re.compile(r"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")

if not all((GO_BIN / tool).exists() for tool in TOOLS):
    pytest.skip(f"NSQ's Go tools are not built in {GO_BIN}", allow_module_level=True)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(POLL_INTERVAL)  # between looks, up to the deadline
    pytest.fail(f"timed out waiting for {what}")


@dataclass
class Process:
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start(cmd: list[str], log: Path) -> Process:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return Process(proc, log)


def ports(process: Process) -> dict[str, int]:
    """The TCP and HTTP ports a daemon logged it listens on."""

    def found() -> dict[str, int] | None:
        assert process.proc.poll() is None, process.log.read_text()
        seen = {m[0]: int(m[1]) for m in LISTENING.findall(process.log.read_text())}
        return seen if len(seen) == 2 else None

    result: dict[str, int] = wait_for(found, f"{process.log.name} to listen")
    return result


@dataclass
class Cluster:
    lookupd_http: str
    nsqd_tcp: str
    nsqd_http: str
    tmp: Path

    def get(self, base: str, path: str) -> Any:
        with urllib.request.urlopen(f"http://{base}{path}", timeout=10) as reply:
            return json.loads(reply.read())

    def post(self, base: str, path: str, body: bytes = b"") -> int:
        request = urllib.request.Request(f"http://{base}{path}", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            status: int = reply.status
            return status

    def channel(self, topic: str, channel: str) -> dict[str, Any]:
        stats = self.get(self.nsqd_http, f"/stats?format=json&topic={topic}")
        for found in stats["topics"][0]["channels"]:
            if found["channel_name"] == channel:
                return dict(found)
        raise AssertionError(f"no channel {channel}: {stats}")

    def drained(self, channel: str) -> bool:
        stats = self.channel(TOPIC, channel)
        return bool(stats["depth"] == 0 and stats["in_flight_count"] == 0)

    def tool(self, name: str, *args: str) -> Process:
        return start([str(GO_BIN / name), *args], self.tmp / f"{name}.log")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """nsqpy's nsqlookupd and nsqd, the topic's channels made, and ``to_nsq``'s 3 messages."""
    tmp = tmp_path_factory.mktemp("go_tools")
    py = [sys.executable, "-m"]
    local = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"]
    lookupd = start([*py, "nsqpy.nsqlookupd", *local], tmp / "nsqlookupd.log")
    daemons = [lookupd]
    try:
        found = ports(lookupd)
        nsqd = start(
            [
                *py,
                "nsqpy.nsqd",
                *local,
                f"--data-path={tmp}",
                "--broadcast-address=127.0.0.1",
                f"--lookupd-tcp-address=127.0.0.1:{found['TCP']}",
            ],
            tmp / "nsqd.log",
        )
        daemons.append(nsqd)
        served = ports(nsqd)
        up = Cluster(
            f"127.0.0.1:{found['HTTP']}",
            f"127.0.0.1:{served['TCP']}",
            f"127.0.0.1:{served['HTTP']}",
            tmp,
        )
        up.post(up.nsqd_http, f"/topic/create?topic={TOPIC}")
        for channel in CHANNELS:
            up.post(up.nsqd_http, f"/channel/create?topic={TOPIC}&channel={channel}")
        published = subprocess.run(
            [str(GO_BIN / "to_nsq"), f"--topic={TOPIC}", f"--nsqd-tcp-address={up.nsqd_tcp}"],
            input=b"\n".join(BODIES) + b"\n",
            capture_output=True,
            timeout=30,
        )
        assert published.returncode == 0, published.stdout + published.stderr
        wait_for(
            lambda: TOPIC in up.get(up.lookupd_http, "/topics")["topics"], "lookupd to list it"
        )
        yield up
    finally:
        for daemon in reversed(daemons):
            assert daemon.stop() == 0, daemon.log.read_text()


def test_to_nsq_published_every_line(cluster: Cluster) -> None:
    assert cluster.channel(TOPIC, "keep")["depth"] == len(BODIES)


def test_nsq_tail_prints_the_messages(cluster: Cluster) -> None:
    done = subprocess.run(
        [
            str(GO_BIN / "nsq_tail"),
            f"--topic={TOPIC}",
            "--channel=tail",
            f"--lookupd-http-address={cluster.lookupd_http}",
            f"--n={len(BODIES)}",
        ],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == BODIES


def test_nsq_to_file_writes_them(cluster: Cluster) -> None:
    out = cluster.tmp / "files"
    tool = cluster.tool(
        "nsq_to_file",
        f"--topic={TOPIC}",
        "--channel=file",
        "--sync-interval=100ms",  # it FINs a message once the file holding it is synced
        f"--output-dir={out}",
        f"--lookupd-http-address={cluster.lookupd_http}",
    )
    wait_for(lambda: cluster.drained("file"), "nsq_to_file to FIN them")
    assert tool.stop() == 0, tool.log.read_text()  # it writes out what it holds on the way out
    lines = [line for f in out.rglob("*.log") for line in f.read_bytes().splitlines()]
    assert sorted(lines) == BODIES


def test_nsq_to_nsq_copies_them(cluster: Cluster) -> None:
    tool = cluster.tool(
        "nsq_to_nsq",
        f"--topic={TOPIC}",
        "--channel=copy",
        f"--nsqd-tcp-address={cluster.nsqd_tcp}",
        f"--destination-nsqd-tcp-address={cluster.nsqd_tcp}",
        "--destination-topic=go_tools_copy",
    )
    wait_for(lambda: cluster.drained("copy"), "nsq_to_nsq to FIN them")
    assert tool.stop() == 0, tool.log.read_text()
    stats = cluster.get(cluster.nsqd_http, "/stats?format=json&topic=go_tools_copy")
    assert stats["topics"][0]["message_count"] == len(BODIES)


def test_nsq_to_http_posts_them(cluster: Cluster) -> None:
    posted: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posted.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        tool = cluster.tool(
            "nsq_to_http",
            f"--topic={TOPIC}",
            "--channel=http",
            f"--lookupd-http-address={cluster.lookupd_http}",
            f"--post=http://127.0.0.1:{server.server_address[1]}/",
        )
        wait_for(lambda: cluster.drained("http"), "nsq_to_http to FIN them")
        assert tool.stop() == 0, tool.log.read_text()
    finally:
        server.shutdown()
        server.server_close()
    assert sorted(posted) == BODIES


def test_nsq_stat_reports_the_channel(cluster: Cluster) -> None:
    done = subprocess.run(
        [
            str(GO_BIN / "nsq_stat"),
            f"--topic={TOPIC}",
            "--channel=keep",
            "--count=1",
            f"--lookupd-http-address={cluster.lookupd_http}",
            "--interval=100ms",
        ],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    # its last row: ingress, egress | depth, in memory, on disk, in flight, deferred |
    # requeued, timed out, messages, clients
    row = done.stdout.decode().strip().splitlines()[-1].replace("|", " ").split()
    n = str(len(BODIES))
    assert row[2:7] == [n, n, "0", "0", "0"], done.stdout
    assert row[-2:] == [n, "0"], done.stdout


def test_nsqadmin_shows_the_cluster_and_pauses_a_channel(cluster: Cluster) -> None:
    admin = cluster.tool(
        "nsqadmin", "--http-address=127.0.0.1:0", f"--lookupd-http-address={cluster.lookupd_http}"
    )
    try:
        address = wait_for(
            lambda: re.search(r"HTTP: listening on (\S+)", admin.log.read_text()),
            "nsqadmin to listen",
        ).group(1)
        assert TOPIC in cluster.get(address, "/api/topics")["topics"]
        nodes = cluster.get(address, "/api/nodes")["nodes"]
        assert [node["http_port"] for node in nodes] == [int(cluster.nsqd_http.split(":")[1])]
        kept = cluster.get(address, f"/api/topics/{TOPIC}/keep")
        assert (kept["depth"], kept["message_count"]) == (len(BODIES), len(BODIES))
        paused = b'{"action":"pause"}'
        assert cluster.post(address, f"/api/topics/{TOPIC}/keep", paused) == 200
        assert cluster.channel(TOPIC, "keep")["paused"] is True
    finally:
        assert admin.stop() == 0, admin.log.read_text()

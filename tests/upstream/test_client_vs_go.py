"""nsqpy's client against Go nsqd v1.3.0 and Go nsqlookupd, the real NSQ.

Publishing (PUB, MPUB, DPUB, pipelined), consuming with FIN, REQ and TOUCH, discovery through
nsqlookupd, TLS with snappy or deflate on top, the HTTP client and the blocking facade. The
binaries come from ``/work/shared/tools/build-go-nsq.sh`` (``NSQPY_GO_BIN``); without them the
module is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from daemon_process import start_process, stop_process
from tls_certs import Certs, make_certs

from nsqpy.client import Config, Consumer, Message, NsqdHTTPClient, Producer, sync

pytestmark = [pytest.mark.peers]

GO_BIN = Path(os.environ.get("NSQPY_GO_BIN", "/tmp/anch/nsq/bin"))

if not ((GO_BIN / "nsqd").exists() and (GO_BIN / "nsqlookupd").exists()):
    pytest.skip(f"Go nsqd and nsqlookupd are not built in {GO_BIN}", allow_module_level=True)


async def start_go(
    name: str, drains: list[asyncio.Future[bytes]], *flags: str
) -> tuple[asyncio.subprocess.Process, dict[str, int]]:
    """A Go daemon on ports chosen by the kernel, once it has logged them. Its output is read
    on to the end into ``drains`` (a full pipe would block the daemon's logging, and so it)."""
    local = ("--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0")
    proc, ports, _ = await start_process([str(GO_BIN / name)], *local, *flags)
    assert proc.stderr is not None and proc.stdout is not None
    drains += [asyncio.ensure_future(stream.read()) for stream in (proc.stderr, proc.stdout)]
    return proc, ports


@dataclass
class GoCluster:
    nsqd_tcp: str
    nsqd_http: str
    lookupd_http: str
    certs: Certs

    async def stats(self, topic: str, channel: str = "") -> dict[str, Any]:
        async with NsqdHTTPClient(self.nsqd_http) as http:
            found: dict[str, Any] = await http.stats(topic=topic, channel=channel)
        return found


@pytest.fixture
async def go(tmp_path: Path) -> AsyncIterator[GoCluster]:
    """Go nsqlookupd, and Go nsqd registered with it, with TLS and both codecs on offer."""
    certs = make_certs(tmp_path / "certs")
    started: list[asyncio.subprocess.Process] = []
    drains: list[asyncio.Future[bytes]] = []
    try:
        lookupd, found = await start_go("nsqlookupd", drains)
        started.append(lookupd)
        nsqd, served = await start_go(
            "nsqd",
            drains,
            f"--data-path={tmp_path}",
            "--broadcast-address=127.0.0.1",
            f"--lookupd-tcp-address=127.0.0.1:{found['TCP']}",
            f"--tls-cert={certs.server_cert}",
            f"--tls-key={certs.server_key}",
            f"--tls-root-ca-file={certs.ca}",
        )
        started.append(nsqd)
        yield GoCluster(
            f"127.0.0.1:{served['TCP']}",
            f"127.0.0.1:{served['HTTP']}",
            f"127.0.0.1:{found['HTTP']}",
            certs,
        )
    finally:
        for proc in reversed(started):
            assert await stop_process(proc) == 0
        await asyncio.gather(*drains)  # EOF once the daemons are gone


def channel_of(stats: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        c for c in stats["topics"][0]["channels"] if c["channel_name"] == name
    )
    return found


async def test_publish_kinds(go: GoCluster) -> None:
    async with NsqdHTTPClient(go.nsqd_http) as http:
        await http.create_topic("kinds")
        await http.create_channel("kinds", "ch")
    async with Producer(go.nsqd_tcp) as producer:
        await producer.publish("kinds", b"one")
        await producer.multi_publish("kinds", [b"two", b"three"])
        await producer.deferred_publish("kinds", b"later", 60.0)
        await asyncio.gather(*(producer.publish("kinds", b"%d" % i) for i in range(50)))
    ch = channel_of(await go.stats("kinds", "ch"), "ch")
    assert (ch["depth"], ch["deferred_count"]) == (53, 1)


async def test_consume_with_fin_req_and_touch(
    go: GoCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nsqpy.client")
    seen: list[tuple[bytes, int]] = []

    def handle(msg: Message) -> None:
        msg.touch()
        seen.append((msg.body, msg.attempts))
        if msg.attempts == 1:
            msg.requeue(0, backoff=False)  # once, then the return FINs it

    async with Producer(go.nsqd_tcp) as producer:
        await producer.multi_publish("work", [b"a", b"b"])
    async with Consumer("work", "ch", nsqd_tcp_addresses=go.nsqd_tcp, handler=handle):
        await wait_for(lambda: len(seen) == 4, timeout=10)
        stats = await go.stats("work", "ch")
    assert sorted(seen) == [(b"a", 1), (b"a", 2), (b"b", 1), (b"b", 2)]
    ch = channel_of(stats, "ch")
    assert (ch["requeue_count"], ch["depth"]) == (2, 0)
    # FIN, REQ and TOUCH get no answer unless they fail: an E_*_FAILED would be logged here
    assert [r.getMessage() for r in caplog.records if r.name == "nsqpy.client"] == []


async def test_consumer_finds_nsqd_through_nsqlookupd(go: GoCluster) -> None:
    async with Producer(go.nsqd_tcp) as producer:
        await producer.publish("found", b"hello")
    got: list[bytes] = []
    config = Config(lookupd_poll_interval=0.2)
    async with Consumer(
        "found",
        "ch",
        lookupd_http_addresses=go.lookupd_http,
        config=config,
        handler=lambda msg: got.append(msg.body),
    ):
        await wait_for(lambda: got == [b"hello"], timeout=10)


@pytest.mark.parametrize("codec", ["snappy", "deflate"])
async def test_tls_with_compression(go: GoCluster, codec: str) -> None:
    config = Config(tls_v1=True, tls_root_ca_file=str(go.certs.ca), tls_server_name="localhost")
    setattr(config, codec, True)
    bodies = [b"x" * 1000, b"y" * 10]
    async with Producer(go.nsqd_tcp, config=config) as producer:
        await producer.multi_publish(f"secure_{codec}", bodies)
    got: list[bytes] = []
    async with Consumer(
        f"secure_{codec}",
        "ch",
        nsqd_tcp_addresses=go.nsqd_tcp,
        config=config,
        handler=lambda msg: got.append(msg.body),
        max_in_flight=10,
    ):
        await wait_for(lambda: len(got) == 2, timeout=10)
        clients = channel_of(await go.stats(f"secure_{codec}", "ch"), "ch")["clients"]
    assert sorted(got) == sorted(bodies)
    # Go nsqd's own view of the connection: TLS, and the codec on top of it
    assert [(c["tls"], c[codec]) for c in clients] == [(True, True)]


def test_blocking_facade(go: GoCluster) -> None:
    with sync.Producer(go.nsqd_tcp) as producer:
        producer.publish("blocking", b"one")
        producer.multi_publish("blocking", [b"two", b"three"])
    with sync.NsqdHTTPClient(go.nsqd_http) as http:
        topic = http.stats(topic="blocking")["topics"][0]
    assert topic["message_count"] == 3


def test_our_to_nsq_and_nsq_tail(go: GoCluster) -> None:
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsqpy.cli.to_nsq",
            "--topic=tools",
            f"--nsqd-tcp-address={go.nsqd_tcp}",
        ],
        input=b"p\nq\n",
        capture_output=True,
        timeout=30,
    )
    assert sent.returncode == 0, sent.stderr
    tail = subprocess.run(
        [
            sys.executable,
            "-m",
            "nsqpy.cli.nsq_tail",
            "--topic=tools",
            f"--nsqd-tcp-address={go.nsqd_tcp}",
            "--n=2",
        ],
        capture_output=True,
        timeout=30,
    )
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == [b"p", b"q"]

"""Durable leases across kill -9: real nsqd processes, SIGKILLed and restarted on their data
(and, in process, a journal that cannot write).

``--durable`` keeps a sealed lease: after the restart the same name gives the same messages
(ids, bodies, timestamps, attempts at the seal), ordinary consumers never get them, a lease
finished before the kill stays finished, and a ttl that runs out after the restart requeues
the lease as timed out.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import POLL_INTERVAL, NsqdFactory
from nsqd_process import NsqdProcess
from test_crash import create_channel, find, stats
from test_dead_letter_api import http
from test_lease_api import setup
from test_lease_tcp import leasing, read_lease
from v2client import RawV2

from nsqpy.nsqd.storage.diskqueue import DiskQueueError

N = 20  # published
K = 6  # leased
BODIES = [b"m-%03d" % i for i in range(N)]


@pytest.fixture
async def started() -> AsyncIterator[list[NsqdProcess]]:
    daemons: list[NsqdProcess] = []
    try:
        yield daemons
    finally:
        for daemon in daemons:
            await daemon.kill()


async def durable(data: Path, started: list[NsqdProcess]) -> NsqdProcess:
    daemon = await NsqdProcess.start(data, "--durable")
    started.append(daemon)
    return daemon


async def post(daemon: NsqdProcess, path: str, body: bytes = b"") -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(daemon.http + path, data=body) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text.startswith("{") else text


async def take(daemon: NsqdProcess, query: str) -> dict[str, Any]:
    status, doc = await post(daemon, f"/channel/lease?topic=t&channel=c&{query}")
    assert status == 200, doc
    assert isinstance(doc, dict)
    return doc


async def published(data: Path, started: list[NsqdProcess]) -> NsqdProcess:
    daemon = await durable(data, started)
    await create_channel(daemon, "t", "c")
    status, _ = await post(daemon, "/mpub?topic=t", b"\n".join(BODIES))  # answered once durable
    assert status == 200
    return daemon


async def killed_and_restarted(
    daemon: NsqdProcess, data: Path, started: list[NsqdProcess]
) -> NsqdProcess:
    await daemon.kill()
    assert daemon.proc.returncode == -signal.SIGKILL
    return await durable(data, started)


async def channel(daemon: NsqdProcess) -> dict[str, Any]:
    topic = find((await stats(daemon))["topics"], "topic_name", "t")
    return find(topic["channels"], "channel_name", "c")


async def until(daemon: NsqdProcess, check: Any, timeout: float = 10.0) -> dict[str, Any]:
    """Poll the channel's stats until ``check(stats)`` holds; the last stats."""
    async with asyncio.timeout(timeout):
        while not check(current := await channel(daemon)):
            await asyncio.sleep(POLL_INTERVAL)
    return current


async def consume(daemon: NsqdProcess, count: int) -> list[tuple[bytes, int]]:
    """SUB, take ``count`` messages and FIN them; their (body, attempts)."""
    conn = await RawV2.connect(daemon.tcp_port)
    await conn.sub("t", "c", rdy=N)
    got = []
    for _ in range(count):
        msg = await conn.message()
        got.append((msg.body, msg.attempts))
        conn.cmd(f"FIN {msg.id.decode()}")
    await until(daemon, lambda c: c["clients"] and c["clients"][0]["finish_count"] == count)
    await conn.close()
    return got


def lease_bodies(doc: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(m["body"]) for m in doc["messages"]]


async def test_a_sealed_lease_comes_back_identical_and_only_under_its_name(
    tmp_path: Path, started: list[NsqdProcess]
) -> None:
    data = tmp_path / "data"
    daemon = await published(data, started)
    before = await take(daemon, f"lease=L&count={K}&ttl=10m")
    assert lease_bodies(before) == BODIES[:K]

    daemon = await killed_and_restarted(daemon, data, started)
    assert await take(daemon, "lease=L") == before, "same ids, bodies, timestamps, attempts"
    conn = await RawV2.connect(daemon.tcp_port)  # and over TCP, the same frames
    await conn.identify(feature_negotiation=True, leases=True)
    conn.cmd("LEASE t c L")
    frames, done = await read_lease(conn)
    assert done == f"LEASED L {K} {sum(map(len, BODIES[:K]))}".encode()
    assert [(m.id.decode(), m.attempts, m.timestamp, m.body) for m in frames] == [
        (m["id"], m["attempts"], m["timestamp"], base64.b64decode(m["body"]))
        for m in before["messages"]
    ]

    others = await consume(daemon, N - K)
    assert sorted(body for body, _ in others) == BODIES[K:], "exactly the others"
    conn.cmd("LEASE_FIN t c L")
    assert await conn.response() == b"OK"
    final = await until(daemon, lambda c: c["depth"] == 0 and c["in_flight_count"] == 0)
    assert final["lease_count"] == 0, "nothing else was delivered: all is finished"
    await conn.close()
    assert await daemon.stop() == 0, daemon.log


async def test_a_lease_finished_before_the_kill_does_not_come_back(
    tmp_path: Path, started: list[NsqdProcess]
) -> None:
    data = tmp_path / "data"
    daemon = await published(data, started)
    await take(daemon, f"lease=L&count={K}&ttl=10m")
    status, _ = await post(daemon, "/channel/lease/fin?topic=t&channel=c&lease=L")
    assert status == 200  # answered once the journal's CLOSE is durable

    daemon = await killed_and_restarted(daemon, data, started)
    status, doc = await post(daemon, f"/channel/lease?topic=t&channel=c&lease=L&count={K}")
    assert (status, doc) == (400, {"message": "LEASE_FINISHED"})
    others = await consume(daemon, N - K)
    assert sorted(body for body, _ in others) == BODIES[K:]
    final = await until(daemon, lambda c: c["depth"] == 0 and c["in_flight_count"] == 0)
    assert final["timeout_count"] == 0 and final["lease_count"] == 0


async def test_a_lease_whose_ttl_ends_after_the_restart_is_requeued_as_timed_out(
    tmp_path: Path, started: list[NsqdProcess]
) -> None:
    data = tmp_path / "data"
    daemon = await published(data, started)
    await take(daemon, f"lease=L&count={K}&ttl=2s")

    daemon = await killed_and_restarted(daemon, data, started)
    # restored (whether its ttl is still running or ran out while nsqd was down), then
    # requeued by the queue scan as a timeout: a plain replay would count none
    await until(daemon, lambda c: c["timeout_count"] == K and c.get("lease_count") == 0)
    status, doc = await post(daemon, "/channel/lease/fin?topic=t&channel=c&lease=L")
    assert (status, doc) == (400, {"message": "LEASE_REQUEUED"})
    got = await consume(daemon, N)
    assert sorted(body for body, _ in got) == BODIES
    attempts = dict(got)
    assert [attempts[b] for b in BODIES] == [2] * K + [1] * (N - K), "the lease was a delivery"
    await until(daemon, lambda c: c["depth"] == 0 and c["in_flight_count"] == 0)


async def test_a_lease_the_journal_could_not_record_is_not_answered_as_durable(
    nsqd_factory: NsqdFactory,
) -> None:
    nsqd = await nsqd_factory(durable=True)
    assert nsqd.leases is not None
    journal = nsqd.leases.queue

    def failing(records: list[bytes], take: int) -> range:
        raise DiskQueueError("no space left on device")

    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await setup(api, b"a", b"b")
        journal.put_taking = failing  # type: ignore[method-assign]
        reply = await api.post("/channel/lease?topic=t&channel=c&lease=L&count=1")
        assert (reply.status, reply.message) == (500, "INTERNAL_ERROR")
        assert nsqd.health.startswith("NOK")
        conn = await leasing(nsqd.tcp_port)
        conn.cmd("LEASE t c M 1 0 0")
        assert await conn.error() == b"E_LEASE_FAILED LEASE failed to sync"
        conn.cmd("LEASE_FIN t c L")
        assert await conn.error() == b"E_LEASE_FIN_FAILED LEASE_FIN failed to sync"
        del journal.put_taking  # the disk is back: the next lease is recorded and answered
        assert (await api.post("/pub?topic=t", b"c")).status == 200
        conn.cmd("LEASE t c N 5 0 0")
        messages, done = await read_lease(conn)
        assert ([m.body for m in messages], done) == ([b"c"], b"LEASED N 1 1")
        await conn.close()

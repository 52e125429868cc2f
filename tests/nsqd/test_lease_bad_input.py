"""Leases refused over HTTP and TCP alike: a clear error, nothing lost, no one else disturbed.

Each bad request is made while a consumer of another topic on the same nsqd is receiving:
after every refusal a message published to it must still reach it. At the end the leased
channel holds exactly what it held before (depth, in flight, leases), the lease taken before
still gives its message, and the connection that was refused goes on working. In both modes:
``--durable`` answers leases after a commit, and a refusal must not wait for one or break one.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory
from http_reply import HttpApi
from test_dead_letter_api import channel_stats, consumer, http
from test_lease_api import setup, take
from test_lease_tcp import leasing, read_lease
from v2client import RawV2

from nsqpy.nsqd.app import NSQD

LEASE = "/channel/lease?topic=t&channel=c"
MAX_RDY = 10

HTTP_CASES = [
    ("/channel/lease/fin?topic=t&channel=c&lease=unknown", 404, "LEASE_NOT_FOUND"),
    ("/channel/lease/req?topic=t&channel=c&lease=unknown", 404, "LEASE_NOT_FOUND"),
    ("/channel/lease/fin?topic=t&channel=plain&lease=held", 404, "LEASE_NOT_FOUND"),
    (f"{LEASE}&lease=held&count=2&bytes=100", 400, "LEASE_MISMATCH"),
    (f"{LEASE}&lease=held&count=1&bytes=99", 400, "LEASE_MISMATCH"),
    (f"{LEASE}&lease=new&count={MAX_RDY + 1}", 400, "INVALID_COUNT"),
    ("/channel/lease?topic=t&channel=e%23ephemeral&lease=x&count=1", 400, "EPHEMERAL_CHANNEL"),
    ("/channel/lease/fin?topic=t&channel=e%23ephemeral&lease=x", 400, "EPHEMERAL_CHANNEL"),
]

TCP_CASES = [
    ("LEASE_FIN t c unknown", b"E_LEASE_NOT_FOUND LEASE_FIN unknown failed LEASE_NOT_FOUND"),
    ("LEASE_REQ t c unknown 0", b"E_LEASE_NOT_FOUND LEASE_REQ unknown failed LEASE_NOT_FOUND"),
    ("LEASE_FIN t plain held", b"E_LEASE_NOT_FOUND LEASE_FIN held failed LEASE_NOT_FOUND"),
    ("LEASE t c unknown", b"E_LEASE_NOT_FOUND LEASE unknown failed LEASE_NOT_FOUND"),
    ("LEASE t c held 2 100 0", b"E_LEASE_MISMATCH LEASE held failed LEASE_MISMATCH"),
    ("LEASE t c held 1 99 0", b"E_LEASE_MISMATCH LEASE held failed LEASE_MISMATCH"),
    (
        "LEASE_RESERVE t c held 2 100 0",
        b"E_LEASE_MISMATCH LEASE_RESERVE held failed LEASE_MISMATCH",
    ),
    (
        f"LEASE t c new {MAX_RDY + 1} 0 0",
        f"E_INVALID LEASE count {MAX_RDY + 1} out of range 1-{MAX_RDY}".encode(),
    ),
    (
        f"LEASE_RESERVE t c new {MAX_RDY + 1} 0 0",
        f"E_INVALID LEASE_RESERVE count {MAX_RDY + 1} out of range 1-{MAX_RDY}".encode(),
    ),
    ("LEASE t e#ephemeral x 1 0 0", b"E_EPHEMERAL_CHANNEL LEASE x failed EPHEMERAL_CHANNEL"),
    ("LEASE_FIN t e#ephemeral x", b"E_EPHEMERAL_CHANNEL LEASE_FIN x failed EPHEMERAL_CHANNEL"),
]


class Bystander:
    """A consumer of topic ``o`` on the same nsqd: it must go on receiving throughout."""

    def __init__(self, api: HttpApi, conn: RawV2) -> None:
        self.api = api
        self.conn = conn
        self.received = 0

    @classmethod
    async def start(cls, nsqd: NSQD, api: HttpApi) -> Bystander:
        assert (await api.post("/topic/create?topic=o")).status == 200
        assert (await api.post("/channel/create?topic=o&channel=live")).status == 200
        return cls(api, await consumer(nsqd, "o", "live", rdy=1))

    async def still_receives(self) -> None:
        body = b"o-%d" % self.received
        assert (await self.api.post("/pub?topic=o", body)).status == 200
        msg = await self.conn.message()
        assert msg.body == body
        self.conn.cmd(f"FIN {msg.id.decode()}")
        self.received += 1


async def leased_channel(nsqd: NSQD, api: HttpApi) -> tuple[dict[str, Any], dict[str, int]]:
    """Channel t:c with three messages, one of them under lease ``held``; an ephemeral channel
    and a channel that never had a lease beside it. The lease and the channel's counts."""
    await setup(api, b"a", b"b", b"c")
    await setup(api, channel="e%23ephemeral")
    await setup(api, channel="plain")
    held = await take(api, "lease=held&count=1&bytes=100")
    return held, await counts(api)


async def counts(api: HttpApi) -> dict[str, int]:
    stats = await channel_stats(api, "t", "c")
    return {k: stats[k] for k in ("depth", "in_flight_count", "lease_count", "timeout_count")}


@pytest.fixture(params=[False, True], ids=["memory", "durable"])
async def nsqd(request: pytest.FixtureRequest, nsqd_factory: NsqdFactory) -> NSQD:
    return await nsqd_factory(max_rdy_count=MAX_RDY, durable=request.param)


async def test_bad_lease_requests_over_http(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        held, before = await leased_channel(nsqd, api)
        bystander = await Bystander.start(nsqd, api)
        for path, status, code in HTTP_CASES:
            reply = await api.post(path)
            assert (reply.status, reply.message) == (status, code), path
            await bystander.still_receives()
        assert await counts(api) == before, "nothing lost, nothing taken"
        assert await take(api, "lease=held") == held
        await bystander.conn.close()


async def test_bad_lease_commands_over_tcp(nsqd: NSQD) -> None:
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        held, before = await leased_channel(nsqd, api)
        bystander = await Bystander.start(nsqd, api)
        conn = await leasing(nsqd.tcp_port)
        for line, expected in TCP_CASES:
            conn.cmd(line)
            assert await conn.error() == expected, line
            await bystander.still_receives()
        assert await counts(api) == before, "nothing lost, nothing taken"
        conn.cmd("LEASE t c held")  # the refused connection goes on, and the lease is whole
        messages, done = await read_lease(conn)
        assert done == b"LEASED held 1 1"
        assert [(m.id.decode(), m.body) for m in messages] == [
            (m["id"], b"a")
            for m in held["messages"]  # type: ignore[attr-defined]
        ]
        await conn.close()
        await bystander.conn.close()

"""nsqlookupd's HTTP API over real sockets: every route, its exact JSON bytes, statuses,
errors in Go's order and the V1 headers; producers registered through real V1 connections."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from http_reply import TEXT_CT, HttpApi

from nsqpy.nsqlookupd.app import NSQLookupd
from nsqpy.nsqlookupd.registry import GO_ZERO_TIME_UNIX_NANO

from .conftest import START_NS, FakeClock, LookupdFactory, V1Client, V1Connect


@pytest.fixture
async def api(lookupd: NSQLookupd) -> AsyncIterator[HttpApi]:
    async with aiohttp.ClientSession() as session:
        yield HttpApi(session, f"http://127.0.0.1:{lookupd.http_port}")


async def nsqd_peer(connect: V1Connect, name: str, *registrations: bytes) -> V1Client:
    client = await connect()
    await client.identify(broadcast_address=name, hostname=f"{name}-host")
    for line in registrations:
        assert await client.command(line) == b"OK"
    return client


async def test_ping_is_plain_text(api: HttpApi) -> None:
    reply = await api.get("/ping")
    assert (reply.status, reply.body) == (200, b"OK")
    assert reply.headers["Content-Type"] == TEXT_CT
    assert "X-NSQ-Content-Type" not in reply.headers


async def test_info(api: HttpApi) -> None:
    reply = await api.get("/info")
    assert reply.body == b'{"version":"1.3.0"}'
    assert reply.v1_json == {"version": "1.3.0"}


async def test_empty_lists_are_never_null(api: HttpApi) -> None:
    assert (await api.get("/topics")).body == b'{"topics":[]}'
    assert (await api.get("/channels?topic=nope")).body == b'{"channels":[]}'
    assert (await api.get("/nodes")).body == b'{"producers":[]}'
    assert (await api.get("/debug")).body == b"{}"
    assert (await api.post("/topic/create?topic=t")).is_empty_v1_ok()
    reply = await api.get("/lookup?topic=t")
    assert reply.body == b'{"channels":[],"producers":[]}'
    assert reply.v1_json == {"channels": [], "producers": []}


async def test_lookup_errors(api: HttpApi) -> None:
    assert (await api.get("/lookup")).message == "MISSING_ARG_TOPIC"
    reply = await api.get("/lookup?topic=%zz")
    assert (reply.status, reply.message) == (400, "INVALID_REQUEST")
    reply = await api.get("/lookup?topic=nope")
    assert (reply.status, reply.message) == (404, "TOPIC_NOT_FOUND")
    reply = await api.get("/lookup?topic=")
    assert (reply.status, reply.message) == (404, "TOPIC_NOT_FOUND")


async def test_lookup_with_producers(
    api: HttpApi, lookupd: NSQLookupd, connect: V1Connect, clock: FakeClock
) -> None:
    one = await nsqd_peer(connect, "one", b"REGISTER t c1\n", b"REGISTER t c2\n")
    await nsqd_peer(connect, "two", b"REGISTER t\n")
    reply = await api.get("/lookup?topic=t")
    expected_one = (
        b'{"remote_address":"%s","hostname":"one-host","broadcast_address":"one",'
        b'"tcp_port":4150,"http_port":4151,"version":"1.3.0"}' % one.address.encode()
    )
    assert reply.body.startswith(b'{"channels":["c1","c2"],"producers":[' + expected_one + b",")
    assert [p["broadcast_address"] for p in reply.v1_json["producers"]] == ["one", "two"]
    # An inactive producer (no PING for longer than --inactive-producer-timeout) is hidden.
    clock.advance(301)
    assert await one.command(b"PING\n") == b"OK"
    assert [
        p["broadcast_address"] for p in (await api.get("/lookup?topic=t")).v1_json["producers"]
    ] == ["one"]


async def test_topics_and_channels(api: HttpApi, connect: V1Connect) -> None:
    await nsqd_peer(connect, "one", b"REGISTER a x\n", b"REGISTER b\n")
    assert (await api.post("/channel/create?topic=c&channel=y")).is_empty_v1_ok()
    assert (await api.get("/topics")).v1_json == {"topics": ["a", "b", "c"]}
    assert (await api.get("/channels?topic=a")).v1_json == {"channels": ["x"]}
    assert (await api.get("/channels?topic=c")).v1_json == {"channels": ["y"]}
    assert (await api.get("/channels?topic=*")).v1_json == {"channels": ["x", "y"]}  # Go's wildcard
    assert (await api.get("/channels")).message == "MISSING_ARG_TOPIC"
    assert (await api.get("/channels?topic=a;b")).message == "INVALID_REQUEST"


async def test_nodes(api: HttpApi, connect: V1Connect, clock: FakeClock) -> None:
    one = await nsqd_peer(connect, "one", b"REGISTER t1\n", b"REGISTER t2 c\n")
    assert (await api.post("/topic/tombstone?topic=t2&node=one:4151")).is_empty_v1_ok()
    reply = await api.get("/nodes")
    assert reply.body == (
        b'{"producers":[{"remote_address":"%s","hostname":"one-host","broadcast_address":"one",'
        b'"tcp_port":4150,"http_port":4151,"version":"1.3.0","tombstones":[false,true],'
        b'"topics":["t1","t2"]}]}' % one.address.encode()
    )
    clock.advance(46)
    await one.command(b"PING\n")
    assert (await api.get("/nodes")).v1_json["producers"][0]["tombstones"] == [False, False]
    clock.advance(301)
    assert (await api.get("/nodes")).v1_json == {"producers": []}


async def test_debug(api: HttpApi, connect: V1Connect, clock: FakeClock) -> None:
    one = await nsqd_peer(connect, "one", b"REGISTER t\n")
    await api.post("/topic/create?topic=empty")  # no producers: not listed
    clock.advance(5)
    await api.post("/topic/tombstone?topic=t&node=one:4151")
    reply = await api.get("/debug")
    entry = (
        b'{"broadcast_address":"one","hostname":"one-host","http_port":4151,"id":"%s",'
        b'"last_update":%d,"tcp_port":4150,"tombstoned":%s,"tombstoned_at":%d,"version":"1.3.0"}'
    )
    address = one.address.encode()
    assert reply.body == (
        b'{"client::":['
        + entry % (address, START_NS, b"false", GO_ZERO_TIME_UNIX_NANO)
        + b'],"topic:t:":['
        + entry % (address, START_NS, b"true", START_NS + 5_000_000_000)
        + b"]}"
    )


async def test_topic_create_and_delete(api: HttpApi, connect: V1Connect) -> None:
    assert (await api.post("/topic/create")).message == "MISSING_ARG_TOPIC"
    reply = await api.post("/topic/create?topic=bad!")
    assert (reply.status, reply.message) == (400, "INVALID_ARG_TOPIC")
    assert (await api.post("/topic/create?topic=%")).message == "INVALID_REQUEST"
    await nsqd_peer(connect, "one", b"REGISTER t c1\n")
    assert (await api.post("/channel/create?topic=t&channel=c2")).is_empty_v1_ok()
    assert (await api.post("/topic/create?topic=u")).is_empty_v1_ok()
    assert (await api.post("/topic/delete?topic=t")).is_empty_v1_ok()
    assert (await api.get("/topics")).v1_json == {"topics": ["u"]}
    assert (await api.get("/channels?topic=t")).v1_json == {"channels": []}
    assert (await api.get("/lookup?topic=t")).status == 404
    assert (await api.post("/topic/delete?topic=never")).is_empty_v1_ok()  # no 404
    assert (await api.post("/topic/delete")).message == "MISSING_ARG_TOPIC"


@pytest.mark.parametrize("action", ["create", "delete"])
async def test_channel_argument_errors_in_order(api: HttpApi, action: str) -> None:
    path = f"/channel/{action}"
    for query, code in [
        ("", "MISSING_ARG_TOPIC"),
        ("?topic=bad!&channel=bad!", "INVALID_ARG_TOPIC"),
        ("?topic=t", "MISSING_ARG_CHANNEL"),
        ("?topic=t&channel=bad!", "INVALID_ARG_CHANNEL"),
        ("?topic=t&channel=", "INVALID_ARG_CHANNEL"),
        ("?topic=t&channel=%g", "INVALID_REQUEST"),
    ]:
        reply = await api.post(path + query)
        assert (reply.status, reply.message) == (400, code), query


async def test_channel_create_and_delete(api: HttpApi) -> None:
    assert (await api.post("/channel/create?topic=t&channel=c")).is_empty_v1_ok()
    assert (await api.get("/lookup?topic=t")).v1_json == {"channels": ["c"], "producers": []}
    assert (await api.post("/channel/delete?topic=t&channel=c")).is_empty_v1_ok()
    reply = await api.post("/channel/delete?topic=t&channel=c")
    assert (reply.status, reply.message) == (404, "CHANNEL_NOT_FOUND")
    assert (await api.get("/topics")).v1_json == {"topics": ["t"]}


async def test_tombstone(api: HttpApi, connect: V1Connect, clock: FakeClock) -> None:
    one = await nsqd_peer(connect, "one", b"REGISTER t\n")
    two = await nsqd_peer(connect, "two", b"REGISTER t\n")
    assert (await api.post("/topic/tombstone")).message == "MISSING_ARG_TOPIC"
    assert (await api.post("/topic/tombstone?topic=t")).message == "MISSING_ARG_NODE"
    assert (await api.post("/topic/tombstone?topic=t&node=nobody:1")).is_empty_v1_ok()
    assert (await api.post("/topic/tombstone?topic=t&node=one:4151")).is_empty_v1_ok()

    async def producers() -> list[str]:
        reply = await api.get("/lookup?topic=t")
        return [p["broadcast_address"] for p in reply.v1_json["producers"]]

    assert await producers() == ["two"]
    clock.advance(45)
    for client in (one, two):
        await client.command(b"PING\n")
    assert await producers() == ["one", "two"]


async def test_tombstone_lifetime_option(lookupd_factory: LookupdFactory, clock: FakeClock) -> None:
    short = await lookupd_factory(tombstone_lifetime=1_000_000_000)
    client = await V1Client.connect(short.tcp_port)
    try:
        await client.identify(broadcast_address="one")
        await client.command(b"REGISTER t\n")
        async with aiohttp.ClientSession() as session:
            api = HttpApi(session, f"http://127.0.0.1:{short.http_port}")
            await api.post("/topic/tombstone?topic=t&node=one:4151")
            assert (await api.get("/lookup?topic=t")).v1_json["producers"] == []
            clock.advance(1)
            assert len((await api.get("/lookup?topic=t")).v1_json["producers"]) == 1
    finally:
        await client.close()


async def test_router_behaviour(api: HttpApi) -> None:
    reply = await api.get("/topic/create?topic=t")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
    assert reply.headers["Allow"] == "OPTIONS, POST"
    reply = await api.post("/lookup?topic=t")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
    reply = await api.get("/nope")
    assert (reply.status, reply.message) == (404, "NOT_FOUND")
    reply = await api.get("/topics/")
    assert (reply.status, reply.headers["Location"]) == (301, "/topics")


async def test_pprof_index_has_no_trailing_slash(api: HttpApi) -> None:
    reply = await api.get("/debug/pprof")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == TEXT_CT
    assert b"pprof" in reply.body
    reply = await api.get("/debug/pprof/")
    assert (reply.status, reply.headers["Location"]) == (301, "/debug/pprof")
    assert (await api.get("/debug/pprof/cmdline")).status == 200
    assert (await api.get("/debug/pprof/heap")).status == 501
    assert (await api.post("/debug/pprof/symbol")).status == 501

"""TLS, snappy, deflate and AUTH against an in-process nsqd, with nsqpy's client and raw V2."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from nsqpy.client import Config, Consumer, Producer
from nsqpy.client.errors import NSQError
from nsqpy.nsqd.app import NSQD
from nsqpy.protocol.compression import DeflateDecoder, DeflateEncoder, SnappyDecoder, SnappyEncoder
from nsqpy.protocol.frames import FrameDecoder
from tests.conftest import NsqdFactory, wait_for
from tests.tls_certs import Certs, make_certs
from tests.v2client import RawV2


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_opts(certs: Certs, **more: Any) -> dict[str, Any]:
    return {"tls_cert": str(certs.server_cert), "tls_key": str(certs.server_key), **more}


def client_config(certs: Certs, **more: Any) -> Config:
    return Config(tls_root_ca_file=str(certs.ca), **more)


def identify_body(**fields: Any) -> bytes:
    return json.dumps({"feature_negotiation": True, **fields}).encode()


# -- an auth server -------------------------------------------------------------------------
@dataclass
class AuthServer:
    address: str = ""
    queries: list[dict[str, str]] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    #: secret -> (status, JSON reply)
    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)


@pytest.fixture
async def auth_server() -> AsyncIterator[AuthServer]:
    server = AuthServer()

    async def handle(request: web.Request) -> web.Response:
        server.queries.append(dict(request.query))
        server.headers.append(request.headers.get("Accept", ""))
        status, reply = server.answers.get(request.query.get("secret", ""), (403, {}))
        return web.json_response(reply, status=status)

    app = web.Application()
    app.router.add_get("/auth", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    port = next(iter(site._server.sockets)).getsockname()[1]  # type: ignore[attr-defined]
    server.address = f"127.0.0.1:{port}"
    yield server
    await runner.cleanup()


def grant(topic: str, channels: list[str], permissions: list[str], ttl: int = 3600) -> Any:
    return {
        "ttl": ttl,
        "identity": "someone",
        "identity_url": "https://example.com/someone",
        "authorizations": [{"topic": topic, "channels": channels, "permissions": permissions}],
    }


# -- helpers --------------------------------------------------------------------------------
async def roundtrip(
    nsqd: NSQD,
    config: Config,
    topic: str,
    bodies: list[bytes],
    stats: list[dict[str, Any]] | None = None,
) -> list[bytes]:
    async with Producer(nsqd.tcp_address, config=config) as producer:
        await producer.multi_publish(topic, bodies)
        await producer.publish(topic, b"single")
    got: list[bytes] = []
    async with Consumer(
        topic, "c", nsqd_tcp_addresses=nsqd.tcp_address, config=config, max_in_flight=100
    ) as consumer:
        async for msg in consumer:
            got.append(msg.body)
            msg.finish()
            if len(got) == len(bodies) + 1:
                if stats is not None:
                    stats.extend(client_stats(nsqd))
                break
    return got


def client_stats(nsqd: NSQD) -> list[dict[str, Any]]:
    from nsqpy.nsqd.observe.stats import client_stats as one

    return [one(conn).to_json() for conn in nsqd.clients.values()]


def leftover(raw: RawV2) -> bytes:
    """Bytes the raw client read past its last frame (compressed once nsqd switched)."""
    data = bytes(raw.decoder._buf)
    raw.decoder._buf.clear()
    return data


class TlsRaw(RawV2):
    """RawV2 that can upgrade itself in the middle of the stream, as nsqd asks."""

    async def start_tls(self, context: ssl.SSLContext) -> None:
        await self.writer.start_tls(context, server_hostname="localhost")


# -- TLS and compression with nsqpy's client --------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "snappy", "deflate"])
@pytest.mark.parametrize("use_tls", [True, False])
async def test_roundtrip_tls_and_compression(
    nsqd_factory: NsqdFactory, certs: Certs, use_tls: bool, compression: str
) -> None:
    nsqd = await nsqd_factory(**tls_opts(certs))
    extra: dict[str, Any] = {}
    if compression != "none":
        extra[compression] = True
    config = client_config(certs, tls_v1=use_tls, **extra)
    bodies = [b"x" * 70_000, b"\x00\n\r", b"compress me " * 500] + [
        f"m{i}".encode() for i in range(200)
    ]
    seen: list[dict[str, Any]] = []
    got = await roundtrip(nsqd, config, "t", bodies, seen)
    assert sorted(got) == sorted([*bodies, b"single"])
    (doc, *_) = seen
    assert doc["tls"] is use_tls
    assert doc["snappy"] is (compression == "snappy")
    assert doc["deflate"] is (compression == "deflate")
    if use_tls:
        assert doc["tls_version"].startswith("TLS1.")
        assert doc["tls_cipher_suite"]


async def test_raw_tls_then_snappy_ok_frames(nsqd_factory: NsqdFactory, certs: Certs) -> None:
    """JSON reply in the clear, OK over TLS, then OK snappy-compressed over TLS."""
    nsqd = await nsqd_factory(**tls_opts(certs))
    raw = await TlsRaw.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(tls_v1=True, snappy=True))
    reply = json.loads(await raw.response())
    assert (reply["tls_v1"], reply["snappy"], reply["deflate"]) == (True, True, False)
    assert raw.decoder.next() is None
    await raw.start_tls(ssl.create_default_context(cafile=str(certs.ca)))
    assert await raw.response() == b"OK"
    compressed = await raw.reader.read(65536)
    decoder = SnappyDecoder()
    frames = FrameDecoder()
    frames.feed(decoder.decompress(compressed))
    frame = frames.next()
    assert frame is not None and frame.data == b"OK"
    raw.send(SnappyEncoder().compress(b"PUB t\n" + struct.pack(">i", 3) + b"abc"))
    frames.feed(decoder.decompress(await raw.reader.read(65536)))
    frame = frames.next()
    assert frame is not None and frame.data == b"OK"
    raw.writer.close()


async def test_raw_deflate_level_is_capped(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(max_deflate_level=4)
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(deflate=True, deflate_level=9))
    reply = json.loads(await raw.response())
    assert (reply["deflate"], reply["deflate_level"], reply["max_deflate_level"]) == (True, 4, 4)
    decoder = DeflateDecoder()
    frames = FrameDecoder()
    frames.feed(decoder.decompress(leftover(raw)))  # the OK may have come with the JSON
    while (frame := frames.next()) is None:
        frames.feed(decoder.decompress(await raw.reader.read(65536)))
    assert frame.data == b"OK"
    encoder = DeflateEncoder(4)
    raw.send(encoder.compress(b"NOP\nPUB t\n" + struct.pack(">i", 2) + b"hi"))
    while (frame := frames.next()) is None:
        frames.feed(decoder.decompress(await raw.reader.read(65536)))
    assert frame.data == b"OK"


async def test_a_rdy_sent_with_a_durable_sub_runs_on_a_deflate_connection(
    nsqd_factory: NsqdFactory,
) -> None:
    """A durable SUB of a new channel waits for nsqd.dat, and its connection stalls. A RDY
    that arrived inflated in the same read must run when the connection resumes, not wait in
    the reader for more input (pynsq's deflate Reader got nothing for a heartbeat interval)."""
    nsqd = await nsqd_factory(durable=True)
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(deflate=True, deflate_level=6))
    assert json.loads(await raw.response())["deflate"] is True
    decoder = DeflateDecoder()
    frames = FrameDecoder()
    frames.feed(decoder.decompress(leftover(raw)))
    while (frame := frames.next()) is None:
        frames.feed(decoder.decompress(await raw.reader.read(65536)))
    assert frame.data == b"OK"
    raw.send(DeflateEncoder(6).compress(b"SUB stalls ch\nRDY 3\n"))  # one write, nothing after
    while (frame := frames.next()) is None:
        frames.feed(decoder.decompress(await raw.reader.read(65536)))
    assert frame.data == b"OK"
    channel = nsqd.broker.topics["stalls"].channels["ch"]
    await wait_for(lambda: [c.rdy for c in channel.clients.values()] == [3])


async def test_snappy_and_deflate_together_refused(nsqd: NSQD) -> None:
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(snappy=True, deflate=True))
    assert await raw.error() == (
        b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    )
    assert await raw.reader.read() == b""


async def test_compression_switched_off(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(snappy=False, deflate=False)
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(snappy=True, deflate=True))
    reply = json.loads(await raw.response())
    assert (reply["snappy"], reply["deflate"], reply["tls_v1"]) == (False, False, False)
    raw.cmd("PUB t", b"plain")
    assert await raw.response() == b"OK"


async def test_corrupt_compressed_stream_closes(nsqd: NSQD) -> None:
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body(snappy=True))
    await raw.response()
    raw.send(b"\xff\x06\x00\x00sNaPpY\x00\x05\x00\x00garbage")
    async with asyncio.timeout(5):
        while await raw.reader.read(65536):
            pass  # the snappy OK, then EOF: nsqd closed the connection
    await wait_for(lambda: not nsqd.clients)


# -- the TLS-required gate --------------------------------------------------------------------
@pytest.mark.parametrize("required", [2, 1])
async def test_tls_required_gate(nsqd_factory: NsqdFactory, certs: Certs, required: int) -> None:
    nsqd = await nsqd_factory(**tls_opts(certs, tls_required=required))
    for line, body, name in (
        ("PUB t", b"x", "PUB"),
        ("SUB t c", None, "SUB"),
        ("NOP", None, "NOP"),
        ("AUTH", b"s", "AUTH"),
        ("BOGUS", None, "BOGUS"),
    ):
        raw = await RawV2.connect(nsqd.tcp_port)
        raw.cmd(line, body)
        expected = f"E_INVALID cannot {name} in current state (TLS required)"
        assert await raw.error() == expected.encode()
        assert await raw.reader.read() == b""
    # after the upgrade everything works
    config = client_config(certs, tls_v1=True)
    assert await roundtrip(nsqd, config, "gated", [b"a"]) == [b"a", b"single"]


async def test_tls_client_certificate_required(nsqd_factory: NsqdFactory, certs: Certs) -> None:
    nsqd = await nsqd_factory(
        **tls_opts(certs, tls_client_auth_policy="require-verify", tls_root_ca_file=str(certs.ca))
    )
    good = client_config(
        certs, tls_v1=True, tls_cert=str(certs.client_cert), tls_key=str(certs.client_key)
    )
    assert await roundtrip(nsqd, good, "cert", [b"a"]) == [b"a", b"single"]
    for cert, key in ((None, None), (certs.rogue_cert, certs.rogue_key)):
        bad = client_config(
            certs,
            tls_v1=True,
            tls_cert=str(cert) if cert else "",
            tls_key=str(key) if key else "",
        )
        producer = Producer(nsqd.tcp_address, config=bad)
        with pytest.raises((NSQError, OSError, ssl.SSLError)):
            async with producer:
                await producer.publish("cert", b"nope")


# -- HTTPS ----------------------------------------------------------------------------------
async def test_https_listener_and_http_tls_required(
    nsqd_factory: NsqdFactory, certs: Certs
) -> None:
    nsqd = await nsqd_factory(**tls_opts(certs, https_address="127.0.0.1:0", tls_required=2))
    assert nsqd.https_port > 0
    context = ssl.create_default_context(cafile=str(certs.ca))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"https://{nsqd.https_address}/ping", ssl=context) as resp:
            assert (resp.status, await resp.text()) == (200, "OK")
        async with session.post(
            f"https://{nsqd.https_address}/pub?topic=h", data=b"hi", ssl=context
        ) as resp:
            assert (resp.status, await resp.text()) == (200, "OK")
        async with session.get(f"http://{nsqd.http_address}/ping") as resp:
            assert resp.status == 403
            assert resp.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
            assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
            assert await resp.text() == (
                f'{{"message": "TLS_REQUIRED", "https_port": {nsqd.https_port}}}'
            )


async def test_https_only_with_a_certificate(nsqd_factory: NsqdFactory) -> None:
    nsqd = await nsqd_factory(https_address="127.0.0.1:0")
    assert nsqd.https_port == 0


async def test_tcp_https_leaves_http_open(nsqd_factory: NsqdFactory, certs: Certs) -> None:
    nsqd = await nsqd_factory(**tls_opts(certs, tls_required=1))
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{nsqd.http_address}/ping") as resp,
    ):
        assert resp.status == 200


# -- AUTH -----------------------------------------------------------------------------------
async def auth_raw(nsqd: NSQD, secret: bytes | None) -> RawV2:
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("IDENTIFY", identify_body())
    assert json.loads(await raw.response())["auth_required"] is True
    if secret is not None:
        raw.cmd("AUTH", secret)
    return raw


async def test_auth_allowed_and_refused(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> None:
    auth_server.answers["pub"] = (200, grant("^allowed", [".*"], ["publish"]))
    auth_server.answers["sub"] = (200, grant("allowed", ["^good$"], ["subscribe"]))
    nsqd = await nsqd_factory(auth_http_addresses=[auth_server.address])

    raw = await auth_raw(nsqd, b"pub")
    assert json.loads(await raw.response()) == {
        "identity": "someone",
        "identity_url": "https://example.com/someone",
        "permission_count": 1,
    }
    raw.cmd("PUB allowed-topic", b"x")
    assert await raw.response() == b"OK"
    raw.cmd("MPUB allowed-topic", struct.pack(">ii", 1, 1) + b"y")
    assert await raw.response() == b"OK"
    raw.cmd("DPUB allowed-topic 10", b"z")
    assert await raw.response() == b"OK"
    (doc,) = client_stats(nsqd)
    assert (doc["authed"], doc["auth_identity"], doc["auth_identity_url"]) == (
        True,
        "someone",
        "https://example.com/someone",
    )
    raw.cmd("PUB other", b"x")
    assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""'

    raw = await auth_raw(nsqd, b"pub")
    await raw.response()
    raw.cmd("MPUB other", struct.pack(">ii", 1, 1) + b"y")
    assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for MPUB on "other" ""'

    raw = await auth_raw(nsqd, b"pub")
    await raw.response()
    raw.cmd("SUB allowed-topic good")  # publish-only grant
    assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "allowed-topic" "good"'

    raw = await auth_raw(nsqd, b"sub")
    await raw.response()
    raw.cmd("SUB not-allowed-topic good")  # unanchored regex: matches
    assert await raw.response() == b"OK"

    raw = await auth_raw(nsqd, b"sub")
    await raw.response()
    raw.cmd("SUB allowed bad")
    assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "allowed" "bad"'

    query = auth_server.queries[0]
    assert query == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "pub", "tls": "false"}
    assert auth_server.headers[0] == "application/vnd.nsq; version=1.0"


async def test_auth_errors(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> None:
    auth_server.answers["none"] = (200, {"ttl": 10, "authorizations": []})
    auth_server.answers["badperm"] = (200, grant(".*", [".*"], ["admin"]))
    auth_server.answers["badttl"] = (200, grant(".*", [".*"], ["publish"], ttl=0))
    auth_server.answers["badre"] = (200, grant("(", [".*"], ["publish"]))
    auth_server.answers["ok"] = (200, grant(".*", [".*"], ["publish"]))
    nsqd = await nsqd_factory(auth_http_addresses=[auth_server.address])

    for cmd, body, name in (("PUB t", b"x", "PUB"), ("SUB t c", None, "SUB")):
        raw = await auth_raw(nsqd, None)
        raw.cmd(cmd, body)
        assert await raw.error() == f"E_AUTH_FIRST AUTH required before {name}".encode()
    raw = await auth_raw(nsqd, None)
    raw.cmd("MPUB t", struct.pack(">ii", 1, 1) + b"y")
    assert await raw.error() == b"E_AUTH_FIRST AUTH required before MPUB"

    raw = await auth_raw(nsqd, b"none")
    assert await raw.error() == b"E_UNAUTHORIZED AUTH no authorizations found"
    for secret in (b"badperm", b"badttl", b"badre", b"unknown-secret-403"):
        raw = await auth_raw(nsqd, secret)
        assert await raw.error() == b"E_AUTH_FAILED AUTH failed"
        assert await raw.reader.read() == b""

    raw = await auth_raw(nsqd, b"ok")
    await raw.response()
    raw.cmd("AUTH", b"ok")
    assert await raw.error() == b"E_INVALID AUTH already set"

    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("AUTH extra", b"ok")
    assert await raw.error() == b"E_INVALID AUTH invalid number of parameters"


async def test_auth_disabled(nsqd: NSQD) -> None:
    raw = await RawV2.connect(nsqd.tcp_port)
    raw.cmd("AUTH", b"secret")
    assert await raw.error() == b"E_AUTH_DISABLED AUTH disabled"


async def test_auth_server_down(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> None:
    nsqd = await nsqd_factory(auth_http_addresses=["127.0.0.1:1"])
    raw = await auth_raw(nsqd, b"anything")
    assert await raw.error() == b"E_AUTH_FAILED AUTH failed"
    assert await raw.reader.read() == b""


async def test_auth_ttl_refresh(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> None:
    auth_server.answers["s"] = (200, grant(".*", [".*"], ["publish"], ttl=1))
    nsqd = await nsqd_factory(auth_http_addresses=[f"http://{auth_server.address}/auth"])
    raw = await auth_raw(nsqd, b"s")
    await raw.response()
    raw.cmd("PUB t", b"1")
    assert await raw.response() == b"OK"
    assert len(auth_server.queries) == 1
    (conn,) = nsqd.clients.values()
    assert conn.auth_state is not None
    expires = conn.auth_state.expires
    await wait_for(lambda: nsqd.loop.time() > expires, timeout=3)
    # expired: this PUB waits for a refresh, the next one is queued behind it
    auth_server.answers["s"] = (200, grant("^only-this$", [".*"], ["publish"], ttl=1))
    raw.cmd("PUB only-this", b"2")
    raw.cmd("PUB t", b"3")
    assert await raw.response() == b"OK"
    assert await raw.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""'
    assert len(auth_server.queries) == 2

    # refresh failing: E_AUTH_FAILED
    raw = await auth_raw(nsqd, b"s")
    await raw.response()
    (conn,) = [c for c in nsqd.clients.values() if c.auth_state is not None][-1:]
    expires = conn.auth_state.expires if conn.auth_state else 0.0
    del auth_server.answers["s"]
    await wait_for(lambda: nsqd.loop.time() > expires, timeout=3)
    raw.cmd("PUB only-this", b"4")
    assert await raw.error() == b"E_AUTH_FAILED AUTH failed"


async def test_auth_with_tls_client_certificate(
    nsqd_factory: NsqdFactory, certs: Certs, auth_server: AuthServer
) -> None:
    auth_server.answers["s"] = (200, grant(".*", [".*"], ["publish", "subscribe"]))
    nsqd = await nsqd_factory(
        **tls_opts(certs, tls_client_auth_policy="require-verify", tls_root_ca_file=str(certs.ca)),
        auth_http_addresses=[auth_server.address],
    )
    config = client_config(
        certs,
        tls_v1=True,
        snappy=True,
        tls_cert=str(certs.client_cert),
        tls_key=str(certs.client_key),
        auth_secret="s",
    )
    assert await roundtrip(nsqd, config, "authtls", [b"a", b"b"]) == [b"a", b"b", b"single"]
    assert auth_server.queries[0] == {
        "common_name": "test-client",
        "remote_ip": "127.0.0.1",
        "secret": "s",
        "tls": "true",
    }


async def test_client_auth_refused(nsqd_factory: NsqdFactory, auth_server: AuthServer) -> None:
    auth_server.answers["p"] = (200, grant("^pubonly$", [".*"], ["publish"]))
    nsqd = await nsqd_factory(auth_http_addresses=[auth_server.address])
    config = Config(auth_secret="p")
    async with Producer(nsqd.tcp_address, config=config) as producer:
        await producer.publish("pubonly", b"ok")
        with pytest.raises(NSQError):
            await producer.publish("elsewhere", b"no")


# -- nsqpy's --http-auth-required (NSQ #1183) ------------------------------------------------


async def test_http_api_bearer_secret_checked_with_the_auth_server(
    nsqd_factory: NsqdFactory, auth_server: AuthServer
) -> None:
    auth_server.answers["pub-only"] = (200, grant("^orders$", [".*"], ["publish"]))
    auth_server.answers["sub-only"] = (200, grant("^orders$", ["^ch$"], ["subscribe"]))
    nsqd = await nsqd_factory(
        auth_http_addresses=[auth_server.address], http_auth_required=True
    )
    base = f"http://127.0.0.1:{nsqd.http_port}"

    async def call(path: str, secret: str | None, **params: str) -> tuple[int, str]:
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        async with aiohttp.ClientSession() as http, http.post(
            base + path, params=params, data=b"body", headers=headers
        ) as resp:
            return resp.status, (await resp.text())

    assert await call("/pub", None, topic="orders") == (401, '{"message": "AUTH_REQUIRED"}')
    assert await call("/pub", "nope", topic="orders") == (403, '{"message": "AUTH_FAILED"}')
    assert await call("/pub", "pub-only", topic="other") == (403, '{"message": "UNAUTHORIZED"}')
    assert await call("/pub", "pub-only", topic="orders") == (200, "OK")
    assert (await call("/channel/create", "pub-only", topic="orders", channel="ch"))[0] == 403
    assert (await call("/channel/create", "sub-only", topic="orders", channel="ch"))[0] == 200
    assert (await call("/topic/pause", "sub-only", topic="orders"))[0] == 403
    # /ping and /stats stay open; the answer for a secret is cached for its TTL
    async with aiohttp.ClientSession() as http, http.get(base + "/ping") as resp:
        assert resp.status == 200
    secrets = [q["secret"] for q in auth_server.queries]
    assert secrets.count("pub-only") == 1
    assert nsqd.broker.topics["orders"].message_count == 1


async def test_http_auth_required_needs_an_auth_server(nsqd_factory: NsqdFactory) -> None:
    from nsqpy.nsqd.app import StartupError

    with pytest.raises(StartupError, match="--http-auth-required needs --auth-http-address"):
        await nsqd_factory(http_auth_required=True)

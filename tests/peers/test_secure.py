"""TLS, snappy, deflate and AUTH with pynsq and gnsq as peers against a real nsqpy nsqd."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.tls_certs import Certs, make_certs

from .conftest import NsqdProcFactory
from .harness import NsqdProcess, b64list, bodies_of, run_peer

pytestmark = pytest.mark.peers

CLIENTS = ["pynsq", "gnsq"]
BODIES = [b"first", b"\x00\n\r\xff", b"compress me " * 400, bytes(range(256)) * 300]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_flags(certs: Certs, *more: str) -> list[str]:
    return [f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}", *more]


def transport(certs: Certs, *, tls: bool = False, cert: bool = False, **more: Any) -> Any:
    t: dict[str, Any] = {"ca": str(certs.ca), **more}
    if tls:
        t["tls_v1"] = True
    if cert:
        t.update(cert=str(certs.client_cert), key=str(certs.client_key))
    return t


def params(nsqd: NsqdProcess, topic: str, channel: str, **more: Any) -> dict[str, Any]:
    return {"tcp": nsqd.tcp, "http": nsqd.http, "topic": topic, "channel": channel, **more}


async def secure_roundtrip(
    client: str, nsqd: NsqdProcess, topic: str, channel: str, t: Any
) -> dict[str, Any]:
    res = await run_peer(
        client, "secure", params(nsqd, topic, channel, bodies=b64list(BODIES), transport=t)
    )
    assert res["responses"] == ["OK", "OK"]
    assert sorted(bodies_of(res["deliveries"])) == sorted(BODIES)
    return res


# -- TLS x compression ----------------------------------------------------------------------
@pytest.mark.parametrize("compression", ["none", "snappy", "deflate"])
@pytest.mark.parametrize("use_tls", [True, False], ids=["tls", "plain"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_tls_and_compression(
    nsqd_proc_factory: NsqdProcFactory,
    certs: Certs,
    topic: str,
    channel: str,
    client: str,
    use_tls: bool,
    compression: str,
) -> None:
    nsqd = nsqd_proc_factory(*tls_flags(certs))
    extra = {compression: True} if compression != "none" else {}
    t = transport(certs, tls=use_tls, **extra)
    res = await secure_roundtrip(client, nsqd, topic, channel, t)
    identify = res["identify_response"]
    assert identify["tls_v1"] is use_tls
    assert identify["snappy"] is (compression == "snappy")
    assert identify["deflate"] is (compression == "deflate")


@pytest.mark.parametrize("client", CLIENTS)
async def test_tls_client_certificate(
    nsqd_proc_factory: NsqdProcFactory, certs: Certs, topic: str, channel: str, client: str
) -> None:
    nsqd = nsqd_proc_factory(
        *tls_flags(
            certs, "--tls-client-auth-policy=require-verify", f"--tls-root-ca-file={certs.ca}"
        )
    )
    await secure_roundtrip(
        client, nsqd, topic, channel, transport(certs, tls=True, cert=True, snappy=True)
    )
    # without a certificate the handshake fails
    res = await run_peer(
        client,
        "secure_refused",
        params(nsqd, topic, channel, transport=transport(certs, tls=True)),
        expect_ok=False,
    )
    assert res.get("response") != "OK" and res.get("reply", {}).get("data") != "OK", res


@pytest.mark.parametrize("client", CLIENTS)
async def test_tls_required_refuses_plain_peers(
    nsqd_proc_factory: NsqdProcFactory, certs: Certs, topic: str, channel: str, client: str
) -> None:
    nsqd = nsqd_proc_factory(*tls_flags(certs, "--tls-required=true"))
    res = await run_peer(client, "secure_refused", params(nsqd, topic, channel, transport={}))
    # pynsq shows the whole error frame; gnsq an exception class (NSQInvalid) and the text
    assert "cannot PUB in current state (TLS required)" in str(res), res


async def test_deflate_and_snappy_refused_gnsq(
    nsqd_proc: NsqdProcess, certs: Certs, topic: str, channel: str
) -> None:
    res = await run_peer(
        "gnsq",
        "secure_refused",
        params(nsqd_proc, topic, channel, transport=transport(certs, snappy=True, deflate=True)),
    )
    assert res["error"] == {
        "class": "NSQErrorIdentifyFailed",
        "text": "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
    } or res["error"]["text"].endswith("cannot enable both deflate and snappy compression")


async def test_deflate_and_snappy_refused_pynsq(
    nsqd_proc: NsqdProcess, certs: Certs, topic: str, channel: str
) -> None:
    res = await run_peer(
        "pynsq",
        "secure_refused",
        params(nsqd_proc, topic, channel, transport=transport(certs, snappy=True, deflate=True)),
    )
    assert res["closed"] is True
    assert any("cannot enable both deflate and snappy compression" in e for e in res["errors"])


# -- AUTH -----------------------------------------------------------------------------------
@pytest.fixture
async def auth_address() -> AsyncIterator[str]:
    """An auth server: secret "pub" may publish to ^pub, "sub" may subscribe to ^sub.* / ok."""

    def grant(topic: str, permission: str) -> dict[str, Any]:
        return {
            "ttl": 60,
            "identity": f"peer-{permission}",
            "identity_url": "",
            "authorizations": [
                {"topic": topic, "channels": ["^ok$", "^$"], "permissions": [permission]}
            ],
        }

    answers = {"pub": grant("^pub", "publish"), "sub": grant("^sub", "subscribe")}

    async def handle(request: web.Request) -> web.Response:
        answer = answers.get(request.query.get("secret", ""))
        if answer is None:
            return web.json_response({"message": "unknown secret"}, status=403)
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/auth", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = next(iter(server.sockets)).getsockname()[1]  # type: ignore[attr-defined]
    yield f"127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize("client", CLIENTS)
async def test_auth_allowed_and_refused(
    nsqd_proc_factory: NsqdProcFactory, certs: Certs, auth_address: str, client: str
) -> None:
    nsqd = nsqd_proc_factory(f"--auth-http-address={auth_address}")
    pub = transport(certs, auth_secret="pub")
    res = await run_peer(
        client,
        "secure",
        params(nsqd, "pub-topic", "ok", bodies=b64list(BODIES), transport=pub, publish_only=True),
    )
    assert res["responses"] == ["OK", "OK"]
    assert res["identify_response"]["auth_required"] is True

    # publishing where the grant does not reach
    res = await run_peer(
        client, "secure_refused", params(nsqd, "elsewhere", "ok", transport=pub), expect_ok=False
    )
    assert 'AUTH failed for PUB on "elsewhere" ""' in str(res), res

    # subscribing with a publish-only secret
    res = await run_peer(
        client,
        "secure_refused",
        params(nsqd, "pub-topic", "ok", transport=pub, role="reader"),
        expect_ok=False,
    )
    assert 'AUTH failed for SUB on "pub-topic" "ok"' in str(res), res

    # subscribing where the subscribe grant reaches
    sub = transport(certs, auth_secret="sub")
    res = await run_peer(
        client,
        "secure_refused",
        params(nsqd, "sub-topic", "ok", transport=sub, role="reader"),
        expect_ok=False,
    )
    if client == "gnsq":
        assert res["reply"] == {"frame": "response", "data": "OK"}, res
    else:
        assert res["errors"] == [], res

    # unknown secret: the auth server says 403, nsqd says E_AUTH_FAILED
    res = await run_peer(
        client,
        "secure_refused",
        params(nsqd, "pub-topic", "ok", transport=transport(certs, auth_secret="nope")),
        expect_ok=False,
    )
    assert "AUTH failed" in str(res.get("error") or res.get("errors")), res


@pytest.mark.parametrize("client", CLIENTS)
async def test_auth_server_down(
    nsqd_proc_factory: NsqdProcFactory, certs: Certs, topic: str, channel: str, client: str
) -> None:
    nsqd = nsqd_proc_factory("--auth-http-address=127.0.0.1:1")
    res = await run_peer(
        client,
        "secure_refused",
        params(nsqd, topic, channel, transport=transport(certs, auth_secret="s")),
        expect_ok=False,
    )
    assert "AUTH failed" in str(res.get("error") or res.get("errors")), res

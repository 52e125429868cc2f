"""nsqadmin's pages, assets, base path, compression, /config guard and graphite routes."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nsqpy.nsqadmin.pages import PACKAGE_STATIC

from .conftest import AdminCluster

TEMPLATE = (
    "<html><head><base href='__BASE__'>"
    '<script id="cfg" type="application/json">__NSQADMIN_CONFIG__</script></head>'
    "<body><a href='__BASE__topics'>t</a></body></html>"
)
PAGES = ["", "topics", "topics/t", "topics/t/c", "nodes", "nodes/h:1", "counter", "lookup"]


@pytest.fixture
def static(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    root.mkdir()
    (root / "index.html").write_text(TEMPLATE)
    (root / "app.js").write_text("console.log('hi');\n")
    (root / "app.css").write_text("body { color: red }\n")
    (root / "logo.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    return root


def config_of(html: str) -> dict[str, Any]:
    match = re.search(r'<script id="cfg" type="application/json">(.*)</script>', html)
    assert match, html
    doc: dict[str, Any] = json.loads(match.group(1))
    return doc


async def test_pages_serve_index_with_placeholders(
    admin_cluster: AdminCluster, static: Path
) -> None:
    c = admin_cluster
    admin = await c.start_admin(dev_static_dir=str(static))
    for page in PAGES:
        reply = await c.api("GET", f"/{page}", admin=admin)
        assert reply.status == 200, page
        assert reply.headers["Content-Type"] == "text/html"
        html = reply.body.decode()
        assert "__BASE__" not in html and "__NSQADMIN_CONFIG__" not in html
        assert "<base href='/'>" in html and "<a href='/topics'>" in html
    assert config_of(html) == {
        "version": "1.3.0",
        "base_path": "/",
        "nsqlookupd": [c.lookupd_http],
        "is_admin": True,
        "sample_interval": 0.2,
        "history_seconds": 600,
        "graph_enabled": False,
        "graphite_url": "",
        "proxy_graphite": False,
        "statsd_interval": 60,
        "statsd_counter_format": "stats.counters.%s.count",
        "statsd_gauge_format": "stats.gauges.%s",
        "statsd_prefix": "nsq.%s",
    }


async def test_config_json_cannot_close_the_script(
    admin_cluster: AdminCluster, static: Path
) -> None:
    c = admin_cluster
    admin = await c.start_admin(dev_static_dir=str(static), graphite_url="http://x/</script>&")
    html = (await c.api("GET", "/", admin=admin)).body.decode()
    assert "</script>&" not in html
    assert '"graphite_url":"http://x/\\u003c/script\\u003e\\u0026"' in html
    assert config_of(html)["graphite_url"] == "http://x/</script>&"


async def test_is_admin_follows_the_acl_header(admin_cluster: AdminCluster, static: Path) -> None:
    c = admin_cluster
    admin = await c.start_admin(dev_static_dir=str(static), admin_users=["alice"])
    anonymous = (await c.api("GET", "/topics", admin=admin)).body.decode()
    assert config_of(anonymous)["is_admin"] is False
    alice = await c.api("GET", "/topics", headers={"X-Forwarded-User": "alice"}, admin=admin)
    assert config_of(alice.body.decode())["is_admin"] is True


async def test_static_assets(admin_cluster: AdminCluster, static: Path) -> None:
    c = admin_cluster
    admin = await c.start_admin(dev_static_dir=str(static))
    expected = {
        "app.js": "text/javascript; charset=utf-8",
        "app.css": "text/css; charset=utf-8",
        "logo.svg": "image/svg+xml",
        "blob.bin": "application/octet-stream",
    }
    for name, content_type in expected.items():
        reply = await c.api("GET", f"/static/{name}", admin=admin)
        assert (reply.status, reply.headers["Content-Type"]) == (200, content_type), name
        assert reply.body == (static / name).read_bytes()
        assert "X-NSQ-Content-Type" not in reply.headers
    for path in ("/static/missing.js", "/static/..", "/static/%2e%2e", "/fonts/x.woff"):
        reply = await c.api("GET", path, admin=admin)
        assert (reply.status, reply.body) == (404, b"NOT_FOUND"), path


@pytest.mark.skipif(
    not (PACKAGE_STATIC / "index.html").exists(), reason="the UI's index.html is not there yet"
)
async def test_the_packaged_ui_is_served(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    reply = await c.api("GET", "/topics")
    assert reply.status == 200
    assert "__BASE__" not in reply.body.decode()
    assert '"base_path":"/"' in reply.body.decode()
    for name in ("app.js", "app.css"):
        if (PACKAGE_STATIC / name).exists():
            assert (await c.api("GET", f"/static/{name}")).status == 200


async def test_base_path_prefixes_everything(admin_cluster: AdminCluster, static: Path) -> None:
    c = admin_cluster
    admin = await c.start_admin(dev_static_dir=str(static), base_path="admin/")
    assert admin.opts.base_path == "/admin"
    assert admin.url.endswith("/admin/")
    page = await c.api("GET", "/admin/topics/t", admin=admin)
    assert page.status == 200
    assert "<base href='/admin/'>" in page.body.decode()
    assert config_of(page.body.decode())["base_path"] == "/admin/"
    assert (await c.api("GET", "/admin", admin=admin)).status == 200
    redirect = await c.api("GET", "/admin/", admin=admin)  # httprouter's trailing-slash fix
    assert (redirect.status, redirect.headers["Location"]) == (301, "/admin")
    assert (await c.api("GET", "/admin/static/app.js", admin=admin)).status == 200
    assert (await c.api("GET", "/admin/ping", admin=admin)).body == b"OK"
    assert (await c.api("GET", "/admin/api/topics", admin=admin)).json["message"] == ""
    assert (await c.api("GET", "/admin/config/base_path", admin=admin)).body == b"/admin"
    for path in ("/topics", "/api/topics", "/ping"):
        reply = await c.api("GET", path, admin=admin)
        assert (reply.status, reply.message) == (404, "NOT_FOUND"), path


async def test_gzip_and_deflate_when_asked(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    plain = await c.api("GET", "/api/topics", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers  # (aiohttp asks for gzip by default)
    raw = await c.http.get(
        f"{c.url}/api/topics", headers={"Accept-Encoding": "br, gzip"}, auto_decompress=False
    )
    async with raw:
        assert raw.headers["Content-Encoding"] == "gzip"
        assert raw.headers["Vary"] == "Accept-Encoding"
        assert raw.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
        assert gzip.decompress(await raw.read()) == plain.body
    raw = await c.http.get(
        f"{c.url}/api/nope", headers={"Accept-Encoding": "deflate"}, auto_decompress=False
    )
    async with raw:
        assert (raw.status, raw.headers["Content-Encoding"]) == (404, "deflate")
        body = zlib.decompress(await raw.read(), -zlib.MAX_WBITS)  # raw DEFLATE, as Go's
        assert body == b'{"message":"NOT_FOUND"}'
    weighted = await c.api("GET", "/api/topics", headers={"Accept-Encoding": "gzip;q=1"})
    assert "Content-Encoding" not in weighted.headers  # Go matches whole tokens only


async def test_router_errors(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    assert (await c.api("GET", "/ping")).body == b"OK"
    reply = await c.api("GET", "/api/unknown")
    assert (reply.status, reply.message) == (404, "NOT_FOUND")
    reply = await c.api("PUT", "/api/topics")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
    assert reply.headers["Allow"] == "GET, OPTIONS, POST"


async def test_config_routes_and_cidr_guard(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    reply = await c.api("GET", "/config/nsqlookupd_http_addresses")
    assert reply.v1_json == [c.lookupd_http]
    assert (await c.api("GET", "/config/log_level")).v1_json == 2
    assert (await c.api("GET", "/config/http_client_request_timeout")).v1_json == 5_000_000_000
    text = await c.api("GET", "/config/acl_http_header")
    assert text.body == b"X-Forwarded-User"
    assert text.headers["Content-Type"] == "text/plain; charset=utf-8"
    reply = await c.api("GET", "/config/nope")
    assert (reply.status, reply.message) == (400, "INVALID_OPTION")

    reply = await c.api("PUT", "/config/log_level", "DEBUG")
    assert reply.v1_json == 1
    assert c.admin.opts.log_level == "debug"
    await c.api("PUT", "/config/log_level", "info")
    for body, status, message in (
        ("loud", 400, "INVALID_VALUE"),
        ("", 413, "INVALID_VALUE"),
    ):
        reply = await c.api("PUT", "/config/log_level", body)
        assert (reply.status, reply.message) == (status, message)
    reply = await c.api("PUT", "/config/http_address", "x")
    assert (reply.status, reply.message) == (400, "INVALID_OPTION")
    moved = [c.lookupd_http, "127.0.0.1:1"]
    reply = await c.api("PUT", "/config/nsqlookupd_http_addresses", json.dumps(moved))
    assert reply.v1_json == moved
    topics = await c.get_json("/api/topics")  # the new list is used right away
    assert topics["message"].startswith('WARNING: Get "http://127.0.0.1:1/topics"')
    reply = await c.api("PUT", "/config/nsqlookupd_http_addresses", "[1]")
    assert (reply.status, reply.message) == (400, "INVALID_VALUE")

    guarded = await c.start_admin(allow_config_from_cidr="10.0.0.0/8")
    reply = await c.api("GET", "/config/log_level", admin=guarded)
    assert (reply.status, reply.message) == (403, "FORBIDDEN")
    reply = await c.api("PUT", "/config/log_level", "debug", admin=guarded)
    assert (reply.status, reply.message) == (403, "FORBIDDEN")
    assert guarded.opts.log_level == "info"
    open_to_all = await c.start_admin(allow_config_from_cidr="")
    assert (await c.api("GET", "/config/log_level", admin=open_to_all)).v1_json == 2


# -- graphite ------------------------------------------------------------------------------------


class FakeGraphite:
    def __init__(self) -> None:
        self.requests: list[web.Request] = []
        self.value: float | None = 120.0
        self.url = ""

    async def render(self, request: web.Request) -> web.Response:
        self.requests.append(request)
        return web.json_response([{"target": "x", "datapoints": [[self.value, 1700000000]]}])


@pytest.fixture
async def graphite() -> AsyncIterator[FakeGraphite]:
    fake = FakeGraphite()
    app = web.Application()
    app.router.add_get("/render", fake.render)
    app.router.add_get("/admin/render", fake.render)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield fake
    await runner.cleanup()


async def test_graphite_rate(admin_cluster: AdminCluster, graphite: FakeGraphite) -> None:
    c = admin_cluster
    admin = await c.start_admin(graphite_url=graphite.url, statsd_interval=60_000_000_000)
    reply = await c.api("GET", "/api/graphite?metric=rate&target=sumSeries(a.b)", admin=admin)
    assert reply.v1_json == {"rate": "2.00"}
    query = graphite.requests[-1].query
    assert dict(query) == {"format": "json", "from": "-120sec", "target": "sumSeries(a.b)",
                           "until": "-60sec"}  # fmt: skip
    graphite.value = -1
    reply = await c.api("GET", "/api/graphite?metric=rate&target=x", admin=admin)
    assert reply.v1_json == {"rate": "N/A"}
    graphite.value = None  # Go dereferences a nil datapoint: a panic, so 500
    reply = await c.api("GET", "/api/graphite?metric=rate&target=x", admin=admin)
    assert (reply.status, reply.message) == (500, "INTERNAL_ERROR")
    for query_string, message in (("metric=depth&target=x", "INVALID_ARG_METRIC"),
                                  ("metric=rate", "INVALID_ARG_TARGET"),
                                  ("metric=%zz", "INVALID_REQUEST")):  # fmt: skip
        reply = await c.api("GET", f"/api/graphite?{query_string}", admin=admin)
        assert (reply.status, reply.message) == (400, message)


async def test_render_proxy(admin_cluster: AdminCluster, graphite: FakeGraphite) -> None:
    c = admin_cluster
    plain = await c.api("GET", "/render?target=x")
    assert plain.status == 404  # only with --proxy-graphite
    user_url = graphite.url.replace("http://", "http://u:p@")
    admin = await c.start_admin(graphite_url=user_url, proxy_graphite=True)
    reply = await c.api("GET", "/render?target=x&format=json", admin=admin)
    assert reply.status == 200
    assert reply.json == [{"target": "x", "datapoints": [[120.0, 1700000000]]}]
    seen = graphite.requests[-1]
    assert seen.query_string == "target=x&format=json"
    assert seen.headers["Authorization"] == "Basic dTpw"  # u:p
    assert seen.headers["X-Forwarded-For"] == "127.0.0.1"

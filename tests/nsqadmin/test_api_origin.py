"""nsqadmin refuses admin actions asked for by web pages of other origins (nsqpy's rule; NSQ
v1.3.0 performs them), against a real cluster: 403 in nsqadmin's JSON error shape and nothing
changed on any nsqd; its own pages (Origin = the host it was reached on), programs sending no
``Origin`` and ``--http-allowed-origin`` origins go on as before. The real browser is in
test_browser_origin.py."""

from __future__ import annotations

from typing import Any

import pytest

from nsqpy.nsqadmin.app import NSQAdmin, StartupError
from nsqpy.nsqadmin.options import NsqadminOptions, parse_nsqadmin_args

from .conftest import AdminCluster
from .test_api import two_node_topic
from .test_api_actions import channel_state, topic_state

EVIL = "http://evil.example"
FORBIDDEN = {"message": "CROSS_ORIGIN_REQUEST_FORBIDDEN"}
TEXT = {"Content-Type": "text/plain"}  # a "simple" request: no preflight in a browser


async def held(c: AdminCluster, topic: str = "held") -> None:
    """``topic`` holding 3 + 2 messages (no channel) on the two nsqd."""
    for node, count in ((0, 3), (1, 2)):
        await c.publish(topic, [b"m%d" % i for i in range(count)], node=node)
    await c.wait_producers(topic, 2)


async def depths(c: AdminCluster, topic: str = "held") -> list[int | None]:
    states = [await topic_state(c, node, topic) for node in (0, 1)]
    return [None if s is None else s["depth"] for s in states]


def own_origin(c: AdminCluster, admin: NSQAdmin | None = None) -> str:
    return f"http://{(admin or c.admin).http_address}"


async def act(
    c: AdminCluster,
    method: str,
    path: str,
    body: Any,
    origin: str | None,
    admin: NSQAdmin | None = None,
    **headers: str,
) -> Any:
    if origin is not None:
        headers["Origin"] = origin
    return await c.api(method, path, body, {**TEXT, **headers}, admin=admin)


FOREIGN = [
    pytest.param({"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}, id="other-site"),
    pytest.param({"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, id="other-port"),
    pytest.param({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, id="null"),
    pytest.param({"Sec-Fetch-Site": "cross-site"}, id="no-origin-cross-site"),
]


@pytest.mark.parametrize("headers", FOREIGN)
async def test_foreign_pages_cannot_act(
    admin_cluster: AdminCluster, headers: dict[str, str]
) -> None:
    c = admin_cluster
    await held(c)
    await two_node_topic(c)
    for method, path, body in [
        ("POST", "/api/topics/held", {"action": "empty"}),
        ("POST", "/api/topics/held", {"action": "pause"}),
        ("DELETE", "/api/topics/held", None),
        ("POST", "/api/topics/orders/archive", {"action": "empty"}),
        ("DELETE", "/api/topics/orders/archive", None),
        ("POST", "/api/topics", {"topic": "planted", "channel": "c"}),
        ("DELETE", f"/api/nodes/{c.node(0)}", {"topic": "held"}),
        ("PUT", "/config/log_level", "debug"),
    ]:
        reply = await act(c, method, path, body, None, **headers)
        assert (reply.status, reply.v1_json) == (403, FORBIDDEN), (method, path, reply)
    assert await depths(c) == [3, 2]
    assert not (await topic_state(c, 0, "held"))["paused"]
    for node in (0, 1):
        assert (await channel_state(c, node, "orders", "archive"))["depth"] == (3, 2)[node]
    assert await topic_state(c, 0, "planted") is None
    assert (await c.get_json("/api/topics"))["topics"] == ["held", "orders"]
    assert c.admin.opts.log_level == "info"


async def test_reads_answer_any_origin_actions_do_not(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await held(c)
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, EVIL)
    assert (reply.status, reply.v1_json) == (403, FORBIDDEN)
    for path in ("/api/topics", "/api/topics/held", "/api/nodes", "/", "/ping"):
        reply = await act(c, "GET", path, None, EVIL, **{"Sec-Fetch-Site": "cross-site"})
        assert reply.status == 200, (path, reply)
    doc = (await act(c, "GET", "/api/topics/held", None, "null")).v1_json
    assert doc["depth"] == 5


async def test_its_own_pages_and_programs_act(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await held(c)
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, EVIL)
    assert (reply.status, reply.v1_json) == (403, FORBIDDEN)
    assert await depths(c) == [3, 2]
    # nsqadmin's own page, as Chromium sends its fetch; nsqadmin then asks each nsqd (no
    # Origin), which nsqd's own guard lets through
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "empty"}, own_origin(c),
        **{"Sec-Fetch-Site": "same-origin"},
    )  # fmt: skip
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [0, 0]
    await held(c)
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, None)  # curl
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [0, 0]
    reply = await act(c, "DELETE", "/api/topics/held", None, own_origin(c))
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [None, None]


async def test_own_origin_is_scheme_host_and_port(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await held(c)
    port = c.admin.http_port
    for origin in (
        f"https://127.0.0.1:{port}",  # another scheme
        f"http://127.0.0.1:{port + 1}",  # another port
        f"http://localhost:{port}",  # another host than the one it was reached on
    ):
        reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, origin)
        assert (reply.status, reply.v1_json) == (403, FORBIDDEN), origin
    assert await depths(c) == [3, 2]
    # reached under another name, that name is its origin
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "pause"}, f"http://localhost:{port}",
        Host=f"localhost:{port}",
    )  # fmt: skip
    assert reply.v1_json == {"message": ""}
    assert (await topic_state(c, 0, "held"))["paused"]


async def test_behind_a_tls_proxy_the_forwarded_origin_is_its_own(
    admin_cluster: AdminCluster,
) -> None:
    c = admin_cluster
    await held(c)
    public = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "nsqadmin.example"}
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, EVIL, **public)
    assert (reply.status, reply.v1_json) == (403, FORBIDDEN)
    assert await depths(c) == [3, 2]
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "empty"}, "https://nsqadmin.example", **public
    )
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [0, 0]


async def test_allowed_origins_act(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await held(c)
    admin = await c.start_admin(
        http_allowed_origins=["https://ops.example", "HTTP://Tools.Example:80"]
    )
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, EVIL, admin=admin)
    assert (reply.status, reply.v1_json) == (403, FORBIDDEN)
    assert await depths(c) == [3, 2]
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "pause"}, "https://ops.example", admin=admin
    )
    assert reply.v1_json == {"message": ""}
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "empty"}, "http://tools.example", admin=admin
    )
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [0, 0]
    # its own origin still works, and the first nsqadmin does not know these origins
    reply = await act(
        c, "POST", "/api/topics/held", {"action": "unpause"}, own_origin(c, admin), admin=admin
    )
    assert reply.v1_json == {"message": ""}
    reply = await act(c, "DELETE", "/api/topics/held", None, "https://ops.example")
    assert (reply.status, reply.v1_json) == (403, FORBIDDEN)
    assert (await c.get_json("/config/http_allowed_origins", admin=admin)) == [
        "https://ops.example",
        "HTTP://Tools.Example:80",
    ]


async def test_star_restores_nsqs_behaviour(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    await held(c)
    admin = await c.start_admin(http_allowed_origins=["*"])
    reply = await act(c, "POST", "/api/topics/held", {"action": "empty"}, "null", admin=admin)
    assert reply.v1_json == {"message": ""}
    assert await depths(c) == [0, 0]


async def test_forbidden_is_gzipped_when_asked(admin_cluster: AdminCluster) -> None:
    c = admin_cluster
    reply = await act(c, "POST", "/api/topics", {"topic": "x"}, EVIL, **{"Accept-Encoding": "gzip"})
    assert reply.status == 403
    assert reply.headers["Content-Encoding"] == "gzip"  # aiohttp's client decoded the body
    assert reply.v1_json == FORBIDDEN


# -- the flag ---------------------------------------------------------------------------------


def test_flag_and_config_file(tmp_path: Any) -> None:
    opts = parse_nsqadmin_args(
        [
            "--http-allowed-origin=https://a.example,http://b.example:81",
            "--http-allowed-origin",
            "*",
        ]
    )
    assert opts.http_allowed_origins == ["https://a.example", "http://b.example:81", "*"]
    assert NsqadminOptions().http_allowed_origins == []
    config = tmp_path / "nsqadmin.cfg"
    config.write_text('http_allowed_origins = ["https://ops.example"]\n')
    assert parse_nsqadmin_args([f"--config={config}"]).http_allowed_origins == [
        "https://ops.example"
    ]


def test_flag_refuses_what_is_not_an_origin(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_nsqadmin_args(["--http-allowed-origin=ops.example"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        'invalid value "ops.example" for flag -http-allowed-origin: want scheme://host[:port]\n'
    )


async def test_bad_origin_from_a_config_file_stops_startup() -> None:
    opts = NsqadminOptions(
        http_address="127.0.0.1:0",
        nsqd_http_addresses=["127.0.0.1:4151"],
        http_allowed_origins=["https://ops.example", "null"],
    )
    admin = NSQAdmin(opts)
    with pytest.raises(StartupError, match='invalid --http-allowed-origin "null" - null stands'):
        await admin.start()
    await admin.stop()

"""nsqd refuses state-changing HTTP requests sent by web pages of other origins (nsqpy's rule;
NSQ v1.3.0 accepts them), over real sockets: 403 and nothing changed; programs that send no
``Origin`` are unaffected; ``--http-allowed-origin`` lets chosen origins through.

A browser sends ``Origin`` (and ``Sec-Fetch-Site``) with every POST; the headers here are what
Chromium sends for a page's ``fetch(..., {mode: "no-cors"})`` or form post (see
tests/nsqadmin/test_browser_origin.py for the real browser).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory
from http_reply import JSON_CT, V1, HttpApi, Reply

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.options import NsqdOptions, parse_nsqd_args

EVIL = "http://evil.example"
FRIEND = "http://friend.example:8080"
TEXT = {"Content-Type": "text/plain"}
FATAL_LINE = r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} FATAL: "


class Api(HttpApi):
    def __init__(self, session: aiohttp.ClientSession, nsqd: NSQD) -> None:
        super().__init__(session, f"http://127.0.0.1:{nsqd.http_port}")
        self.nsqd = nsqd

    async def from_origin(
        self, method: str, path: str, origin: str | None, body: bytes = b"", **headers: str
    ) -> Reply:
        """A request as a page of ``origin`` sends it (None: a program, no Origin)."""
        if origin is not None:
            headers["Origin"] = origin
        return await self.call(method, path, body, {**TEXT, **headers})

    async def topic_depth(self, topic: str) -> int | None:
        """The topic's depth in /stats (None: no such topic)."""
        reply = await self.get(f"/stats?format=json&topic={topic}")
        assert reply.status == 200
        topics = [t for t in reply.json["topics"] or [] if t["topic_name"] == topic]
        return topics[0]["depth"] if topics else None


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def new_api(session: aiohttp.ClientSession, nsqd_factory: NsqdFactory) -> Any:
    async def make(**overrides: Any) -> Api:
        return Api(session, await nsqd_factory(**overrides))

    return make


def is_forbidden(reply: Reply) -> bool:
    return (
        reply.status == 403
        and reply.headers["X-NSQ-Content-Type"] == V1
        and reply.headers["Content-Type"] == JSON_CT
        and reply.body == b'{"message":"CROSS_ORIGIN_REQUEST_FORBIDDEN"}'
    )


async def held_topic(api: Api, topic: str, count: int = 3) -> None:
    """A topic holding ``count`` messages (no channel), published as a program does."""
    reply = await api.post(f"/mpub?topic={topic}", b"\n".join(b"m%d" % i for i in range(count)))
    assert reply.status == 200
    assert await api.topic_depth(topic) == count


FOREIGN = [
    pytest.param({"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}, id="other-site"),
    pytest.param({"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, id="other-port"),
    pytest.param({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, id="null"),
    pytest.param({"Origin": "not an origin"}, id="garbage"),
    pytest.param({"Sec-Fetch-Site": "cross-site"}, id="no-origin-cross-site"),
    pytest.param({"Sec-Fetch-Site": "same-site"}, id="no-origin-same-site"),
]


@pytest.mark.parametrize("headers", FOREIGN)
async def test_foreign_pages_cannot_delete_empty_or_publish(
    new_api: Any, headers: dict[str, str]
) -> None:
    api = await new_api()
    await held_topic(api, "t")
    for path, body in [
        ("/topic/delete?topic=t", b""),
        ("/topic/empty?topic=t", b"{}"),
        ("/pub?topic=t", b"planted"),
        ("/mpub?topic=t", b"a\nb"),
        ("/pub?topic=fresh", b"planted"),  # would create a topic
        ("/topic/create?topic=fresh", b""),
    ]:
        reply = await api.from_origin("POST", path, None, body, **headers)
        assert is_forbidden(reply), (path, reply)
    assert await api.topic_depth("t") == 3
    assert await api.topic_depth("fresh") is None
    assert set(api.nsqd.broker.topics) == {"t"}


async def test_foreign_pages_cannot_touch_channels_options_or_debug(new_api: Any) -> None:
    api = await new_api()
    for path in ("/topic/create?topic=t", "/channel/create?topic=t&channel=c"):
        assert (await api.post(path)).is_empty_v1_ok()
    assert (await api.post("/pub?topic=t", b"x")).status == 200
    channel = api.nsqd.broker.topics["t"].channels["c"]
    for method, path, body in [
        ("POST", "/channel/empty?topic=t&channel=c", b""),
        ("POST", "/channel/pause?topic=t&channel=c", b""),
        ("POST", "/channel/delete?topic=t&channel=c", b""),
        ("POST", "/topic/pause?topic=t", b""),
        ("PUT", "/config/log_level", b"debug"),
        ("PUT", "/config/nsqlookupd_tcp_addresses", b'["127.0.0.1:1"]'),
        ("POST", "/debug/freememory", b""),
        ("POST", "/nope", b""),  # no route: still refused, before routing
    ]:
        reply = await api.from_origin(method, path, EVIL, body)
        assert is_forbidden(reply), (method, path, reply)
    assert api.nsqd.broker.topics["t"].channels["c"] is channel
    assert channel.depth == 1 and not channel.paused
    assert not api.nsqd.broker.topics["t"].paused
    assert api.nsqd.opts.log_level == "info"
    assert api.nsqd.opts.nsqlookupd_tcp_addresses == []


async def test_reads_answer_any_origin_writes_do_not(new_api: Any) -> None:
    api = await new_api()
    await held_topic(api, "t")
    assert is_forbidden(await api.from_origin("POST", "/topic/empty?topic=t", EVIL))
    for path in ("/stats?format=json", "/stats", "/ping", "/info", "/config/log_level"):
        reply = await api.from_origin("GET", path, EVIL, **{"Sec-Fetch-Site": "cross-site"})
        assert reply.status == 200, (path, reply)
    reply = await api.from_origin("HEAD", "/ping", "null")
    assert reply.status != 403
    reply = await api.from_origin("OPTIONS", "/topic/delete", EVIL)
    assert (reply.status, reply.headers["Allow"]) == (200, "OPTIONS, POST")


async def test_programs_without_origin_change_state_as_before(new_api: Any) -> None:
    api = await new_api()
    await held_topic(api, "t")
    assert is_forbidden(await api.from_origin("POST", "/pub?topic=t", EVIL, b"x"))
    assert await api.topic_depth("t") == 3
    # curl, NSQ clients and nsqadmin send no Origin; a browser's address bar says "none"
    assert (await api.from_origin("POST", "/pub?topic=t", None, b"x")).status == 200
    assert await api.topic_depth("t") == 4
    reply = await api.from_origin(
        "POST", "/topic/empty?topic=t", None, **{"Sec-Fetch-Site": "none"}
    )
    assert reply.is_empty_v1_ok()
    assert await api.topic_depth("t") == 0
    reply = await api.from_origin("POST", "/topic/delete?topic=t", None)
    assert reply.is_empty_v1_ok()
    assert await api.topic_depth("t") is None


async def test_nsqds_own_origin_is_foreign_too(new_api: Any) -> None:
    """nsqd serves no pages, so a request claiming its own origin is a rebound DNS name."""
    api = await new_api()
    await held_topic(api, "t")
    reply = await api.from_origin("POST", "/topic/delete?topic=t", api.base)
    assert is_forbidden(reply)
    assert await api.topic_depth("t") == 3


async def test_allowed_origins_pass(new_api: Any) -> None:
    # as a config file may write them: any case, default port, a trailing slash
    api = await new_api(
        http_allowed_origins=["HTTP://Friend.Example:8080/", "https://ops.example:443"]
    )
    await held_topic(api, "t")
    assert is_forbidden(await api.from_origin("POST", "/topic/empty?topic=t", EVIL))
    assert is_forbidden(
        await api.from_origin("POST", "/topic/empty?topic=t", "http://friend.example")
    )
    assert await api.topic_depth("t") == 3
    assert (await api.from_origin("POST", "/pub?topic=t", FRIEND, b"x")).status == 200
    assert await api.topic_depth("t") == 4
    reply = await api.from_origin("POST", "/topic/empty?topic=t", "https://ops.example")
    assert reply.is_empty_v1_ok()
    assert await api.topic_depth("t") == 0
    reply = await api.get("/config/http_allowed_origins")
    assert reply.json == ["HTTP://Friend.Example:8080/", "https://ops.example:443"]


async def test_star_restores_nsqs_behaviour(new_api: Any) -> None:
    api = await new_api(http_allowed_origins=["*"])
    await held_topic(api, "t")
    reply = await api.from_origin("POST", "/topic/delete?topic=t", "null")
    assert reply.is_empty_v1_ok()
    assert await api.topic_depth("t") is None


async def test_origin_is_checked_before_http_auth(new_api: Any) -> None:
    # the auth server does not exist: a cross-origin request must not even reach the Bearer
    # check (no auth query per page view), while a program still gets the auth answer
    api = await new_api(http_auth_required=True, auth_http_addresses=["127.0.0.1:1"])
    assert is_forbidden(await api.from_origin("POST", "/pub?topic=t", EVIL, b"x"))
    reply = await api.from_origin("POST", "/pub?topic=t", None, b"x")
    assert (reply.status, reply.message) == (401, "AUTH_REQUIRED")


async def test_a_refusal_is_logged_with_its_origin(
    new_api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nsqpy.nsqd")
    api = await new_api()
    assert is_forbidden(await api.from_origin("POST", "/topic/delete?topic=t", EVIL))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        "refused POST /topic/delete?topic=t from http://evil.example: not an allowed origin "
        "(see --http-allowed-origin)"
    ) in lines


# -- the flag ---------------------------------------------------------------------------------


def test_flag_is_repeatable_and_takes_comma_lists() -> None:
    opts = parse_nsqd_args(
        [
            "--http-allowed-origin=http://a.example,https://b.example:8443",
            "-http-allowed-origin",
            "http://c.example",
        ]
    )
    assert opts.http_allowed_origins == [
        "http://a.example",
        "https://b.example:8443",
        "http://c.example",
    ]
    assert NsqdOptions().http_allowed_origins == []


def test_flag_refuses_what_is_not_an_origin(capsys: pytest.CaptureFixture[str]) -> None:
    for value, reason in [
        ("evil.example", "want scheme://host[:port]"),
        ("http://a.example/admin", "an origin has no path"),
        ("null", "null stands for every sandboxed page"),
    ]:
        with pytest.raises(SystemExit) as exited:
            parse_nsqd_args([f"--http-allowed-origin={value}"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f'invalid value "{value}" for flag -http-allowed-origin: ')
        assert reason in err.splitlines()[0]


def test_config_file_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "nsqd.cfg"
    config.write_text('http_allowed_origins = ["https://ops.example", "http://b.example:81"]\n')
    opts = parse_nsqd_args([f"--config={config}"])
    assert opts.http_allowed_origins == ["https://ops.example", "http://b.example:81"]
    config.write_text('http_allowed_origins = "https://ops.example, http://b.example:81"\n')
    assert parse_nsqd_args([f"--config={config}"]).http_allowed_origins == [
        "https://ops.example",
        " http://b.example:81",  # go-options splits on commas only; the space is harmless
    ]
    config.write_text('http_allowed_origins = ["ops.example"]\n')
    with pytest.raises(SystemExit) as exited:
        parse_nsqd_args([f"--config={config}"])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        FATAL_LINE + r'failed to instantiate nsqd - invalid --http-allowed-origin "ops\.example"'
        r" - want scheme://host\[:port\]\n",
        err,
    ), err

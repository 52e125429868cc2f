"""The shared listener: Go's address rules and nsqd's ``listen (...) failed`` wording."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from nsqpy._internal.listen import (
    ListenError,
    bound_port,
    format_address,
    serve_http,
    split_host_port,
)


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:4151", ("127.0.0.1", 4151)), (":4151", (None, 4151)), ("[::1]:0", ("::1", 0))],
)
def test_split_host_port(address: str, expected: tuple[str | None, int]) -> None:
    assert split_host_port(address) == expected


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("localhost", "address localhost: missing port in address"),
        ("host:http", "address host:http: unknown port"),
    ],
)
def test_split_host_port_refuses_what_go_refuses(address: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        split_host_port(address)


def test_format_address_brackets_ipv6_and_keeps_paths() -> None:
    assert format_address(("::1", 80, 0, 0)) == "[::1]:80"
    assert format_address(("10.0.0.1", 80)) == "10.0.0.1:80"
    assert format_address("/tmp/nsqd.sock") == "/tmp/nsqd.sock"
    assert bound_port("/tmp/nsqd.sock") == -1


def _app() -> web.Application:
    app = web.Application()

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text="OK")

    app.router.add_get("/ping", ping)
    return app


async def test_serve_http_on_port_zero_answers() -> None:
    runner, sockname = await serve_http(_app(), "127.0.0.1:0", shutdown_timeout=0.1)
    try:
        port = bound_port(sockname)
        assert port > 0
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/ping") as resp,
        ):
            assert await resp.text() == "OK"
    finally:
        await runner.cleanup()


async def test_serve_http_unix_socket_only_when_allowed(tmp_path: Path) -> None:
    path = str(tmp_path / "http.sock")
    with pytest.raises(ListenError, match=r"^listen \(.*http.sock\) failed - address .*"):
        await serve_http(_app(), path, shutdown_timeout=0.1)
    runner, sockname = await serve_http(_app(), path, shutdown_timeout=0.1, unix=True)
    try:
        assert format_address(sockname) == path
        connector = aiohttp.UnixConnector(path=path)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get("http://nsqd/ping") as resp,
        ):
            assert await resp.text() == "OK"
    finally:
        await runner.cleanup()


async def test_serve_http_reports_a_taken_port() -> None:
    runner, sockname = await serve_http(_app(), "127.0.0.1:0", shutdown_timeout=0.1)
    try:
        taken = f"127.0.0.1:{bound_port(sockname)}"
        with pytest.raises(ListenError, match=rf"^listen \({taken}\) failed - "):
            # without SO_REUSEPORT a second listener on a bound port fails
            await serve_http(_app(), taken, shutdown_timeout=0.1)
    finally:
        await runner.cleanup()

"""A local HTTP endpoint (aiohttp.web on 127.0.0.1 port 0) that records what it receives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    raw_query: str  # exactly as sent, not decoded
    headers: dict[str, str]
    body: bytes


#: Decides the status of each request (default 200).
Responder = Callable[[Request], int]


class Recorder:
    def __init__(self, responder: Responder | None = None) -> None:
        self.requests: list[Request] = []
        self.responder: Responder = responder or (lambda _req: 200)
        self.json: object = None  # answer /topics-style GETs with this document when set
        self.port = 0
        self.changed = asyncio.Event()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = request.raw_path
        req = Request(
            request.method,
            request.path,
            raw.partition("?")[2],
            {k.lower(): v for k, v in request.headers.items()},
            await request.read(),
        )
        self.requests.append(req)
        self.changed.set()
        if self.json is not None:
            return web.json_response(self.json)
        return web.Response(status=self.responder(req), text="ok")


@asynccontextmanager
async def recorder(responder: Responder | None = None) -> AsyncIterator[Recorder]:
    rec = Recorder(responder)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    rec.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield rec
    finally:
        await runner.cleanup()

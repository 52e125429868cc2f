"""The nsqlookupd daemon: the registration DB behind its TCP (V1) and HTTP listeners.

``NSQLookupd(opts)`` then ``await start()`` binds both listeners (port 0 works: the bound
ports are ``tcp_port`` and ``http_port``); ``await stop()`` closes every connection and
listener. ``registry`` is the live ``RegistrationDB``; pass ``clock`` (wall-clock ns) to
control producer expiry and tombstones in tests.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Final

from aiohttp import web

from nsqpy._internal.listen import (
    ListenError,
    bound_port,
    format_address,
    serve_http,
    split_host_port,
)
from nsqpy._internal.origin import check_allowed_origins
from nsqpy.nsqlookupd.context import Connection
from nsqpy.nsqlookupd.http_api import make_app
from nsqpy.nsqlookupd.options import NsqlookupdOptions, version_string
from nsqpy.nsqlookupd.registry import Clock, RegistrationDB
from nsqpy.nsqlookupd.tcp import LookupConnection

log = logging.getLogger("nsqpy.nsqlookupd")

#: Seconds connections get at shutdown to drain what was written to them.
SHUTDOWN_GRACE: Final = 2.0


class StartupError(Exception):
    """nsqlookupd cannot start with these options; the message says why."""


def _bound(server: asyncio.AbstractServer) -> tuple[str, int]:
    sockets: list[socket.socket] = list(getattr(server, "sockets", None) or [])
    sockname = sockets[0].getsockname()
    return format_address(sockname), bound_port(sockname)


class NSQLookupd:
    """One nsqlookupd: registry, TCP server and HTTP server on the running loop."""

    def __init__(self, opts: NsqlookupdOptions, *, clock: Clock = time.time_ns) -> None:
        self.opts = opts
        self.registry = RegistrationDB(clock)
        self.connections: set[Connection] = set()
        self.tcp_address = ""
        self.http_address = ""
        self.tcp_port = 0
        self.http_port = 0
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http_runner: web.AppRunner | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._all_gone = asyncio.Event()
        self._all_gone.set()

    def connection_opened(self, conn: Connection) -> None:
        self.connections.add(conn)
        self._all_gone.clear()

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if not self.connections:
            self._all_gone.set()

    async def start(self) -> None:
        """Bind TCP then HTTP. StartupError (Go's ``listen (<addr>) failed - <err>``)."""
        log.info("%s", version_string())
        await self._start_tcp()
        await self._start_http()

    async def _start_tcp(self) -> None:
        loop = asyncio.get_running_loop()
        address = self.opts.tcp_address
        try:
            host, port = split_host_port(address)
            server = await loop.create_server(
                lambda: LookupConnection(self), host, port, reuse_address=True
            )
        except (OSError, ValueError) as err:
            raise StartupError(f"listen ({address}) failed - {err}") from err
        self._tcp_server = server
        self.tcp_address, self.tcp_port = _bound(server)
        log.info("TCP: listening on %s", self.tcp_address)

    async def _start_http(self) -> None:
        address = self.opts.http_address
        try:
            check_allowed_origins(self.opts.http_allowed_origins)
            app = make_app(self)
        except ValueError as err:  # an --http-allowed-origin that is not an origin
            raise StartupError(str(err)) from None
        try:
            self._http_runner, sockname = await serve_http(
                app, address, shutdown_timeout=SHUTDOWN_GRACE
            )
        except ListenError as err:
            raise StartupError(str(err)) from err
        self.http_address, self.http_port = format_address(sockname), bound_port(sockname)
        log.info("HTTP: listening on %s", self.http_address)

    async def stop(self) -> None:
        """Close listeners and connections (their peers leave the registry); idempotent."""
        if self._stopping is not None:
            await asyncio.shield(self._stopping)
            return
        self._stopping = asyncio.get_running_loop().create_future()
        try:
            await self._shutdown()
        finally:
            self._stopping.set_result(None)

    async def _shutdown(self) -> None:
        if self._tcp_server is not None:
            log.info("TCP: closing %s", self.tcp_address)
            self._tcp_server.close()
        for conn in list(self.connections):
            conn.close()
        if self._http_runner is not None:
            log.info("HTTP: closing %s", self.http_address)
            await self._http_runner.cleanup()
        try:
            async with asyncio.timeout(SHUTDOWN_GRACE):
                await self._all_gone.wait()
        except TimeoutError:
            for conn in list(self.connections):
                conn.abort()
            await asyncio.sleep(0)  # let aborted connections run connection_lost
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()

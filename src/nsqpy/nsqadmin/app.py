"""The nsqadmin daemon: its HTTP server, the cluster client, the sampler and the notifier.

``NSQAdmin(opts)`` then ``await start()`` checks the options as Go's ``nsqadmin.New`` does
(``StartupError`` with Go's message), logs the version, binds the HTTP listener (port 0 works:
the bound address is ``http_address``) and starts sampling; ``await stop()`` (or ``close()``)
stops everything. Pass ``clock`` (wall-clock seconds) to control timestamps in tests.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from typing import Final

from aiohttp import web

from nsqpy._internal.listen import ListenError, bound_port, format_address, serve_http
from nsqpy._internal.logs import LEVELS
from nsqpy.nsqadmin.cluster import ClusterInfo
from nsqpy.nsqadmin.notify import Notifier
from nsqpy.nsqadmin.options import NsqadminOptions, OptionsError, validate, version_string
from nsqpy.nsqadmin.sampler import Sampler
from nsqpy.nsqadmin.upstream import Upstream

log = logging.getLogger("nsqpy.nsqadmin")

#: Seconds in-flight requests and queued notifications get at shutdown.
SHUTDOWN_GRACE: Final = 2.0


class StartupError(Exception):
    """nsqadmin cannot start with these options; the message says why (Go's wording)."""


class NSQAdmin:
    """One nsqadmin on the running loop."""

    def __init__(self, opts: NsqadminOptions, *, clock: Callable[[], float] = time.time) -> None:
        self.opts = opts
        self.clock = clock
        self.http_address = ""
        self.http_port = 0
        self.tls_context: ssl.SSLContext | None = None
        self.upstream: Upstream | None = None
        self.ci: ClusterInfo | None = None
        self.sampler: Sampler | None = None
        self.notifier: Notifier | None = None
        self._runner: web.AppRunner | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        """``http://host:port<base path>/``: where the UI is."""
        base = self.opts.base_path.rstrip("/")
        return f"http://{self.http_address}{base}/"

    async def start(self) -> None:
        """Check options, bind HTTP, start sampling. StartupError on failure."""
        try:
            self.tls_context = validate(self.opts)
        except OptionsError as err:
            raise StartupError(str(err)) from None
        log.info("%s", version_string())
        self.upstream = Upstream(
            connect_timeout_ns=self.opts.http_client_connect_timeout,
            request_timeout_ns=self.opts.http_client_request_timeout,
            tls=self.tls_context,
        )
        self.ci = ClusterInfo(self.upstream)
        self.sampler = Sampler(self.opts, ClusterInfo(self.upstream, quiet=True), self.clock)
        if self.opts.notification_http_endpoint:
            self.notifier = Notifier(self.opts.notification_http_endpoint, self.upstream.session)
        await self._start_http()
        self.sampler.start()

    async def _start_http(self) -> None:
        from nsqpy.nsqadmin.http_api import make_app

        address = self.opts.http_address
        try:
            self._runner, sockname = await serve_http(
                make_app(self), address, shutdown_timeout=SHUTDOWN_GRACE
            )
        except ListenError as err:
            raise StartupError(str(err)) from err
        self.http_address, self.http_port = format_address(sockname), bound_port(sockname)
        log.info("HTTP: listening on %s", self.http_address)

    def set_log_level(self, level: str) -> None:
        """``PUT /config/log_level``."""
        self.opts.log_level = level
        log.setLevel(LEVELS[level])

    async def stop(self) -> None:
        """Stop sampling, close the listener, flush notifications; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.sampler is not None:
            await self.sampler.stop()
        if self._runner is not None:
            log.info("HTTP: closing %s", self.http_address)
            await self._runner.cleanup()
        if self.notifier is not None:
            await self.notifier.close(SHUTDOWN_GRACE)
        if self.upstream is not None:
            await self.upstream.close()

    close = stop

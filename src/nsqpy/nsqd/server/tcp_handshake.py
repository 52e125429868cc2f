"""The V2 connection's handshake: IDENTIFY, the TLS and compression upgrades, and AUTH.

:class:`HandshakeMixin` is a base class of :class:`~nsqpy.nsqd.server.tcp.V2Connection` and holds
the commands that change how a connection talks rather than what it carries. They live apart
from ``tcp.py`` to keep each module small; as a base class (not a collaborator object) they
share the connection's attributes directly, so the per-message path there pays nothing for
the split. The attributes and connection methods this code relies on are declared below
for mypy only; ``V2Connection`` sets and defines them.

An upgrade or an auth-server query stalls the connection: bytes keep being buffered in the
reader, and the commands behind them run once ``_resume`` is called.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, cast

from nsqpy.nsqd.core.auth import AuthServerError, AuthState
from nsqpy.nsqd.server.context import Daemon
from nsqpy.nsqd.server.tls import common_name
from nsqpy.protocol.command_reader import CommandReader
from nsqpy.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
    StreamDecoder,
    StreamEncoder,
)
from nsqpy.protocol.errors import ClientError
from nsqpy.protocol.frames import OK_FRAME, encode_error, encode_response
from nsqpy.protocol.identify import ClientSettings, negotiate
from nsqpy.protocol.text import go_quote

if TYPE_CHECKING:
    import ssl
    from collections.abc import Awaitable

    from nsqpy.nsqd.core.client import ClientState

log = logging.getLogger("nsqpy.nsqd")

#: nsqd's TLS handshake deadline.
_TLS_HANDSHAKE_TIMEOUT: Final = 5.0

#: A command handler: (params, body or None, loop time).
Handler = Callable[[list[bytes], bytes | None, float], None]


class HandshakeMixin:
    """IDENTIFY, TLS/snappy/deflate upgrades and AUTH for :class:`V2Connection`."""

    # Set by V2Connection.__init__ / connection_made (declared here for mypy only).
    nsqd: Daemon
    loop: asyncio.AbstractEventLoop
    settings: ClientSettings
    reader: CommandReader
    state: ClientState
    transport: asyncio.Transport | None
    remote_address: str
    _auth_ip: str
    _out: bytearray
    _closing: bool
    _stalled: bool
    _upgrading: bool
    _encoder: StreamEncoder | None
    _decoder: StreamDecoder | None
    tls: bool
    ssl_object: ssl.SSLObject | None
    _auth_on: bool
    auth_state: AuthState | None
    _auth_secret: str
    _task: asyncio.Task[None] | None
    _all_handlers: dict[bytes, Handler]
    _handlers: dict[bytes, Handler]

    if TYPE_CHECKING:
        # Defined by V2Connection. Only mypy sees these: at runtime nothing here shadows them.
        def _send_frame(self, frame: bytes) -> None: ...
        def flush(self) -> None: ...
        def close(self) -> None: ...
        def abort(self) -> None: ...
        def _start_heartbeats(self) -> None: ...
        def _run(self, now: float) -> None: ...
        def _inflate(self, data: bytes, now: float) -> None: ...
        def _line_check(self, name: bytes, params: list[bytes]) -> None: ...

    def _identify(self, params: list[bytes], body: bytes | None, now: float) -> None:
        assert body is not None
        settings, reply = negotiate(body, self.settings, self.nsqd.limits)
        heartbeat_changed = settings.heartbeat_interval != self.settings.heartbeat_interval
        self.settings = settings
        self.state.client_id = settings.client_id
        self.state.msg_timeout = settings.msg_timeout / 1000
        self.state.sample_rate = settings.sample_rate
        self._send_frame(OK_FRAME if reply is None else encode_response(reply))
        if heartbeat_changed:
            self._start_heartbeats()
        if settings.tls_v1:
            self.flush()  # the JSON reply goes out in the clear
            self._stalled = self._upgrading = True
            self._task = self.loop.create_task(self._upgrade_tls())
        elif settings.snappy or settings.deflate:
            self.flush()
            self._start_compression()

    async def _upgrade_tls(self) -> None:
        log.info("PROTOCOL(V2): [%s] upgrading connection to TLS", self.remote_address)
        context = self.nsqd.tls_context
        assert context is not None and self.transport is not None
        try:
            transport = await self.loop.start_tls(
                self.transport,
                cast(asyncio.BaseProtocol, self),  # V2Connection is the protocol
                context,
                server_side=True,
                ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT,
            )
        except (OSError, TimeoutError, ConnectionError) as err:
            log.error(
                "[%s] - E_IDENTIFY_FAILED IDENTIFY failed %s",
                self.remote_address,
                str(err) or "timeout",
            )
            self._upgrading = False
            self._out.clear()
            self.abort()
            return
        self._task = None
        if transport is None or self._closing:
            return
        self.transport = transport
        self.ssl_object = transport.get_extra_info("ssl_object")
        self.tls = True
        self._upgrading = False
        self._handlers = self._all_handlers
        self._send_frame(OK_FRAME)
        self.flush()  # this OK is sent over TLS, before any compression starts
        if self.settings.snappy or self.settings.deflate:
            self._start_compression()
        self._resume()

    def _start_compression(self) -> None:
        settings = self.settings
        if settings.snappy:
            log.info("PROTOCOL(V2): [%s] upgrading connection to snappy", self.remote_address)
            self._encoder, self._decoder = SnappyEncoder(), SnappyDecoder()
        else:
            log.info(
                "PROTOCOL(V2): [%s] upgrading connection to deflate (level %d)",
                self.remote_address,
                settings.deflate_level,
            )
            self._encoder = DeflateEncoder(settings.deflate_level)
            self._decoder = DeflateDecoder()
        # Bytes already buffered past IDENTIFY were sent before the client saw the upgrade:
        # nsqd's new reader starts on the stream anew, so do we.
        self.reader = CommandReader(
            self.nsqd.opts.max_msg_size, self.nsqd.opts.max_body_size, self._line_check
        )
        self._send_frame(OK_FRAME)

    def _resume(self) -> None:
        """Run what was buffered while stalled, then read again."""
        self._stalled = False
        if self._closing:
            return
        now = self.loop.time()
        self._run(now)  # commands read before the stall (a RDY sent with a durable SUB)
        if self._decoder is not None and not (self._stalled or self._closing):
            self._inflate(b"", now)  # then input still compressed, if any
        if not self._stalled and self.transport is not None and not self._closing:
            self.transport.resume_reading()

    def _stall_on(self, work: Awaitable[None]) -> None:
        """Stop running commands (and reading) until ``work`` is done, then resume."""
        self._stalled = True
        if self.transport is not None:
            self.transport.pause_reading()

        async def run() -> None:
            try:
                await work
            except ClientError as err:
                self._task = None
                log.error("[%s] - %s", self.remote_address, err)
                self._send_frame(encode_error(err.wire))
                self.close()
                return
            self._task = None
            self._resume()

        self._task = self.loop.create_task(run())

    # AUTH (nsqd's protocolV2.AUTH / CheckAuth)
    def _auth(self, params: list[bytes], body: bytes | None, now: float) -> None:
        assert body is not None
        if self.auth_state is not None and self.auth_state.authorizations:
            raise ClientError("E_INVALID", "AUTH already set")
        if not self._auth_on:
            raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
        self._auth_secret = body.decode("utf-8", "surrogateescape")
        self._stall_on(self._authenticate())

    async def _authenticate(self) -> None:
        await self._query_auth("AUTH failed")
        state = self.auth_state
        if state is None or not state.authorizations:
            raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        reply = {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        }
        self._send_frame(encode_response(json.dumps(reply, separators=(",", ":")).encode()))

    async def _query_auth(self, what: str) -> None:
        try:
            self.auth_state = await self.nsqd.query_auth(
                remote_ip=self._auth_ip,
                tls=self.tls,
                common_name=common_name(self.ssl_object) if self.tls else "",
                secret=self._auth_secret,
            )
        except AuthServerError as err:
            # nsqd does not leak auth-server errors to (untrusted) clients: only logged.
            log.warning("PROTOCOL(V2): [%s] %s - %s", self.remote_address, what, err)
            raise ClientError("E_AUTH_FAILED", "AUTH failed") from None

    def _check_auth_cached(self, cmd: str, topic: str, channel: str) -> None:
        """What CheckAuth can decide without the auth server (MPUB checks before its body)."""
        state = self.auth_state
        if state is None or not state.authorizations:
            raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
        if not state.is_expired(self.loop.time()) and not state.is_allowed(topic, channel):
            raise ClientError(
                "E_UNAUTHORIZED",
                f"AUTH failed for {cmd} on {go_quote(topic.encode())} {go_quote(channel.encode())}",
            )

    def _check_auth(
        self,
        handler: Handler,
        params: list[bytes],
        body: bytes | None,
        cmd: str,
        topic: str,
        channel: str,
    ) -> bool:
        """True: allowed. False: the cached answer expired; the command re-runs after a refresh."""
        self._check_auth_cached(cmd, topic, channel)
        state = self.auth_state
        assert state is not None
        if not state.is_expired(self.loop.time()):
            return True

        async def refresh_then_retry() -> None:
            await self._query_auth("AUTH failed")
            refreshed = self.auth_state
            assert refreshed is not None
            if not refreshed.is_allowed(topic, channel):
                raise ClientError(
                    "E_UNAUTHORIZED",
                    f"AUTH failed for {cmd} on {go_quote(topic.encode())} "
                    f"{go_quote(channel.encode())}",
                )
            try:
                handler(params, body, self.loop.time())
            except ClientError as err:
                if err.fatal:
                    raise
                self._send_frame(encode_error(err.wire))

        self._stall_on(refresh_then_retry())
        return False

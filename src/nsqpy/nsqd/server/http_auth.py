"""nsqpy's optional Bearer check on nsqd's HTTP API (NSQ #1183; off unless
``--http-auth-required``).

NSQ leaves ``/pub``, ``/mpub``, ``/topic/*`` and ``/channel/*`` open to anyone who can reach the
HTTP port even when TCP clients must AUTH. With the option on, those routes need
``Authorization: Bearer <secret>``; the secret is checked with the same auth server, the same
query and the same authorizations as a TCP AUTH: publishing and topic routes need ``publish``
on the topic, channel routes ``subscribe`` on the topic and channel. Answers are cached per
secret for their TTL.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from nsqpy.nsqd.core.auth import AuthServerError, AuthState
from nsqpy.nsqd.server.context import Daemon

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_PROTECTED_PREFIXES: Final = ("/topic/", "/channel/")
_PROTECTED_PATHS: Final = frozenset({"/pub", "/mpub"})
#: Secrets remembered at once; the oldest is forgotten first.
_CACHE_SIZE: Final = 1024


def is_protected(path: str) -> bool:
    return path in _PROTECTED_PATHS or path.startswith(_PROTECTED_PREFIXES)


def bearer_secret(header: str | None) -> str:
    """The secret of ``Bearer <secret>``, or "" when the header is missing or another scheme."""
    if not header:
        return ""
    scheme, _, secret = header.strip().partition(" ")
    return secret.strip() if scheme.lower() == "bearer" else ""


def _reply(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"message": message}),
        headers={
            "X-NSQ-Content-Type": "nsq; version=1.0",
            "Content-Type": "application/json; charset=utf-8",
        },
    )


class HttpAuth:
    """The middleware and its per-secret cache."""

    def __init__(self, nsqd: Daemon) -> None:
        self.nsqd = nsqd
        self._cache: OrderedDict[tuple[str, str], AuthState] = OrderedDict()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not is_protected(request.path):
            return await handler(request)
        secret = bearer_secret(request.headers.get("Authorization"))
        if not secret:
            return _reply(401, "AUTH_REQUIRED")
        try:
            state = await self._state(secret, request.remote or "", request.secure)
        except AuthServerError:
            return _reply(403, "AUTH_FAILED")
        topic = request.query.get("topic", "")
        channel = request.query.get("channel", "") if request.path.startswith("/channel/") else ""
        if not state.is_allowed(topic, channel):
            return _reply(403, "UNAUTHORIZED")
        return await handler(request)

    async def _state(self, secret: str, remote_ip: str, tls: bool) -> AuthState:
        key = (secret, remote_ip)
        now = self.nsqd.loop.time()
        state = self._cache.get(key)
        if state is not None and not state.is_expired(now):
            return state
        state = await self.nsqd.query_auth(
            remote_ip=remote_ip, tls=tls, common_name="", secret=secret
        )
        self._cache[key] = state
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return state

"""AUTH: the auth server's answer and what it allows (``server.auth_query`` fetches it).

nsqd asks an auth server ``GET http://<addr>/auth?common_name=..&remote_ip=..&secret=..&tls=..``
(or ``<url>?...`` when the address is a full URL) when a client sends AUTH and again whenever
the cached answer's TTL has run out. The answer lists authorizations, each a topic regex,
channel regexes and permissions (``publish``, ``subscribe``); Go's ``regexp.MatchString`` is
unanchored, and a publish is checked against the channel name ``""``.

:class:`AuthState` takes the time as an argument.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

_PERMISSIONS: Final = frozenset(("subscribe", "publish"))


class AuthServerError(Exception):
    """The auth server could not be reached or gave an answer nsqd rejects."""


@dataclass(frozen=True, slots=True)
class Authorization:
    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions:
            return False
        if self.topic.search(topic) is None:
            return False
        return any(c.search(channel) is not None for c in self.channels)


@dataclass(frozen=True, slots=True)
class AuthState:
    """One auth server answer, valid until ``expires`` (a ``loop.time()`` value)."""

    ttl: int
    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)

    def is_expired(self, now: float) -> bool:
        return self.expires < now


def _compile(pattern: object, what: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise AuthServerError(f"json: cannot unmarshal {what} into Go value of type string")
    try:
        return re.compile(pattern)
    except re.error as err:
        raise AuthServerError(f"unable to compile {what} {json.dumps(pattern)} {err}") from None


def parse_auth_response(body: bytes, now: float) -> AuthState:
    """Validate the auth server's JSON as nsqd does (permissions, regexes, TTL > 0)."""
    try:
        raw = json.loads(body)
    except ValueError as err:
        raise AuthServerError(f"invalid JSON - {err}") from None
    if not isinstance(raw, dict):
        raise AuthServerError("json: cannot unmarshal response into Go value of type auth.State")
    ttl = raw.get("ttl") or 0
    identity = raw.get("identity") or ""
    identity_url = raw.get("identity_url") or ""
    items: Any = raw.get("authorizations") or []
    if (
        not isinstance(ttl, int)
        or not isinstance(identity, str)
        or not isinstance(identity_url, str)
        or not isinstance(items, list)
    ):
        raise AuthServerError("json: cannot unmarshal response into Go value of type auth.State")
    auths: list[Authorization] = []
    for item in items:
        if not isinstance(item, dict):
            raise AuthServerError("json: cannot unmarshal authorization")
        permissions = item.get("permissions") or []
        for perm in permissions:
            if perm not in _PERMISSIONS:
                raise AuthServerError(f"unknown permission {perm}")
        topic = _compile(item.get("topic") or "", "topic")
        channels = tuple(_compile(c, "channel") for c in item.get("channels") or [])
        auths.append(Authorization(topic, channels, frozenset(permissions)))
    if ttl <= 0:
        raise AuthServerError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(ttl, identity, identity_url, tuple(auths), now + ttl)


def auth_url(address: str, remote_ip: str, tls: bool, common_name: str, secret: str) -> str:
    """The query URL, parameters sorted by name as Go's ``url.Values.Encode``."""
    query = urlencode(
        {
            "common_name": common_name,
            "remote_ip": remote_ip,
            "secret": secret,
            "tls": "true" if tls else "false",
        }
    )
    if "://" in address:
        return f"{address}?{query}"
    return f"http://{address}/auth?{query}"

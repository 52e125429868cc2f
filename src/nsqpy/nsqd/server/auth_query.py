"""AUTH's I/O: asking the auth servers (nsqd's ``QueryAnyAuthd``) for a client's rights.

What an answer means and allows is ``core.auth``; this module only fetches it.
"""

from __future__ import annotations

import json
import random
import ssl
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from nsqpy.nsqd.core.auth import AuthServerError, AuthState, auth_url, parse_auth_response

ACCEPT: Final = "application/vnd.nsq; version=1.0"


def _https_endpoint(url: str, body: bytes) -> str:
    """A 403 from an http endpoint names the https port to retry on (nsqd's own reply)."""
    try:
        port = int(json.loads(body)["https_port"])
    except (ValueError, KeyError, TypeError) as err:
        raise AuthServerError(f"got response 403 Forbidden {body!r} ({err})") from None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))


async def query_auth(
    session: aiohttp.ClientSession,
    url: str,
    ssl_context: ssl.SSLContext | None,
    clock: Callable[[], float],
) -> AuthState:
    while True:
        try:
            async with session.get(
                url, headers={"Accept": ACCEPT}, ssl=ssl_context or True
            ) as resp:
                body = await resp.read()
                status, reason = resp.status, resp.reason or ""
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise AuthServerError(f"{type(err).__name__}: {err}") from None
        if status == 403 and not url.startswith("https"):
            url = _https_endpoint(url, body)
            continue
        if status != 200:
            raise AuthServerError(f"got response {status} {reason} {body!r}")
        return parse_auth_response(body, clock())


async def query_any(
    session: aiohttp.ClientSession,
    addresses: list[str],
    *,
    remote_ip: str,
    tls: bool,
    common_name: str,
    secret: str,
    ssl_context: ssl.SSLContext | None,
    clock: Callable[[], float],
) -> AuthState:
    """Try every auth server from a random start; the first good answer wins."""
    errors: list[str] = []
    start = random.randrange(len(addresses))
    for i in range(len(addresses)):
        address = addresses[(start + i) % len(addresses)]
        url = auth_url(address, remote_ip, tls, common_name, secret)
        try:
            return await query_auth(session, url, ssl_context, clock)
        except AuthServerError as err:
            errors.append(f"failed to auth against {address} - {err}")
    raise AuthServerError("; ".join(errors))

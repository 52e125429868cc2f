"""Refusing state-changing HTTP requests that web pages of other sites send (nsqpy's rule).

NSQ v1.3.0's nsqd and nsqadmin act on any request that reaches them. A browser lets every
page it shows send a "simple" request to any address without asking that server first: a
``POST`` with ``Content-Type: text/plain`` or a form, whose answer the page cannot read but
whose effect happens all the same. So any site a cluster's user visits could publish, empty
or delete topics through that user's browser. nsqpy refuses such requests, which browsers
always mark: they send ``Origin`` with every request that is not a ``GET`` or ``HEAD``, and
``Sec-Fetch-Site`` with every request. Programs (curl, NSQ clients publishing over HTTP,
nsqadmin asking nsqd) send neither, and are not affected.

The rule (``OriginGuard``), for every method but ``GET``, ``HEAD`` and ``OPTIONS`` (no route
of either daemon changes anything on those):

* no ``Origin``: allowed, unless ``Sec-Fetch-Site`` says ``cross-site`` or ``same-site``;
* ``Origin`` one of the allowed origins (``--http-allowed-origin``; ``*`` allows all): allowed;
* with ``own_origin`` (nsqadmin, whose pages call its API), ``Origin`` equal to the origin the
  request was addressed to: allowed. That origin is the scheme (``X-Forwarded-Proto``, else
  the connection's) and host (``X-Forwarded-Host``, else ``Host``); a page cannot set those
  headers on a request it sends elsewhere without the server's consent, which neither daemon
  gives;
* anything else, ``Origin: null`` (sandboxed pages, ``file:`` URLs) and an unreadable origin
  included, is 403 ``{"message":"CROSS_ORIGIN_REQUEST_FORBIDDEN"}`` in NSQ's V1 envelope,
  before the request's body is read or its route looked up.

Origins are compared as browsers write them: ``scheme://host[:port]``, scheme and host in
lower case, no default port (80 for http, 443 for https).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from nsqpy._internal.goflag import go_quote
from nsqpy._internal.http_api import respond_v1

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The error code of a refused request.
FORBIDDEN: Final = "CROSS_ORIGIN_REQUEST_FORBIDDEN"
#: Allows every origin (NSQ's behaviour).
ANY: Final = "*"
#: Methods that change nothing on either daemon.
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values of a request a page of another origin made.
_FOREIGN_FETCH_SITES: Final = frozenset({"cross-site", "same-site"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_FORMAT: Final = "want scheme://host[:port]"


def normalize_origin(text: str) -> str:
    """``text`` as a browser writes an origin (lower case, no default port).

    ValueError (with the reason) for anything that is not ``scheme://host[:port]``, a
    trailing ``/`` aside; ``null`` is not an origin either.
    """
    if not text or text != text.strip() or any(c.isspace() or ord(c) < 0x20 for c in text):
        raise ValueError(_FORMAT)
    try:
        parts = urlsplit(text)
        host = parts.hostname
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{_FORMAT} ({err})") from None
    scheme = parts.scheme.lower()
    if not scheme or not host or not text.lower().startswith(scheme + "://"):
        raise ValueError(_FORMAT)
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in text or "#" in text:
        raise ValueError(f"{_FORMAT}: an origin has no path, query or fragment")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{_FORMAT}: an origin has no user")
    if ":" in host:
        host = f"[{host}]"
    if port is None or _DEFAULT_PORTS.get(scheme) == port:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def parse_allowed_origin(text: str) -> str:
    """One ``--http-allowed-origin`` value: ``*`` or a normalised origin; ValueError."""
    text = text.strip()
    if text == ANY:
        return ANY
    if text.lower() == "null":
        raise ValueError(
            "null stands for every sandboxed page and file: URL and cannot be allowed "
            "(* allows every origin)"
        )
    return normalize_origin(text)


def split_allowed_origins(text: str) -> list[str]:
    """A flag value: one origin or a comma-separated list (origins hold no commas)."""
    return [piece.strip() for piece in text.split(",") if piece.strip()]


def origin_flag(text: str, current: object) -> object:
    """``--http-allowed-origin``'s parser: the origins in ``text`` checked (ValueError with
    the reason) and appended to those given before."""
    origins = split_allowed_origins(text)
    for origin in origins:
        parse_allowed_origin(origin)
    return [*(current if isinstance(current, list) else []), *origins]


def check_allowed_origins(values: Iterable[str]) -> None:
    """Start-up check of the option's values (a config file's are not checked while it is
    read): ValueError ``invalid --http-allowed-origin "<value>" - <reason>``."""
    for text in values:
        try:
            parse_allowed_origin(text)
        except ValueError as err:
            raise ValueError(f"invalid --http-allowed-origin {go_quote(text)} - {err}") from None


def _first(value: str | None) -> str:
    """The first entry of a proxy header that may list several (``a, b``)."""
    return value.split(",", 1)[0].strip() if value else ""


def addressed_origin(request: web.Request) -> str | None:
    """The origin ``request`` was sent to, as its (proxied) headers say; None if unknown."""
    scheme = _first(request.headers.get("X-Forwarded-Proto")).lower() or request.scheme
    host = _first(request.headers.get("X-Forwarded-Host")) or request.headers.get("Host", "")
    if not host:
        return None
    try:
        return normalize_origin(f"{scheme}://{host}")
    except ValueError:
        return None


class OriginGuard:
    """The check, and an aiohttp middleware applying it in front of a daemon's routes."""

    def __init__(
        self, allowed: Iterable[str], *, own_origin: bool, flag: str, log: logging.Logger
    ) -> None:
        """``allowed``: flag values (ValueError if one is not an origin); ``own_origin``: a
        request from the origin it was addressed to is allowed; ``flag``: named in the log."""
        origins = {parse_allowed_origin(text) for text in allowed}
        self.allow_any = ANY in origins
        self.allowed = frozenset(origins - {ANY})
        self.own_origin = own_origin
        self.flag = flag
        self.log = log

    def refused(self, request: web.Request) -> str | None:
        """Why ``request`` is refused (the origin it came from), or None when it may go on."""
        if request.method in SAFE_METHODS or self.allow_any:
            return None
        origin = request.headers.get("Origin")
        if origin is None:
            site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
            return f"a {site} page" if site in _FOREIGN_FETCH_SITES else None
        try:
            normalized = normalize_origin(origin)
        except ValueError:
            return origin or '""'
        if normalized in self.allowed:
            return None
        if self.own_origin and normalized == addressed_origin(request):
            return None
        return origin

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        source = self.refused(request)
        if source is None:
            return await handler(request)
        self.log.warning(
            "refused %s %s from %s: not an allowed origin (see %s)",
            request.method,
            request.raw_path,
            source,
            self.flag,
        )
        return respond_v1(403, FORBIDDEN)

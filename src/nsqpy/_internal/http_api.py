"""HTTP plumbing shared by nsqd, nsqlookupd and nsqadmin, on aiohttp.

NSQ's daemons answer HTTP through ``julienschmidt/httprouter`` v1.3.0 and NSQ's own
``internal/http_api`` decorators. Clients and tools (go-nsq, gnsq, nsqadmin, exporters) look
at the details, so this module reproduces them:

* **V1 envelope** (``respond_v1``): every response of a V1 route carries
  ``X-NSQ-Content-Type: nsq; version=1.0``. A 200 whose data is text or bytes is sent raw, no
  data is an empty body, anything else is JSON (``gojson``, Go's exact bytes) with
  ``Content-Type: application/json; charset=utf-8``. An error is ``{"message":"<TEXT>"}``
  with the error's status.
* **PlainText** routes write text raw with no X-NSQ header, errors included.
* **Routing** (``Router``, an aiohttp middleware that owns all dispatch): exact paths with
  ``:name`` segments; a miss is redirected when toggling the trailing slash (then a cleaned,
  case-insensitive path) finds the route for that method (301 for GET, 307 otherwise);
  OPTIONS is answered with ``Allow``; a known path with another method is 405
  ``METHOD_NOT_ALLOWED`` (with ``Allow``); anything else is 404 ``NOT_FOUND``; a handler that
  raises becomes 500 ``INTERNAL_ERROR`` (Go's panic handler).
* **Access log** (Go's ``Log`` decorator): ``<status> <method> <uri> (<remote>) <elapsed>``.
* **Query strings** parse as Go's ``url.ParseQuery``: params come only from the URL, the first
  value of a repeated key wins, and a malformed escape or a ``;`` is an error the handler
  reports as ``INVALID_REQUEST``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from nsqpy._internal import gojson
from nsqpy._internal.duration import format_go_duration

JSON_CONTENT_TYPE: Final = "application/json; charset=utf-8"
TEXT_CONTENT_TYPE: Final = "text/plain; charset=utf-8"
HTML_CONTENT_TYPE: Final = "text/html; charset=utf-8"
BINARY_CONTENT_TYPE: Final = "application/octet-stream"
V1_HEADER_NAME: Final = "X-NSQ-Content-Type"
V1_HEADER_VALUE: Final = "nsq; version=1.0"

Params = Mapping[str, str]
#: A decorated handler returns data for the envelope or raises ApiError.
ApiHandler = Callable[[web.Request, Params], Awaitable[object]]
#: An undecorated handler builds its own response (Go's plain http.Handler routes).
RawHandler = Callable[[web.Request, Params], Awaitable[web.StreamResponse]]


class _JsonNull:
    """Type of ``JSON_NULL``."""

    __slots__ = ()


#: Return this for a JSON ``null`` body (Go's nil slice); ``None`` means an empty body.
JSON_NULL: Final = _JsonNull()


class HandlerPanic(Exception):
    """A panic Go's code reaches by design (PlainText given no text): a 500 like any other
    panic, but logged without a traceback because it is expected."""


class ApiError(Exception):
    """An HTTP error answer: ``status`` and the text put in the body (Go's http_api.Err)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def json_string_list(body: bytes) -> list[str]:
    """A ``PUT /config`` body that must be a JSON array of strings, as Go's json.Unmarshal
    into a ``[]string`` takes it (``null`` is empty); 400 ``INVALID_VALUE`` otherwise."""
    try:
        value = json.loads(body)
    except ValueError:
        raise ApiError(400, "INVALID_VALUE") from None
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(400, "INVALID_VALUE")
    return value


# -- response bodies ------------------------------------------------------------------------------

# Bytes Go's http.DetectContentType treats as binary (its "text/plain" rule).
_BINARY_BYTES: Final = frozenset([*range(0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


def sniff_content_type(body: bytes) -> str | None:
    """What Go's net/http sends for a body written without a Content-Type.

    Go sniffs the first 512 bytes; NSQ's raw bodies are text, so only its text-vs-binary rule
    matters. An empty body gets no Content-Type at all.
    """
    if not body:
        return None
    if _BINARY_BYTES.isdisjoint(body[:512]):
        return TEXT_CONTENT_TYPE
    return BINARY_CONTENT_TYPE


def _raw_body(data: str | bytes) -> bytes:
    return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data


def _raw_response(status: int, body: bytes, headers: dict[str, str]) -> web.Response:
    content_type = sniff_content_type(body)
    if content_type is not None:
        headers["Content-Type"] = content_type
    return web.Response(status=status, body=body, headers=headers)


def error_body(text: str) -> bytes:
    """``{"message":"<text>"}``, the body of every V1 error."""
    return gojson.dumps({"message": text})


def respond_v1(status: int, data: object) -> web.Response:
    """A response in NSQ's V1 envelope (``http_api.RespondV1``)."""
    headers = {V1_HEADER_NAME: V1_HEADER_VALUE}
    if status != 200:
        headers["Content-Type"] = JSON_CONTENT_TYPE
        text = data.text if isinstance(data, ApiError) else str(data)
        return web.Response(status=status, body=error_body(text), headers=headers)
    if data is None:
        return web.Response(status=200, headers=headers)
    if data is JSON_NULL:
        headers["Content-Type"] = JSON_CONTENT_TYPE
        return web.Response(status=200, body=b"null", headers=headers)
    if isinstance(data, str | bytes):
        return _raw_response(200, _raw_body(data), headers)
    try:
        body = gojson.dumps(data)
    except (TypeError, ValueError) as err:
        return respond_v1(500, str(err))  # Go reports its marshalling error the same way
    headers["Content-Type"] = JSON_CONTENT_TYPE
    return web.Response(status=200, body=body, headers=headers)


def respond_plain(status: int, data: str | bytes) -> web.Response:
    """A PlainText route's response: raw text, no X-NSQ header, any status."""
    return _raw_response(status, _raw_body(data), {})


# -- request input --------------------------------------------------------------------------------

_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


def _query_unescape(text: str) -> str:
    """Go's url.QueryUnescape: ``+`` is a space, ``%XX`` a byte; a bad escape is an error."""
    raw = text.encode("utf-8", "surrogateescape")
    if b"%" not in raw and b"+" not in raw:
        return text
    out = bytearray()
    i, end = 0, len(raw)
    while i < end:
        byte = raw[i]
        if byte == 0x25:  # '%'
            pair = raw[i + 1 : i + 3]
            if len(pair) < 2 or not _HEX.issuperset(pair):
                bad = raw[i : i + 3].decode("utf-8", "surrogateescape")
                raise ValueError(f'invalid URL escape "{bad}"')
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(0x20 if byte == 0x2B else byte)  # '+' -> ' '
        i += 1
    return out.decode("utf-8", "surrogateescape")


class QueryParams:
    """A request's query string as Go's url.ParseQuery reads it.

    ``values`` holds everything that parsed; ``error`` is the first failure (Go returns both,
    and nsqd answers 400 ``INVALID_REQUEST`` whenever there is an error).
    """

    __slots__ = ("error", "values")

    def __init__(self, raw_query: str) -> None:
        self.values: dict[str, list[str]] = {}
        self.error: str | None = None
        for pair in raw_query.split("&") if raw_query else ():
            if ";" in pair:
                self._fail("invalid semicolon separator in query")
                continue
            if not pair:
                continue
            key, _, value = pair.partition("=")
            try:
                key, value = _query_unescape(key), _query_unescape(value)
            except ValueError as err:
                self._fail(str(err))
                continue
            self.values.setdefault(key, []).append(value)

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    @classmethod
    def of(cls, request: web.Request) -> QueryParams:
        """The query string exactly as sent (no aiohttp normalisation)."""
        _, _, raw_query = request.raw_path.partition("?")
        return cls(raw_query.partition("#")[0])

    def get(self, key: str) -> str | None:
        """The first value of ``key``; None when absent (present but empty gives "")."""
        values = self.values.get(key)
        return values[0] if values else None


_READ_CHUNK: Final = 65536


async def read_limited(request: web.Request, limit: int) -> bytes:
    """Read the body, stopping after ``limit`` bytes (Go's ``io.LimitReader`` + ReadAll).

    Callers pass their maximum plus one, so a result of exactly ``limit`` bytes means "too
    big". A failed read is Go's 500 ``INTERNAL_ERROR``.
    """
    chunks: list[bytes] = []
    remaining = limit
    try:
        while remaining > 0:
            chunk = await request.content.read(min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except (OSError, HttpProcessingError) as err:
        raise ApiError(500, "INTERNAL_ERROR") from err
    return b"".join(chunks)


def remote_address(request: web.Request) -> str:
    """``host:port`` of the peer, as Go's ``req.RemoteAddr``."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(peer or "")


# -- paths ----------------------------------------------------------------------------------------


def clean_path(path: str) -> str:
    """httprouter's CleanPath: resolve ``.``/``..`` and ``//``, keep a trailing slash."""
    if not path:
        return "/"
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                parts.pop()
            continue
        parts.append(segment)
    cleaned = "/" + "/".join(parts)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def _escape_path(path: str) -> str:
    # Go's URL.EscapedPath: unreserved characters plus $&+,/:;=@ are left alone.
    return quote(path, safe="$&+,/:;=@", errors="surrogateescape")


def _html_escape(text: str) -> str:
    # Go's html.EscapeString, whose quote escapes differ from Python's html.escape.
    return (
        text.replace("&", "&amp;")
        .replace("'", "&#39;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
    )


def redirect(request: web.Request, path: str, status: int) -> web.Response:
    """Go's ``http.Redirect`` to ``path`` (query kept), as httprouter issues it."""
    location = clean_path(_escape_path(path))
    _, sep, raw_query = request.raw_path.partition("?")
    if sep and raw_query:
        location += "?" + raw_query
    headers = {"Location": location}
    body = b""
    if request.method in ("GET", "HEAD"):
        headers["Content-Type"] = HTML_CONTENT_TYPE
    if request.method == "GET":
        reason = "Moved Permanently" if status == 301 else "Temporary Redirect"
        body = f'<a href="{_html_escape(location)}">{reason}</a>.\n\n'.encode()
    return web.Response(status=status, body=body, headers=headers)


# -- routing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    """One registered method + path; ``segments`` split on "/", ``:name`` marks a param."""

    method: str
    path: str
    segments: tuple[str, ...]
    handler: RawHandler
    log: bool

    def match(self, parts: list[str], *, fold_case: bool = False) -> dict[str, str] | None:
        """The params when ``parts`` (a split request path) fits this route, else None."""
        if len(parts) != len(self.segments):
            return None
        params: dict[str, str] = {}
        for pattern, part in zip(self.segments, parts, strict=True):
            if pattern.startswith(":"):
                if not part:
                    return None
                params[pattern[1:]] = part
            elif part != pattern and not (fold_case and part.lower() == pattern.lower()):
                return None
        return params

    def render(self, params: Mapping[str, str]) -> str:
        """The route's path with ``params`` filled in (for fixed-path redirects)."""
        return "/".join(params[s[1:]] if s.startswith(":") else s for s in self.segments)


class Router:
    """httprouter-compatible dispatch with NSQ's decorators, as one aiohttp middleware."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self._methods: set[str] = set()  # httprouter keeps one tree per method
        self._static: dict[str, dict[str, Route]] = {}  # method -> exact path -> route
        self._dynamic: dict[str, list[Route]] = {}  # method -> routes with params

    # registration -------------------------------------------------------------------------
    def add(self, method: str, path: str, handler: RawHandler, *, log: bool = False) -> None:
        """Register an undecorated handler (it builds its own response)."""
        segments = tuple(path.split("/"))
        route = Route(method, path, segments, handler, log)
        if any(s.startswith(":") for s in segments):
            self._dynamic.setdefault(method, []).append(route)
        else:
            self._static.setdefault(method, {})[path] = route
        self._methods.add(method)

    def v1(self, method: str, path: str, handler: ApiHandler, *, log: bool = True) -> None:
        """Register a handler whose result goes through the V1 envelope."""

        async def serve(request: web.Request, params: Params) -> web.StreamResponse:
            try:
                data = await handler(request, params)
            except ApiError as err:
                return respond_v1(err.status, err)
            return respond_v1(200, data)

        self.add(method, path, serve, log=log)

    def plain_text(self, method: str, path: str, handler: ApiHandler, *, log: bool = True) -> None:
        """Register a PlainText handler: its text or its error text is written raw."""

        async def serve(request: web.Request, params: Params) -> web.StreamResponse:
            try:
                data = await handler(request, params)
            except ApiError as err:
                return respond_plain(err.status, err.text)
            if not isinstance(data, str | bytes):
                # Go's PlainText panics on anything else (nil included), and the panic
                # handler answers 500 INTERNAL_ERROR, after the handler has done its work.
                type_name = "<nil>" if data is None else type(data).__name__
                raise HandlerPanic(f"unknown response type {type_name}")
            return respond_plain(200, data)

        self.add(method, path, serve, log=log)

    # lookup -------------------------------------------------------------------------------
    def _lookup(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        static = self._static.get(method)
        if static is not None:
            route = static.get(path)
            if route is not None:
                return route, {}
        parts = path.split("/")
        for route in self._dynamic.get(method, ()):
            params = route.match(parts)
            if params is not None:
                return route, params
        return None

    def _routes(self, method: str) -> list[Route]:
        return [*self._static.get(method, {}).values(), *self._dynamic.get(method, ())]

    def _fixed_path(self, method: str, path: str) -> str | None:
        """httprouter's findCaseInsensitivePath on the cleaned path, trailing slash fixed."""
        cleaned = clean_path(path)
        candidates = [cleaned]
        if len(cleaned) > 1:
            candidates.append(cleaned[:-1] if cleaned.endswith("/") else cleaned + "/")
        for candidate in candidates:
            parts = candidate.split("/")
            for route in self._routes(method):
                params = route.match(parts, fold_case=True)
                if params is not None:
                    return route.render(params)
        return None

    def allowed(self, path: str, method: str) -> str:
        """httprouter's ``Allow`` value: other methods serving ``path``, sorted, + OPTIONS."""
        methods = [
            other
            for other in self._methods
            if other not in (method, "OPTIONS") and self._lookup(other, path) is not None
        ]
        if not methods:
            return ""
        return ", ".join(sorted([*methods, "OPTIONS"]))

    # dispatch -----------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        """Answer ``request`` exactly as httprouter's ServeHTTP orders things."""
        method, path = request.method, request.path
        if method in self._methods:
            found = self._lookup(method, path)
            if found is not None:
                return await self._serve(request, *found)
            if method != "CONNECT" and path != "/":
                code = 301 if method == "GET" else 307
                toggled = path[:-1] if len(path) > 1 and path.endswith("/") else path + "/"
                if self._lookup(method, toggled) is not None:
                    return redirect(request, toggled, code)
                fixed = self._fixed_path(method, path)
                if fixed is not None:
                    return redirect(request, fixed, code)
        if method == "OPTIONS":
            allow = self.allowed(path, method)
            if allow:
                return web.Response(status=200, headers={"Allow": allow})
        else:
            allow = self.allowed(path, method)
            if allow:
                response = respond_v1(405, "METHOD_NOT_ALLOWED")
                response.headers["Allow"] = allow
                self._access_log(request, 405, time.perf_counter_ns())
                return response
        self._access_log(request, 404, time.perf_counter_ns())
        return respond_v1(404, "NOT_FOUND")

    async def _serve(
        self, request: web.Request, route: Route, params: dict[str, str]
    ) -> web.StreamResponse:
        start = time.perf_counter_ns()
        try:
            response = await route.handler(request, params)
        except HandlerPanic as err:
            self.log.error("panic in HTTP handler - %s", err)
            return self._panic_response(request, start)
        except Exception as err:
            # Go's router recovers handler panics into a logged 500 INTERNAL_ERROR.
            self.log.exception("panic in HTTP handler - %s", err)
            return self._panic_response(request, start)
        if route.log:
            self._access_log(request, response.status, start)
        return response

    def _panic_response(self, request: web.Request, start_ns: int) -> web.Response:
        self._access_log(request, 500, start_ns)
        return respond_v1(500, "INTERNAL_ERROR")

    def _access_log(self, request: web.Request, status: int, start_ns: int) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        elapsed = format_go_duration(time.perf_counter_ns() - start_ns)
        self.log.info(
            "%d %s %s (%s) %s",
            status,
            request.method,
            request.raw_path,
            remote_address(request),
            elapsed,
        )

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """All dispatch happens here; aiohttp's own router (which has no routes) is unused."""
        return await self.dispatch(request)

    def make_app(self) -> web.Application:
        """An aiohttp application served entirely by this router."""
        return web.Application(middlewares=[self.middleware])


# -- Go's pprof routes, as placeholders ------------------------------------------------------
_PPROF_PROFILES: Final = ("block", "goroutine", "heap", "threadcreate")


def text_response(status: int, text: str) -> web.Response:
    """Plain text as Go's net/http writes it (sniffed type, ``nosniff``)."""
    return web.Response(
        status=status,
        body=text.encode(),
        headers={"Content-Type": TEXT_CONTENT_TYPE, "X-Content-Type-Options": "nosniff"},
    )


def add_pprof_placeholders(router: Router, daemon: str, index_path: str) -> None:
    """Answer Go's ``/debug/pprof`` routes: the arguments for ``cmdline``, a pointer to Python
    profilers for the rest (nsqd's index has a trailing slash, nsqlookupd's has none)."""
    unavailable = (
        "nsqpy is Python: Go's pprof profiles are not available.\n"
        f"Profile a running nsqpy {daemon} with py-spy (py-spy top --pid <pid>) or pyinstrument.\n"
    )
    names = ", ".join(("cmdline", "profile", "symbol", *_PPROF_PROFILES))

    async def index(request: web.Request, params: Params) -> web.StreamResponse:
        return text_response(200, f"{unavailable}Unavailable here: {names}.\n")

    async def cmdline(request: web.Request, params: Params) -> web.StreamResponse:
        return text_response(200, "\x00".join(sys.argv))  # Go's pprof.Cmdline

    async def missing(request: web.Request, params: Params) -> web.StreamResponse:
        return text_response(501, unavailable)

    router.add("GET", index_path, index)
    router.add("GET", "/debug/pprof/cmdline", cmdline)
    for method, path in (
        ("GET", "/debug/pprof/symbol"),
        ("POST", "/debug/pprof/symbol"),
        ("GET", "/debug/pprof/profile"),
        *(("GET", f"/debug/pprof/{name}") for name in _PPROF_PROFILES),
    ):
        router.add(method, path, missing)

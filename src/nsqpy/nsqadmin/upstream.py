"""nsqadmin's HTTP client to nsqlookupd and nsqd (NSQ's ``internal/http_api`` Client).

Every request asks for the V1 format; a non-200 answer or a transport failure raises
``UpstreamError`` worded as Go's client words it (``Get "<url>": dial tcp ...: connect:
connection refused``, ``got response 404 Not Found "..."``), because nsqadmin shows those
texts to the user in its ``WARNING: ...`` and ``UPSTREAM_ERROR: ...`` messages. A 403 from a
plain-http endpoint that names an ``https_port`` (nsqd with ``--tls-required``) is retried
there over https, as Go's client does.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from nsqpy._internal.gostrconv import go_quote
from nsqpy.tools.clusterinfo import ACCEPT_V1

_NS: Final = 1_000_000_000
_JSON: Final = "application/json"


class UpstreamError(Exception):
    """One failed request to an upstream; the message is Go's error text."""


class UpstreamStatusError(UpstreamError):
    """The upstream answered, with a status other than 200; ``reason`` is the V1 body's
    ``message`` (nsqd's ``CODE: why``), or the body's text when it has none."""

    def __init__(self, text: str, status: int, reason: str) -> None:
        super().__init__(text)
        self.status = status
        self.reason = reason


def _v1_message(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    message = doc.get("message") if isinstance(doc, dict) else None
    return message if isinstance(message, str) else text


def _https_endpoint(url: str, body: bytes) -> str | None:
    """The https URL a TLS-required nsqd's 403 points at, or None if it names none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    port = doc.get("https_port") if isinstance(doc, dict) else None
    if not isinstance(port, int):
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(("https", netloc, parts.path, parts.query, ""))


def _transport_reason(err: BaseException) -> str:
    """Go's wording for a failed dial or request, as near as aiohttp's errors allow."""
    if isinstance(err, TimeoutError):
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(err, aiohttp.ClientConnectorCertificateError):
        # a subclass of the connector error below, whose errno would say "operation not
        # permitted"; Go's crypto/tls says why the certificate was refused
        cause = err.certificate_error
        reason = cause.verify_message if isinstance(cause, ssl.SSLCertVerificationError) else cause
        return f"tls: failed to verify certificate: {reason}"
    if isinstance(err, aiohttp.ClientConnectorError):
        address = f"{err.host}:{err.port}"
        os_error = err.os_error
        if isinstance(os_error, socket.gaierror):
            return f"dial tcp: lookup {err.host}: no such host"
        # asyncio words a refused connect "Connect call failed (...)": the errno says it all
        reason = os.strerror(os_error.errno) if os_error.errno else str(os_error)
        return f"dial tcp {address}: connect: {reason[:1].lower()}{reason[1:]}"
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return "EOF"
    return str(err) or type(err).__name__


class Upstream:
    """A pooled aiohttp session with nsqadmin's timeouts and client TLS settings."""

    def __init__(
        self, *, connect_timeout_ns: int, request_timeout_ns: int, tls: ssl.SSLContext | None
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_ns / _NS, sock_connect=connect_timeout_ns / _NS
        )
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._tls if self._tls is not None else True)
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def get_v1(self, url: str) -> object:
        """GET a V1 JSON document. Raises UpstreamError."""
        body = await self._request("GET", url)
        try:
            doc: object = json.loads(body)
        except ValueError as err:
            raise UpstreamError(str(err)) from None
        return doc

    async def post_v1(self, url: str) -> None:
        """POST with no body, expecting a 200. Raises UpstreamError."""
        await self._request("POST", url)

    async def post_json(self, url: str, body: bytes | None = None) -> object:
        """POST (``body``: a JSON document) and parse the answer; None for an empty one.
        Raises UpstreamError (UpstreamStatusError for a non-200 answer)."""
        answer = await self._request("POST", url, body)
        try:
            doc: object = json.loads(answer) if answer else None
        except ValueError as err:
            raise UpstreamError(str(err)) from None
        return doc

    async def get_raw(
        self, url: str, headers: dict[str, str] | None = None
    ) -> tuple[int, str, bytes]:
        """GET anything (the graphite proxy): status, content type and body."""
        try:
            async with self.session.get(url, headers=headers, allow_redirects=False) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UpstreamError(f"Get {go_quote(url)}: {_transport_reason(err)}") from None

    async def _request(self, method: str, url: str, data: bytes | None = None) -> bytes:
        verb = method.capitalize()
        headers = ACCEPT_V1 if data is None else {**ACCEPT_V1, "Content-Type": _JSON}
        for _attempt in range(2):
            try:
                async with self.session.request(method, url, headers=headers, data=data) as resp:
                    body = await resp.read()
                    status, reason = resp.status, resp.reason or ""
            except (aiohttp.ClientError, TimeoutError) as err:
                raise UpstreamError(f"{verb} {go_quote(url)}: {_transport_reason(err)}") from None
            if status == 200:
                return body
            if status == 403 and not url.startswith("https"):
                https = _https_endpoint(url, body)
                if https is not None:
                    url = https
                    continue
            text = body.decode("utf-8", errors="replace")
            message = f"got response {status} {reason} {go_quote(text)}"
            raise UpstreamStatusError(message, status, _v1_message(text))
        raise UpstreamError(f"{verb} {go_quote(url)}: stopped after 1 redirect")

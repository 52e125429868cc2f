"""nsqadmin's Graphite support: ``/api/graphite`` (a rate) and the ``/render`` proxy.

``rate`` asks ``<graphite-url>/render`` for ``target`` over the statsd interval before last
and answers ``{"rate": "%.2f"}`` per second (``"N/A"`` for a negative value), as NSQ does.
``proxy`` forwards ``GET <base>/render`` to the graphite host (``--proxy-graphite``), passing
the URL's user and password on as basic auth.
"""

from __future__ import annotations

import base64
import logging
import math
from typing import Final
from urllib.parse import quote_plus, unquote, urlsplit

from aiohttp import web

from nsqpy._internal.http_api import ApiError, QueryParams, remote_address
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.nsqadmin.upstream import Upstream, UpstreamError

log = logging.getLogger("nsqpy.nsqadmin")

_NS: Final = 1_000_000_000
_HOP_BY_HOP: Final = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Accept-Encoding",  # the answer is re-compressed for our own client anyway
    )
)


def render_query(target: str, interval_s: int) -> str:
    """Go's url.Values{from, until, format, target}.Encode(): keys sorted."""
    params = {
        "format": "json",
        "from": f"-{interval_s * 2}sec",
        "target": target,
        "until": f"-{interval_s}sec",
    }
    return "&".join(f"{k}={quote_plus(v, safe='')}" for k, v in params.items())


def format_rate(value: float, interval_s: int) -> str:
    if value < 0:
        return "N/A"
    if interval_s == 0:  # Go's float division by zero
        return "NaN" if value == 0 else "+Inf"
    return f"{value / interval_s:.2f}"


def first_value(doc: object) -> float:
    """``response[0].datapoints[0][0]``; ValueError where Go would panic (nil, out of range)."""
    try:
        value = doc[0]["datapoints"][0][0]  # type: ignore[index]
    except (LookupError, TypeError):
        raise ValueError("no datapoint") from None
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise ValueError("no datapoint")
    return float(value)


async def rate(upstream: Upstream, opts: NsqadminOptions, request: web.Request) -> object:
    query = QueryParams.of(request)
    if query.error is not None:
        raise ApiError(400, "INVALID_REQUEST")
    if query.get("metric") != "rate":
        raise ApiError(400, "INVALID_ARG_METRIC")
    target = query.get("target")
    if target is None:
        raise ApiError(400, "INVALID_ARG_TARGET")
    interval_s = opts.statsd_interval // _NS
    url = f"{opts.graphite_url}/render?{render_query(target, interval_s)}"
    log.info("GRAPHITE: %s", url)
    try:
        doc = await upstream.get_v1(url)
    except UpstreamError as err:
        log.error("graphite request failed - %s", err)
        raise ApiError(500, "INTERNAL_ERROR") from None
    try:
        value = first_value(doc)
    except ValueError:
        log.error("panic in HTTP handler - graphite answered no datapoint")
        raise ApiError(500, "INTERNAL_ERROR") from None
    return {"rate": format_rate(value, interval_s)}


async def proxy(upstream: Upstream, graphite_url: str, request: web.Request) -> web.Response:
    target = urlsplit(graphite_url)
    host = target.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if target.port is not None:
        netloc += f":{target.port}"
    url = f"{target.scheme}://{netloc}{request.raw_path}"
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
    client_ip = remote_address(request).rpartition(":")[0].strip("[]")
    prior = request.headers.get("X-Forwarded-For")
    headers["X-Forwarded-For"] = f"{prior}, {client_ip}" if prior else client_ip
    if target.username is not None:
        pair = f"{unquote(target.username)}:{unquote(target.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    try:
        status, content_type, body = await upstream.get_raw(url, headers)
    except UpstreamError as err:
        log.error("http: proxy error: %s", err)
        return web.Response(status=502)
    out_headers = {"Content-Type": content_type} if content_type else {}
    return web.Response(status=status, body=body, headers=out_headers)

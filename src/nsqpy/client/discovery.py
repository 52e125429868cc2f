"""nsqlookupd queries: which nsqd have a topic (``/lookup``), as go-nsq and pynsq ask it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp

from nsqpy.client.errors import NSQError

log = logging.getLogger("nsqpy.client")

ACCEPT: Final = "application/vnd.nsq; version=1.0"


class LookupdError(NSQError):
    """A lookupd query failed (unreachable, non-200, unparsable)."""


def lookup_url(address: str, topic: str) -> str:
    """go-nsq's rule: add ``http://`` if missing; an empty or ``/`` path means ``/lookup``."""
    if "://" not in address:
        address = "http://" + address
    parts = urlsplit(address)
    path = parts.path if parts.path not in ("", "/") else "/lookup"
    query = urlencode({"topic": topic})
    if parts.query:
        query = parts.query + "&" + query
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def producer_addresses(doc: Any) -> list[str]:
    """``broadcast_address:tcp_port`` of each producer, from either response shape."""
    if isinstance(doc, dict) and "producers" not in doc and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # pre-1.0 lookupd wraps the answer
    producers = doc.get("producers") if isinstance(doc, dict) else None
    if not isinstance(producers, list):
        raise ValueError("no producers list in lookupd response")
    out = []
    for p in producers:
        if not isinstance(p, dict):
            continue
        host = p.get("broadcast_address") or p.get("address")
        port = p.get("tcp_port")
        if isinstance(host, str) and isinstance(port, int):
            out.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return out


async def query_lookupd(
    session: aiohttp.ClientSession, address: str, topic: str, *, auth_secret: str = ""
) -> list[str]:
    """nsqd TCP addresses lookupd knows for ``topic``. A 404 (unknown topic) is an empty list."""
    headers = {"Accept": ACCEPT}
    if auth_secret:
        headers["Authorization"] = f"Bearer {auth_secret}"
    url = lookup_url(address, topic)
    try:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status == 404:
                return []
            if resp.status != 200:
                raise LookupdError(f"lookupd {address}: HTTP {resp.status} {body[:200]!r}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise LookupdError(f"lookupd {address}: {exc!r}") from exc
    try:
        return producer_addresses(json.loads(body))
    except ValueError as exc:
        raise LookupdError(f"lookupd {address}: bad response: {exc}") from exc


def merge(results: Iterable[Sequence[str] | BaseException]) -> set[str] | None:
    """The union of successful answers; None when every lookupd failed (keep what we have)."""
    found: set[str] | None = None
    for r in results:
        if isinstance(r, BaseException):
            log.warning("%s", r)
            continue
        found = (found or set()) | set(r)
    return found

"""The few cluster queries the utilities make over HTTP, as NSQ's ``internal/clusterinfo``.

Which nsqd nodes have a topic: from nsqlookupd's ``/lookup`` or from each nsqd's ``/stats``
(then ``/info`` for its broadcast address); and a topic/channel's ``/stats`` from each of them.
Every query asks for NSQ's V1 format (``Accept: application/vnd.nsq; version=1.0``). Each
function returns what it found and the errors of the nodes that failed, worded like Go's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

import aiohttp

from nsqpy._internal.gostrconv import go_quote, query_escape

ACCEPT_V1: Final = {"Accept": "application/vnd.nsq; version=1.0"}

T = TypeVar("T")


class ClusterError(Exception):
    """No node could be queried; the message is Go's (``failed to query any nsqd: ...``)."""


@dataclass(frozen=True, slots=True)
class Node:
    """An nsqd as found in the cluster; ``http_address`` is where its HTTP API listens."""

    broadcast_address: str
    http_port: int
    hostname: str = ""

    @property
    def http_address(self) -> str:
        host = self.broadcast_address
        # Go's net.JoinHostPort brackets IPv6 literals.
        return f"[{host}]:{self.http_port}" if ":" in host else f"{host}:{self.http_port}"


@dataclass(slots=True)
class Found(Generic[T]):
    """A fan-out's results plus the error text of each node that failed."""

    items: list[T] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def error_text(self) -> str:
        return "\n".join(self.errors)


async def get_v1(session: aiohttp.ClientSession, url: str) -> object:
    """GET a V1 JSON document; raises ValueError with a Go-like message on any failure."""
    try:
        async with session.get(url, headers=ACCEPT_V1) as resp:
            body = await resp.read()
            if resp.status != 200:
                status = f"{resp.status} {resp.reason or ''}".rstrip()
                text = body.decode("utf-8", errors="replace")
                raise ValueError(f"got response {status} {go_quote(text)}")
    except (aiohttp.ClientError, TimeoutError) as err:
        raise ValueError(f'Get "{url}": {str(err) or type(err).__name__}') from None
    try:
        result: object = json.loads(body)
    except ValueError as err:
        raise ValueError(str(err)) from None
    return result


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _node_from(producer: Mapping[str, object]) -> Node | None:
    address, port = producer.get("broadcast_address"), producer.get("http_port")
    if not isinstance(address, str) or not isinstance(port, int):
        return None
    hostname = producer.get("hostname")
    return Node(address, port, hostname if isinstance(hostname, str) else "")


async def lookupd_topic_nodes(
    session: aiohttp.ClientSession, topic: str, lookupd_http_addresses: Sequence[str]
) -> Found[Node]:
    """The nsqd producing ``topic`` per each lookupd's ``/lookup``, deduplicated by address."""
    urls = [f"http://{a}/lookup?topic={query_escape(topic)}" for a in lookupd_http_addresses]
    found: Found[Node] = Found()
    for result in await asyncio.gather(*(_get_or_error(session, u) for u in urls)):
        if (error := _failed(result)) is not None:
            found.errors.append(error)
            continue
        producers = _mapping(result).get("producers")
        for producer in producers if isinstance(producers, list) else []:
            node = _node_from(_mapping(producer))
            known = {n.http_address for n in found.items}
            if node is not None and node.http_address not in known:
                found.items.append(node)
    if found.errors and len(found.errors) == len(urls):
        raise ClusterError(f"failed to query any nsqlookupd: {found.error_text()}")
    return found


async def _get_or_error(session: aiohttp.ClientSession, url: str) -> object:
    """The document, or the ValueError if the query failed (see _failed)."""
    try:
        return await get_v1(session, url)
    except ValueError as err:
        return err


def _failed(result: object) -> str | None:
    return str(result) if isinstance(result, ValueError) else None


async def nsqd_topic_nodes(
    session: aiohttp.ClientSession, topic: str, nsqd_http_addresses: Sequence[str]
) -> Found[Node]:
    """The given nsqd that have ``topic`` (per their ``/stats``), described by ``/info``."""
    results = await asyncio.gather(
        *(_nsqd_topic_node(session, topic, a) for a in nsqd_http_addresses)
    )
    found: Found[Node] = Found()
    for result in results:
        if isinstance(result, str):
            found.errors.append(result)
        elif result is not None:
            found.items.append(result)
    if found.errors and len(found.errors) == len(nsqd_http_addresses):
        raise ClusterError(f"failed to query any nsqd: {found.error_text()}")
    return found


async def _nsqd_topic_node(
    session: aiohttp.ClientSession, topic: str, address: str
) -> Node | str | None:
    url = f"http://{address}/stats?format=json&topic={query_escape(topic)}&include_clients=false"
    stats = await _get_or_error(session, url)
    if (error := _failed(stats)) is not None:
        return error
    topics = _mapping(stats).get("topics")
    names = [_mapping(t).get("topic_name") for t in topics] if isinstance(topics, list) else []
    if topic not in names:
        return None
    info = await _get_or_error(session, f"http://{address}/info")
    if (error := _failed(info)) is not None:
        return error
    return _node_from_info(_mapping(info), address)


def _node_from_info(info: Mapping[str, object], address: str) -> Node:
    host, _, port = address.rpartition(":")
    broadcast, http_port = info.get("broadcast_address"), info.get("http_port")
    hostname = info.get("hostname")
    if not isinstance(broadcast, str) or not broadcast:
        # Older nsqd do not say: fall back to the address we reached it on, as NSQ does.
        broadcast, http_port = host.strip("[]"), int(port) if port.isdigit() else 0
    return Node(
        broadcast,
        http_port if isinstance(http_port, int) else 0,
        hostname if isinstance(hostname, str) and hostname else host.strip("[]"),
    )


async def nsqd_stats(
    session: aiohttp.ClientSession, nodes: Sequence[Node], topic: str, channel: str
) -> Found[Mapping[str, object]]:
    """Each node's ``/stats`` for ``topic``/``channel``; Go fails when none answer — which
    includes having no nodes at all."""
    query = (
        f"format=json&topic={query_escape(topic)}&channel={query_escape(channel)}"
        "&include_clients=false"
    )
    urls = [f"http://{n.http_address}/stats?{query}" for n in nodes]
    found: Found[Mapping[str, object]] = Found()
    for result in await asyncio.gather(*(_get_or_error(session, u) for u in urls)):
        if (error := _failed(result)) is not None:
            found.errors.append(error)
        else:
            found.items.append(_mapping(result))
    if len(found.errors) == len(urls):
        raise ClusterError(f"failed to query any nsqd: {found.error_text()}")
    return found

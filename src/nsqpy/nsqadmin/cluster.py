"""nsqadmin's cluster queries and admin fan-out (NSQ ``internal/clusterinfo/data.go``).

Queries run concurrently, one request per lookupd or nsqd; admin POSTs run one after the
other, as in Go. Go's error contract is kept: a query that fails on *every* upstream raises
``ClusterError`` (nsqadmin answers 502 ``UPSTREAM_ERROR: <text>``), while failures on some
upstreams come back as a list of error texts beside the result (nsqadmin answers 200 with
``"message": "WARNING: ..."``). Admin actions collect every error as a partial one, except
that nsqpy's dead-letter actions stop at an nsqd's 400 (``RefusedError``): the request itself
is bad, and every nsqd would refuse it alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nsqpy._internal.gostrconv import query_escape
from nsqpy.nsqadmin.aggregate import Doc, StatsCollector
from nsqpy.nsqadmin.producers import Producer
from nsqpy.nsqadmin.upstream import Upstream, UpstreamError, UpstreamStatusError

log = logging.getLogger("nsqpy.nsqadmin")

T = TypeVar("T")


class ClusterError(Exception):
    """Every upstream failed; the message is Go's (``failed to query any nsqd: ...``)."""


class RefusedError(Exception):
    """An nsqd refused an admin request as invalid (400); the message is nsqd's own
    (``INVALID_MESSAGE_TTL: ...``)."""


@dataclass(slots=True)
class Errors:
    """The error texts of the upstreams that failed (Go's ErrList)."""

    items: list[str] = field(default_factory=list)

    def add(self, errors: Errors | list[str]) -> None:
        self.items.extend(errors.items if isinstance(errors, Errors) else errors)

    def text(self) -> str:
        return "\n".join(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


async def _gather(calls: Sequence[Awaitable[T]]) -> list[T | UpstreamError]:
    """Run the calls together; a failure becomes its UpstreamError in the result list."""

    async def one(call: Awaitable[T]) -> T | UpstreamError:
        try:
            return await call
        except UpstreamError as err:
            return err

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _all_failed(what: str, errors: Errors, total: int) -> None:
    if len(errors.items) == total:
        raise ClusterError(f"failed to query any {what}: {errors.text()}")


@dataclass(slots=True)
class NodeStats:
    """GetNSQDStats' result: per-node topics (sorted by host) and channel aggregates."""

    topics: list[Doc]
    channels: dict[str, Doc]


class ClusterInfo:
    """The queries of NSQ's clusterinfo over one ``Upstream`` client."""

    def __init__(self, upstream: Upstream, *, quiet: bool = False) -> None:
        self.upstream = upstream
        # the sampler queries every interval: its requests are not worth an INFO line each
        self._log: Callable[..., None] = log.debug if quiet else log.info

    async def _get(self, kind: str, url: str) -> object:
        self._log("CI: querying %s %s", kind, url)
        return await self.upstream.get_v1(url)

    # -- lookupd queries --------------------------------------------------------------------
    async def lookupd_topics(self, lookupds: Sequence[str]) -> tuple[list[str] | None, Errors]:
        results = await _gather([self._get("nsqlookupd", f"http://{a}/topics") for a in lookupds])
        return self._union("topics", results, len(lookupds))

    async def lookupd_topic_channels(
        self, topic: str, lookupds: Sequence[str]
    ) -> tuple[list[str] | None, Errors]:
        urls = [f"http://{a}/channels?topic={query_escape(topic)}" for a in lookupds]
        results = await _gather([self._get("nsqlookupd", u) for u in urls])
        return self._union("channels", results, len(lookupds))

    @staticmethod
    def _union(
        key: str, results: list[object | UpstreamError], total: int
    ) -> tuple[list[str] | None, Errors]:
        errors, names = Errors(), []
        for result in results:
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
            else:
                names.extend(_strings(_mapping(result).get(key)))
        _all_failed("nsqlookupd", errors, total)
        # stringy.Uniq of nothing is a nil slice: JSON null
        return (sorted(set(names)) or None), errors

    async def lookupd_producers(self, lookupds: Sequence[str]) -> tuple[list[Producer], Errors]:
        results = await _gather([self._get("nsqlookupd", f"http://{a}/nodes") for a in lookupds])
        errors, by_address, producers = Errors(), dict[str, Producer](), list[Producer]()
        for address, result in zip(lookupds, results, strict=True):
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
                continue
            for raw in _mapping(result).get("producers") or ():
                found = Producer.from_lookupd(_mapping(raw))
                known = by_address.setdefault(found.tcp_address, found)
                if known is found:
                    producers.append(found)
                    if found.topics:
                        found.topics.sort()
                known.remote_addresses = [
                    *(known.remote_addresses or ()),
                    f"{address}/{found.address}",
                ]
        _all_failed("nsqlookupd", errors, len(lookupds))
        newest = max((p.version_obj for p in producers), default=None)
        for producer in producers:
            producer.out_of_date = newest is not None and producer.version_obj < newest
        producers.sort(key=lambda p: p.hostname)
        return producers, errors

    async def lookupd_topic_producers(
        self, topic: str, lookupds: Sequence[str]
    ) -> tuple[list[Producer], Errors]:
        urls = [f"http://{a}/lookup?topic={query_escape(topic)}" for a in lookupds]
        results = await _gather([self._get("nsqlookupd", u) for u in urls])
        errors, producers = Errors(), list[Producer]()
        for result in results:
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
                continue
            for raw in _mapping(result).get("producers") or ():
                found = Producer.from_lookupd(_mapping(raw))
                if all(p.http_address != found.http_address for p in producers):
                    producers.append(found)
        _all_failed("nsqlookupd", errors, len(lookupds))
        return producers, errors

    # -- nsqd queries -----------------------------------------------------------------------
    async def nsqd_topics(self, nsqds: Sequence[str]) -> tuple[list[str] | None, Errors]:
        urls = [f"http://{a}/stats?format=json" for a in nsqds]
        results = await _gather([self._get("nsqd", u) for u in urls])
        errors, names = Errors(), list[str]()
        for result in results:
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
                continue
            for name in _topic_names(result):
                if name not in names:
                    names.append(name)
        _all_failed("nsqd", errors, len(nsqds))
        return (sorted(names) or None), errors

    async def nsqd_producers(self, nsqds: Sequence[str]) -> tuple[list[Producer], Errors]:
        results = await _gather([self._nsqd_producer(a, None) for a in nsqds])
        return self._producers_of(results, len(nsqds))

    async def nsqd_topic_producers(
        self, topic: str, nsqds: Sequence[str]
    ) -> tuple[list[Producer], Errors]:
        results = await _gather([self._nsqd_producer(a, topic) for a in nsqds])
        return self._producers_of(results, len(nsqds))

    @staticmethod
    def _producers_of(
        results: list[Producer | UpstreamError | None], total: int
    ) -> tuple[list[Producer], Errors]:
        errors, producers = Errors(), list[Producer]()
        for result in results:
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
            elif result is not None:
                producers.append(result)
        _all_failed("nsqd", errors, total)
        return producers, errors

    async def _nsqd_producer(self, address: str, topic: str | None) -> Producer | None:
        """Go's GetNSQDProducers (``topic`` None: /info then /stats) or GetNSQDTopicProducers
        (/stats for the topic first, /info only if the nsqd has it)."""
        if topic is None:
            info = await self._get("nsqd", f"http://{address}/info")
            url = f"http://{address}/stats?format=json&include_clients=false"
            names = _topic_names(await self._get("nsqd", url))
            return Producer.from_nsqd(_mapping(info), names)
        url = f"http://{address}/stats?format=json&topic={query_escape(topic)}&include_clients=false"
        names = _topic_names(await self._get("nsqd", url))
        if topic not in names:
            return None
        info = await self._get("nsqd", f"http://{address}/info")
        return Producer.from_nsqd(_mapping(info), names, address)

    async def nsqd_stats(
        self,
        producers: Sequence[Producer],
        topic: str,
        channel: str,
        include_clients: bool,
        now: float,
    ) -> tuple[NodeStats, Errors]:
        """GetNSQDStats: every producer's /stats, per node and aggregated."""
        query = "format=json"
        if topic:
            query += f"&topic={query_escape(topic)}"
            if channel:
                query += f"&channel={query_escape(channel)}"
        if not include_clients:
            query += "&include_clients=false"
        # Go adds nodes in answer order, then sorts by host; we add them host-sorted.
        ordered = sorted(producers, key=lambda p: (p.hostname, p.http_address))
        urls = [f"http://{p.http_address}/stats?{query}" for p in ordered]
        results = await _gather([self._get("nsqd", u) for u in urls])
        errors, collector = Errors(), StatsCollector(topic, now)
        for producer, result in zip(ordered, results, strict=True):
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
            else:
                collector.add_node(producer.http_address, producer.hostname, _mapping(result))
        _all_failed("nsqd", errors, len(ordered))  # no producers at all fails too, as in Go
        return NodeStats(collector.sorted_topics(), collector.channels), errors

    # -- either source ----------------------------------------------------------------------
    async def producers(
        self, lookupds: Sequence[str], nsqds: Sequence[str]
    ) -> tuple[list[Producer], Errors]:
        if lookupds:
            return await self.lookupd_producers(lookupds)
        return await self.nsqd_producers(nsqds)

    async def topic_producers(
        self, topic: str, lookupds: Sequence[str], nsqds: Sequence[str]
    ) -> tuple[list[Producer], Errors]:
        if lookupds:
            return await self.lookupd_topic_producers(topic, lookupds)
        return await self.nsqd_topic_producers(topic, nsqds)

    # -- admin POSTs ------------------------------------------------------------------------
    async def lookupd_post(self, lookupds: Sequence[str], uri: str, query: str) -> Errors:
        errors = Errors()
        for address in lookupds:
            url = f"http://{address}/{uri}?{query}"
            self._log("CI: querying nsqlookupd %s", url)
            try:
                await self.upstream.post_v1(url)
            except UpstreamError as err:
                errors.items.append(str(err))
        return errors

    async def producers_post(self, producers: Sequence[Producer], uri: str, query: str) -> Errors:
        errors = Errors()
        for producer in producers:
            url = f"http://{producer.http_address}/{uri}?{query}"
            self._log("CI: querying nsqd %s", url)
            try:
                await self.upstream.post_v1(url)
            except UpstreamError as err:
                errors.items.append(str(err))
        return errors

    async def producers_post_json(
        self, producers: Sequence[Producer], uri: str, query: str, body: bytes | None = None
    ) -> tuple[list[object], Errors]:
        """POST to every producer in turn; the JSON answers of those that took it.

        nsqd validates a request the same way on every node, so its 400 means the request is
        bad, not the node: the fan-out stops there (no later node is changed) and
        RefusedError carries nsqd's message. Any other failure is a partial error.
        """
        errors, answers = Errors(), list[object]()
        for producer in producers:
            url = f"http://{producer.http_address}/{uri}?{query}"
            self._log("CI: querying nsqd %s", url)
            try:
                answers.append(await self.upstream.post_json(url, body))
            except UpstreamStatusError as err:
                if err.status == 400:
                    raise RefusedError(err.reason) from None
                errors.items.append(str(err))
            except UpstreamError as err:
                errors.items.append(str(err))
        return answers, errors


def _topic_names(stats: object) -> list[str]:
    topics = _mapping(stats).get("topics")
    if not isinstance(topics, list):
        return []
    return [name for t in topics if isinstance(name := _mapping(t).get("topic_name"), str)]

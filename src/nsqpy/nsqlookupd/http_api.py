"""nsqlookupd's HTTP API (NSQ v1.3.0 ``nsqlookupd/http.go``): discovery and admin routes.

Routing, the V1 envelope and the access log come from ``nsqpy._internal.http_api``. JSON
shapes are Go's: a Go map marshals with sorted keys, a struct in field order; every list is
``[]`` when empty, never ``null``. Params come only from the query string.
"""

from __future__ import annotations

import logging

from aiohttp import web

from nsqpy._internal import prometheus
from nsqpy._internal.http_api import (
    ApiError,
    Params,
    QueryParams,
    Router,
    add_pprof_placeholders,
)
from nsqpy._internal.origin import OriginGuard
from nsqpy.nsqlookupd.context import LookupdContext
from nsqpy.nsqlookupd.metrics import Limits, metrics_text
from nsqpy.nsqlookupd.registry import PeerInfo, Producer
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.names import is_valid_name

log = logging.getLogger("nsqpy.nsqlookupd")


def _query(request: web.Request) -> QueryParams:
    query = QueryParams.of(request)
    if query.error is not None:
        raise ApiError(400, "INVALID_REQUEST")
    return query


def _required(query: QueryParams, key: str, missing: str) -> str:
    value = query.get(key)
    if value is None:
        raise ApiError(400, missing)
    return value


def _topic_channel_args(request: web.Request) -> tuple[str, str]:
    """Go's http_api.GetTopicChannelArgs, in its order."""
    query = _query(request)
    topic = _required(query, "topic", "MISSING_ARG_TOPIC")
    if not is_valid_name(topic):
        raise ApiError(400, "INVALID_ARG_TOPIC")
    channel = _required(query, "channel", "MISSING_ARG_CHANNEL")
    if not is_valid_name(channel):
        raise ApiError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


def _debug_entry(producer: Producer) -> dict[str, object]:
    peer = producer.peer
    entry: dict[str, object] = {
        "id": peer.id,
        "hostname": peer.hostname,
        "broadcast_address": peer.broadcast_address,
        "tcp_port": peer.tcp_port,
        "http_port": peer.http_port,
        "version": peer.version,
        "last_update": peer.last_update,
        "tombstoned": producer.tombstoned,
        "tombstoned_at": producer.tombstoned_at_ns,
    }
    return dict(sorted(entry.items()))  # a Go map


def _node(peer: PeerInfo, topics: list[str], tombstones: list[bool]) -> dict[str, object]:
    return {**peer.to_json(), "tombstones": tombstones, "topics": topics}


class LookupdHttpApi:
    """The handlers of one nsqlookupd, registered on an httprouter-style ``Router``."""

    def __init__(self, lookupd: LookupdContext) -> None:
        self.lookupd = lookupd
        self.db = lookupd.registry
        self.router = Router(log)
        self._register()

    def _register(self) -> None:
        r = self.router
        r.plain_text("GET", "/ping", self.ping)
        r.v1("GET", "/info", self.info)
        r.v1("GET", "/debug", self.debug)
        r.v1("GET", "/lookup", self.lookup)
        r.v1("GET", "/topics", self.topics)
        r.v1("GET", "/channels", self.channels)
        r.v1("GET", "/nodes", self.nodes)
        r.add("GET", "/metrics", self.metrics, log=True)
        r.v1("POST", "/topic/create", self.topic_create)
        r.v1("POST", "/topic/delete", self.topic_delete)
        r.v1("POST", "/channel/create", self.channel_create)
        r.v1("POST", "/channel/delete", self.channel_delete)
        r.v1("POST", "/topic/tombstone", self.topic_tombstone)
        add_pprof_placeholders(self.router, "nsqlookupd", "/debug/pprof")  # no trailing slash

    @property
    def _timeouts(self) -> tuple[int, int]:
        opts = self.lookupd.opts
        return opts.inactive_producer_timeout, opts.tombstone_lifetime

    # -- read-only ----------------------------------------------------------------------------
    async def ping(self, request: web.Request, params: Params) -> object:
        return "OK"

    async def info(self, request: web.Request, params: Params) -> object:
        return {"version": NSQ_VERSION}

    async def debug(self, request: web.Request, params: Params) -> object:
        data: dict[str, list[dict[str, object]]] = {}
        for reg, producers in self.db.items():
            if producers:
                key = f"{reg.category}:{reg.key}:{reg.subkey}"
                data.setdefault(key, []).extend(_debug_entry(p) for p in producers)
        return dict(sorted(data.items()))

    async def lookup(self, request: web.Request, params: Params) -> object:
        topic = _required(_query(request), "topic", "MISSING_ARG_TOPIC")
        if not self.db.has_topic(topic):
            raise ApiError(404, "TOPIC_NOT_FOUND")
        producers = self.db.active_producers(topic, *self._timeouts)
        return {
            "channels": self.db.channels(topic),
            "producers": [peer.to_json() for peer in producers],
        }

    async def topics(self, request: web.Request, params: Params) -> object:
        return {"topics": self.db.topics()}

    async def channels(self, request: web.Request, params: Params) -> object:
        topic = _required(_query(request), "topic", "MISSING_ARG_TOPIC")
        return {"channels": self.db.channels(topic)}

    async def nodes(self, request: web.Request, params: Params) -> object:
        nodes = self.db.nodes(*self._timeouts)
        return {"producers": [_node(*node) for node in nodes]}

    async def metrics(self, request: web.Request, params: Params) -> web.StreamResponse:
        """Prometheus text format 0.0.4 (``nsqpy.nsqlookupd.metrics``)."""
        opts = self.lookupd.opts
        limits = Limits(opts.inactive_producer_timeout, opts.tombstone_lifetime)
        body = metrics_text(self.db, limits, len(self.lookupd.connections))
        return web.Response(body=body.encode(), headers={"Content-Type": prometheus.CONTENT_TYPE})

    # -- admin --------------------------------------------------------------------------------
    async def topic_create(self, request: web.Request, params: Params) -> object:
        topic = _required(_query(request), "topic", "MISSING_ARG_TOPIC")
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_ARG_TOPIC")
        log.info("DB: adding topic(%s)", topic)
        self.db.create_topic(topic)
        return None

    async def topic_delete(self, request: web.Request, params: Params) -> object:
        topic = _required(_query(request), "topic", "MISSING_ARG_TOPIC")
        for reg in self.db.delete_topic(topic):
            if reg.category == "channel":
                log.info("DB: removing channel(%s) from topic(%s)", reg.subkey, topic)
            else:
                log.info("DB: removing topic(%s)", topic)
        return None

    async def topic_tombstone(self, request: web.Request, params: Params) -> object:
        query = _query(request)
        topic = _required(query, "topic", "MISSING_ARG_TOPIC")
        node = _required(query, "node", "MISSING_ARG_NODE")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        self.db.tombstone(topic, node)
        return None

    async def channel_create(self, request: web.Request, params: Params) -> object:
        topic, channel = _topic_channel_args(request)
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        log.info("DB: adding topic(%s)", topic)
        self.db.create_channel(topic, channel)
        return None

    async def channel_delete(self, request: web.Request, params: Params) -> object:
        topic, channel = _topic_channel_args(request)
        if not self.db.delete_channel(topic, channel):
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        return None


def make_app(lookupd: LookupdContext) -> web.Application:
    """The aiohttp application serving nsqlookupd's HTTP API; requests that pages of other web
    origins send to change the registrations are refused first (nsqpy's rule, see
    ``nsqpy._internal.origin``). ValueError for an ``--http-allowed-origin`` that is not one."""
    origins = OriginGuard(
        lookupd.opts.http_allowed_origins,
        own_origin=False,
        flag="--http-allowed-origin",
        log=log,
    )
    router = LookupdHttpApi(lookupd).router
    middlewares = [] if origins.allow_any else [origins.middleware]
    return web.Application(middlewares=[*middlewares, router.middleware])

"""nsqd's HTTP API (NSQ v1.3.0 ``nsqd/http.go``): publish, admin, stats, config, debug.

Every handler checks its input in nsqd's order, so a request with several problems gets the
same status and ``{"message":"CODE"}`` as from a Go nsqd (NSQ_FEATURES.md §3.3). Routing,
the V1 envelope and the access log live in ``nsqpy._internal.http_api``; the ``/stats``
snapshot and its renderings in ``nsqpy.nsqd.observe.stats``. Params come only from the query string.
"""

from __future__ import annotations

import gc
import logging
import socket
import time
from typing import TYPE_CHECKING, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from nsqpy._internal import prometheus
from nsqpy._internal.goflag import GoNumError, parse_go_int
from nsqpy._internal.http_api import (
    JSON_NULL,
    ApiError,
    Params,
    QueryParams,
    Router,
    add_pprof_placeholders,
    json_string_list,
    read_limited,
)
from nsqpy._internal.logs import LEVELS
from nsqpy._internal.origin import OriginGuard
from nsqpy.nsqd.core.errors import BrokerError, QueueFull
from nsqpy.nsqd.observe import metrics, stats
from nsqpy.nsqd.observe.alerts import shown_queues
from nsqpy.nsqd.options import TLS_REQUIRED, config_value, parse_log_level, version_string
from nsqpy.nsqd.server.context import Daemon
from nsqpy.nsqd.server.http_auth import HttpAuth
from nsqpy.nsqd.server.http_dead_letters import DeadLetterRoutes
from nsqpy.nsqd.server.http_leases import LeaseRoutes
from nsqpy.protocol.command_reader import parse_mpub
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.errors import ClientError
from nsqpy.protocol.names import is_valid_name
from nsqpy.protocol.text import as_int64

if TYPE_CHECKING:
    from nsqpy.nsqd.core.channel import Channel
    from nsqpy.nsqd.core.topic import Topic

log = logging.getLogger("nsqpy.nsqd")

#: nsqd's boolParams: anything else is "not given" (or, for /mpub binary, true).
_BOOL_PARAMS: Final = {"true": True, "1": True, "false": False, "0": False}
_MS: Final = 1_000_000
_UINT64: Final = 1 << 64
#: Options whose Go default is a nil slice, so an unset value reads back as JSON null.
_NIL_WHEN_EMPTY: Final = frozenset({"e2e_processing_latency_percentiles"})
#: Go's http.Request.ParseForm reads at most this much of a form body.
_MAX_FORM_BODY: Final = 10 << 20


class NsqdHttpApi:
    """The handlers of one nsqd, registered on an httprouter-style ``Router``."""

    def __init__(self, nsqd: Daemon) -> None:
        self.nsqd = nsqd
        self.router = Router(log)
        self._register()

    def _register(self) -> None:
        r = self.router
        r.plain_text("GET", "/ping", self.ping)
        r.v1("GET", "/info", self.info)
        r.v1("POST", "/pub", self.pub, log=False)  # nsqd does not access-log publishes
        r.v1("POST", "/mpub", self.mpub, log=False)
        r.v1("GET", "/stats", self.stats)
        r.add("GET", "/metrics", self.metrics, log=True)  # open, like /stats and /ping
        for action in ("create", "delete", "empty", "pause", "unpause"):
            r.v1("POST", f"/topic/{action}", getattr(self, f"topic_{action}"))
            r.v1("POST", f"/channel/{action}", getattr(self, f"channel_{action}"))
        r.v1("GET", "/config/:opt", self.config)
        r.v1("PUT", "/config/:opt", self.config)
        DeadLetterRoutes(self.nsqd, self._valid_existing_topic, self._existing_channel).register(r)
        LeaseRoutes(self.nsqd, self._existing_channel).register(r)
        self._register_debug()

    def _register_debug(self) -> None:
        r = self.router
        add_pprof_placeholders(r, "nsqd", "/debug/pprof/")
        r.plain_text("PUT", "/debug/setblockrate", self.set_block_rate)
        r.plain_text("POST", "/debug/freememory", self.free_memory)

    # -- shared argument checks -------------------------------------------------------------
    @staticmethod
    def _query(request: web.Request) -> QueryParams:
        query = QueryParams.of(request)
        if query.error is not None:
            log.error("failed to parse request params - %s", query.error)
            raise ApiError(400, "INVALID_REQUEST")
        return query

    def _topic_from_query(self, request: web.Request) -> tuple[QueryParams, Topic]:
        """nsqd's getTopicFromQuery: a valid topic name, created if it does not exist."""
        query = self._query(request)
        name = query.get("topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(name):
            raise ApiError(400, "INVALID_TOPIC")
        return query, self.nsqd.broker.get_topic(name)

    def _existing_topic_name(self, request: web.Request) -> str:
        """The ``topic`` param of the topic admin routes (not validated, as in nsqd)."""
        name = self._query(request).get("topic")
        if name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        return name

    def _get_existing_topic(self, name: str) -> Topic:
        topic = self.nsqd.broker.topics.get(name)
        if topic is None:
            raise ApiError(404, "TOPIC_NOT_FOUND")
        return topic

    def _valid_existing_topic(self, request: web.Request) -> Topic:
        """The ``topic`` param, which must be a valid name (400) of a topic that exists (404)."""
        name = self._existing_topic_name(request)
        if not is_valid_name(name):
            raise ApiError(400, "INVALID_TOPIC")
        return self._get_existing_topic(name)

    def _topic_and_channel(self, request: web.Request) -> tuple[Topic, str]:
        """nsqd's getExistingTopicFromQuery: both names valid, the topic must exist."""
        query = self._query(request)
        topic_name = query.get("topic")
        if topic_name is None:
            raise ApiError(400, "MISSING_ARG_TOPIC")
        if not is_valid_name(topic_name):
            raise ApiError(400, "INVALID_ARG_TOPIC")
        channel_name = query.get("channel")
        if channel_name is None:
            raise ApiError(400, "MISSING_ARG_CHANNEL")
        if not is_valid_name(channel_name):
            raise ApiError(400, "INVALID_ARG_CHANNEL")
        return self._get_existing_topic(topic_name), channel_name

    def _existing_channel(self, request: web.Request) -> Channel:
        topic, name = self._topic_and_channel(request)
        channel = topic.channels.get(name)
        if channel is None:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        return channel

    async def _persisted(self) -> None:
        """nsqd answers a pause or unpause once nsqd.dat holds it (it persists under its lock
        before replying); the write runs off the loop, and a failed one is logged, not answered,
        as nsqd ignores PersistMetadata's error there."""
        self.nsqd.persist_metadata()
        await self.nsqd.metadata_written()

    def _now(self) -> float:
        return self.nsqd.loop.time()

    # -- health and identity ------------------------------------------------------------------
    async def ping(self, request: web.Request, params: Params) -> object:
        health = self.nsqd.health
        if health != "OK":
            raise ApiError(500, health)
        # nsqpy's backlog alerts: still 200 (the node works), but the body says why to look
        return self.nsqd.alerts.ping_text() or health

    async def info(self, request: web.Request, params: Params) -> object:
        nsqd, opts = self.nsqd, self.nsqd.opts
        return {
            "version": NSQ_VERSION,
            "broadcast_address": opts.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": nsqd.http_port,
            "tcp_port": nsqd.tcp_port,
            "start_time": nsqd.start_time,
            "max_heartbeat_interval": opts.max_heartbeat_interval,
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": opts.max_output_buffer_timeout,
            "max_deflate_level": opts.max_deflate_level,
        }

    # -- publishing ---------------------------------------------------------------------------
    async def _committed(self) -> None:
        """Durable mode: answer only once the publish is fsynced (shares the group commit)."""
        if not await self.nsqd.committed():
            raise ApiError(500, "INTERNAL_ERROR")

    def _put(self, topic: Topic, bodies: list[bytes], defer_ns: int = 0) -> None:
        broker = self.nsqd.broker
        now_ns = time.time_ns()
        ids = broker.guid.new_ids(len(bodies), now_ns)
        try:
            topic.put(bodies, ids, now_ns, self._now(), defer_ns / 1e9)
        except QueueFull as err:
            # nsqd never reports a full queue (it spills to disk); until nsqpy does too, the
            # client learns why its message was refused.
            raise ApiError(500, str(err)) from err
        except BrokerError as err:
            raise ApiError(503, "EXITING") from err

    def _defer_ns(self, query: QueryParams) -> int:
        raw = query.get("defer")
        if raw is None:
            return 0
        try:
            millis = parse_go_int(raw, 10)
        except GoNumError:
            raise ApiError(400, "INVALID_DEFER") from None
        # time.Duration(ms) * time.Millisecond wraps around in int64 before the range check.
        deferred = as_int64(millis * _MS % _UINT64)
        if not self.nsqd.opts.defer_allowed(deferred):
            raise ApiError(400, "INVALID_DEFER")
        return deferred

    async def pub(self, request: web.Request, params: Params) -> object:
        max_size = self.nsqd.opts.max_msg_size
        if (request.content_length or 0) > max_size:
            raise ApiError(413, "MSG_TOO_BIG")
        body = await read_limited(request, max_size + 1)
        if len(body) > max_size:
            raise ApiError(413, "MSG_TOO_BIG")
        if not body:
            raise ApiError(400, "MSG_EMPTY")
        query, topic = self._topic_from_query(request)
        defer_ns = self._defer_ns(query)
        self._put(topic, [body], defer_ns)
        await self._committed()
        return "OK"

    async def mpub(self, request: web.Request, params: Params) -> object:
        opts = self.nsqd.opts
        if (request.content_length or 0) > opts.max_body_size:
            raise ApiError(413, "BODY_TOO_BIG")
        query, topic = self._topic_from_query(request)
        raw_binary = query.get("binary")
        binary = False
        if raw_binary is not None:
            binary = _BOOL_PARAMS.get(raw_binary, True)
            if raw_binary not in _BOOL_PARAMS:
                log.warning("deprecated value '%s' used for /mpub binary param", raw_binary)
        if binary:
            bodies = await self._binary_bodies(request)
        else:
            bodies = await self._text_bodies(request)
        self._put(topic, bodies)
        await self._committed()
        return "OK"

    async def _binary_bodies(self, request: web.Request) -> list[bytes]:
        opts = self.nsqd.opts
        # No leading size field here (unlike TCP MPUB); what lies past the declared
        # messages is ignored, as nsqd never reads it.
        body = await read_limited(request, opts.max_body_size)
        try:
            return parse_mpub(body, opts.max_msg_size, opts.max_body_size)
        except ClientError as err:
            raise ApiError(413, err.code.removeprefix("E_")) from err

    async def _text_bodies(self, request: web.Request) -> list[bytes]:
        """Newline-separated messages; empty lines skipped, only the ``\\n`` stripped."""
        opts = self.nsqd.opts
        read_max = opts.max_body_size + 1
        data = await read_limited(request, read_max)
        bodies: list[bytes] = []
        total = 0
        for line in _lines(data):
            total += len(line)
            if total == read_max:
                raise ApiError(413, "BODY_TOO_BIG")
            if line.endswith(b"\n"):
                line = line[:-1]
            if not line:
                continue
            if len(line) > opts.max_msg_size:
                raise ApiError(413, "MSG_TOO_BIG")
            bodies.append(line)
        return bodies

    # -- topics -------------------------------------------------------------------------------
    async def topic_create(self, request: web.Request, params: Params) -> object:
        self._topic_from_query(request)
        return None

    async def topic_delete(self, request: web.Request, params: Params) -> object:
        name = self._existing_topic_name(request)
        self._get_existing_topic(name)
        self.nsqd.disconnect([c.id for c in self.nsqd.broker.delete_topic(name)])
        return None

    async def topic_empty(self, request: web.Request, params: Params) -> object:
        self._valid_existing_topic(request).empty()
        return None

    async def topic_pause(self, request: web.Request, params: Params) -> object:
        topic = self._get_existing_topic(self._existing_topic_name(request))
        topic.pause()
        await self._persisted()
        return None

    async def topic_unpause(self, request: web.Request, params: Params) -> object:
        topic = self._get_existing_topic(self._existing_topic_name(request))
        topic.unpause(self._now())
        await self._persisted()
        return None

    # -- channels -----------------------------------------------------------------------------
    async def channel_create(self, request: web.Request, params: Params) -> object:
        topic, name = self._topic_and_channel(request)
        self.nsqd.broker.get_channel(topic, name, self._now())
        return None

    async def channel_delete(self, request: web.Request, params: Params) -> object:
        topic, name = self._topic_and_channel(request)
        if name not in topic.channels:
            raise ApiError(404, "CHANNEL_NOT_FOUND")
        clients = self.nsqd.broker.delete_channel(topic, name)
        self.nsqd.disconnect([c.id for c in clients])
        return None

    async def channel_empty(self, request: web.Request, params: Params) -> object:
        self._existing_channel(request).empty(self._now())
        return None

    async def channel_pause(self, request: web.Request, params: Params) -> object:
        self._existing_channel(request).pause()
        await self._persisted()
        return None

    async def channel_unpause(self, request: web.Request, params: Params) -> object:
        self._existing_channel(request).unpause(self._now())
        await self._persisted()
        return None

    # -- stats --------------------------------------------------------------------------------
    async def stats(self, request: web.Request, params: Params) -> object:
        query = self._query(request)
        include_clients = _BOOL_PARAMS.get(query.get("include_clients") or "", True)
        include_mem = _BOOL_PARAMS.get(query.get("include_mem") or "", True)
        nsqd = self.nsqd
        snapshot = stats.collect(
            nsqd.broker.topics,
            nsqd.clients,
            query.get("topic") or "",
            query.get("channel") or "",
            include_clients,
        )
        memory = stats.memory_stats() if include_mem else None
        monitor = nsqd.alerts
        shown = shown_queues(snapshot) if monitor.enabled else None
        if query.get("format") == "json":
            return stats.stats_json(
                snapshot,
                version=NSQ_VERSION,
                health=nsqd.health,
                start_time=nsqd.start_time,
                memory=memory,
                alerts=None if shown is None else monitor.stats_json(shown),
            )
        return stats.stats_text(
            snapshot,
            version_line=version_string(),
            health=nsqd.health,
            start_time=nsqd.start_time,
            now_ns=time.time_ns(),
            memory=memory,
            alerts=None if shown is None else monitor.stats_text(shown),
        )

    async def metrics(self, request: web.Request, params: Params) -> web.StreamResponse:
        """Prometheus text format 0.0.4 (``nsqpy.nsqd.observe.metrics``)."""
        nsqd = self.nsqd
        snapshot = stats.collect(nsqd.broker.topics, nsqd.clients, include_clients=False)
        state = metrics.DaemonState(
            version=NSQ_VERSION,
            health=nsqd.health,
            start_time=nsqd.start_time,
            connections=len(nsqd.clients),
            producers=metrics.producer_count(nsqd.clients),
        )
        body = metrics.metrics_text(snapshot, state, nsqd.alerts)
        return web.Response(body=body.encode(), headers={"Content-Type": prometheus.CONTENT_TYPE})

    # -- runtime options ----------------------------------------------------------------------
    async def config(self, request: web.Request, params: Params) -> object:
        name = params["opt"]
        if request.method == "PUT":
            await self._put_config(request, name)
        try:
            value = config_value(self.nsqd.opts, name)
        except KeyError:
            raise ApiError(400, "INVALID_OPTION") from None
        if name in _NIL_WHEN_EMPTY and value == []:
            return JSON_NULL
        return value

    async def _put_config(self, request: web.Request, name: str) -> None:
        read_max = self.nsqd.opts.max_msg_size + 1
        body = await read_limited(request, read_max)
        if len(body) == read_max or not body:
            raise ApiError(413, "INVALID_VALUE")
        opts = self.nsqd.opts
        if name == "nsqlookupd_tcp_addresses":
            self.nsqd.set_lookupd_addresses(json_string_list(body))
        elif name == "log_level":
            try:
                level = parse_log_level(body.decode("utf-8", "surrogateescape"))
            except ValueError:
                raise ApiError(400, "INVALID_VALUE") from None
            opts.log_level = level
            log.setLevel(LEVELS[level])
        else:
            raise ApiError(400, "INVALID_OPTION")

    # -- debug --------------------------------------------------------------------------------
    async def set_block_rate(self, request: web.Request, params: Params) -> object:
        raw = await _form_value(request, "rate")
        try:
            parse_go_int(raw, 10)
        except GoNumError as err:
            atoi = GoNumError("Atoi", err.num, err.reason)
            raise ApiError(400, f"invalid block rate : {atoi}") from None
        # CPython has no block profiler: the rate is accepted and has no effect.
        return None

    async def free_memory(self, request: web.Request, params: Params) -> object:
        gc.collect()
        return None


def _lines(data: bytes) -> list[bytes]:
    """Split after every ``\\n``, keeping it (bufio.ReadBytes('\\n') pieces)."""
    parts = data.split(b"\n")
    out = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


async def _form_value(request: web.Request, key: str) -> str:
    """Go's ``req.FormValue``: a url-encoded body's value first, then the query string's."""
    sources: list[QueryParams] = []
    if request.content_type == "application/x-www-form-urlencoded":
        body = await read_limited(request, _MAX_FORM_BODY)
        sources.append(QueryParams(body.decode("utf-8", "surrogateescape")))
    sources.append(QueryParams.of(request))
    for source in sources:
        value = source.get(key)
        if value is not None:
            return value
    return ""


def make_app(nsqd: Daemon, *, tls: bool = False) -> web.Application:
    """The aiohttp application serving nsqd's HTTP API (``tls``: the HTTPS listener)."""
    stats.install_gc_pause_recorder()
    router = NsqdHttpApi(nsqd).router
    if tls or nsqd.opts.tls_required != TLS_REQUIRED:
        # pages of other web origins may not change anything (nsqpy's rule), checked first so
        # such a request costs no auth query and no body read
        origins = OriginGuard(
            nsqd.opts.http_allowed_origins,
            own_origin=False,
            flag="--http-allowed-origin",
            log=log,
        )
        middlewares = [] if origins.allow_any else [origins.middleware]
        if nsqd.opts.http_auth_required:
            # the Bearer check runs before the router, so an unauthorized body is never read
            middlewares.append(HttpAuth(nsqd).middleware)
        return web.Application(middlewares=[*middlewares, router.middleware])

    @web.middleware
    async def tls_required(request: web.Request, handler: Handler) -> web.StreamResponse:
        # --tls-required=true: the plain HTTP listener only points at the HTTPS one.
        return web.Response(
            status=403,
            text=f'{{"message": "TLS_REQUIRED", "https_port": {nsqd.https_port}}}',
            headers={
                "X-NSQ-Content-Type": "nsq; version=1.0",
                "Content-Type": "application/json; charset=utf-8",
            },
        )

    return web.Application(middlewares=[tls_required])

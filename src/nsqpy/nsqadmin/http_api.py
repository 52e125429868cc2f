"""nsqadmin's HTTP server (NSQ v1.3.0 ``nsqadmin/http.go``): pages, assets, the JSON API.

Every route sits under ``--base-path`` (Go's ``path.Join(basePath, p)``, so the root page of
``/admin`` is ``/admin``). The ``/api/*`` routes answer in the V1 envelope with NSQ's shapes
and codes; most carry ``"message"``: "" or ``WARNING: ...`` when some upstreams failed, while
a query that reached no upstream at all is 502 ``UPSTREAM_ERROR: ...``. Mutating routes are
403 ``FORBIDDEN`` unless the ACL header names an ``--admin-user`` (when any is set), and each
action is posted to ``--notification-http-endpoint``. nsqpy adds ``/api/history``,
``/api/history/topics``, ``/api/alerts`` and ``/api/dead_letter_topics`` (the sampler's
data), and the ``redrive`` and ``config`` actions on nsqd's dead letters (see actions.py):
their answers carry ``"redriven"`` (the letters moved back, summed over the nodes), and an
nsqd's 400 (``INVALID_MESSAGE_TTL: ...``) is answered as that 400, not as a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from aiohttp import web

from nsqpy._internal.http_api import (
    ApiError,
    Params,
    QueryParams,
    Router,
    json_string_list,
    read_limited,
    remote_address,
    respond_plain,
)
from nsqpy._internal.logs import parse_level
from nsqpy._internal.origin import OriginGuard
from nsqpy.nsqadmin import actions, aggregate, graphite, pages
from nsqpy.nsqadmin.cluster import ClusterError, ClusterInfo, Errors, RefusedError
from nsqpy.nsqadmin.context import Admin
from nsqpy.nsqadmin.notify import admin_action
from nsqpy.nsqadmin.options import config_value, normalize_base_path, parse_cidr
from nsqpy.nsqadmin.producers import search
from nsqpy.nsqadmin.sampler import Sampler
from nsqpy.nsqadmin.wire import (
    compress_middleware,
    decode_action,
    decode_body,
    remote_ip_allowed,
)
from nsqpy.protocol.names import is_valid_name

log = logging.getLogger("nsqpy.nsqadmin")

T = TypeVar("T")

#: What PUT /config/:opt reads at most (Go: 1 MiB, plus one byte to detect more).
_CONFIG_READ_MAX: Final = 1024 * 1024 + 1
#: Mutating requests' JSON bodies are small; more than this is not read.
_BODY_READ_MAX: Final = 1024 * 1024
#: ``/api/history/topics``: rates per topic unless ``points`` asks otherwise, and at most.
_SUMMARY_POINTS: Final = 60
_SUMMARY_POINTS_MAX: Final = 600
_PAGES: Final = (
    "/",
    "/topics",
    "/topics/:topic",
    "/topics/:topic/:channel",
    "/nodes",
    "/nodes/:node",
    "/counter",
    "/lookup",
)


class Warnings:
    """The ``messages`` of a Go handler: partial failures, shown as ``WARNING: a; b``."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, errors: Errors) -> None:
        if errors:
            log.warning("%s", errors.text())
            self.messages.append(errors.text())

    def text(self) -> str:
        return "WARNING: " + "; ".join(self.messages) if self.messages else ""


async def upstream(what: str, call: Awaitable[T]) -> T:
    """Await a cluster query; a total failure is Go's 502 ``UPSTREAM_ERROR: <err>``."""
    try:
        return await call
    except ClusterError as err:
        log.error("failed to %s - %s", what, err)
        raise ApiError(502, f"UPSTREAM_ERROR: {err}") from None


class AdminHttpApi:
    """The handlers of one nsqadmin, registered on an httprouter-style ``Router``."""

    def __init__(self, admin: Admin) -> None:
        assert admin.ci is not None and admin.sampler is not None
        self.admin = admin
        self.opts = admin.opts
        self.ci: ClusterInfo = admin.ci
        self.sampler: Sampler = admin.sampler
        self.router = Router(log)
        self._register()

    def bp(self, path: str) -> str:
        return normalize_base_path(self.opts.base_path + path)

    def _register(self) -> None:
        r, bp = self.router, self.bp
        for page in _PAGES:
            r.add("GET", bp(page), self.index)
        r.plain_text("GET", bp("/ping"), self.ping)
        r.add("GET", bp("/static/:asset"), self.asset)
        r.add("GET", bp("/fonts/:asset"), self.asset)
        if self.opts.proxy_graphite:
            r.add("GET", bp("/render"), self.render_proxy)
        r.v1("GET", bp("/api/topics"), self.topics)
        r.v1("GET", bp("/api/topics/:topic"), self.topic)
        r.v1("GET", bp("/api/topics/:topic/:channel"), self.channel)
        r.v1("GET", bp("/api/nodes"), self.nodes)
        r.v1("GET", bp("/api/nodes/:node"), self.node)
        r.v1("POST", bp("/api/topics"), self.create_topic_channel)
        r.v1("POST", bp("/api/topics/:topic"), self.topic_action)
        r.v1("POST", bp("/api/topics/:topic/:channel"), self.channel_action)
        r.v1("DELETE", bp("/api/nodes/:node"), self.tombstone_node_for_topic)
        r.v1("DELETE", bp("/api/topics/:topic"), self.delete_topic)
        r.v1("DELETE", bp("/api/topics/:topic/:channel"), self.delete_channel)
        r.v1("GET", bp("/api/counter"), self.counter)
        r.v1("GET", bp("/api/graphite"), self.graphite)
        r.v1("GET", bp("/api/history"), self.history)
        r.v1("GET", bp("/api/history/topics"), self.history_topics)
        r.v1("GET", bp("/api/alerts"), self.alerts)
        r.v1("GET", bp("/api/dead_letter_topics"), self.dead_letter_topics)
        r.v1("GET", bp("/config/:opt"), self.config)
        r.v1("PUT", bp("/config/:opt"), self.config)

    # -- helpers ------------------------------------------------------------------------------
    @property
    def _lookupds(self) -> list[str]:
        return self.opts.nsqlookupd_http_addresses

    @property
    def _nsqds(self) -> list[str]:
        return self.opts.nsqd_http_addresses

    def is_admin(self, request: web.Request) -> bool:
        """Go's isAuthorizedAdminRequest."""
        users = self.opts.admin_users
        return not users or request.headers.get(self.opts.acl_http_header, "") in users

    def _require_admin(self, request: web.Request) -> None:
        if not self.is_admin(request):
            raise ApiError(403, "FORBIDDEN")

    def _notify(
        self, request: web.Request, action: str, topic: str, channel: str = "", node: str = ""
    ) -> None:
        if self.admin.notifier is not None:
            doc = admin_action(action, topic, channel, node, request, self.admin.clock())
            self.admin.notifier.notify(doc)

    @staticmethod
    async def _body(
        request: web.Request, fields: tuple[str, ...], error: str | None
    ) -> dict[str, str]:
        """The JSON body's fields; 400 with ``error`` (or Go's decode error text)."""
        raw = await read_limited(request, _BODY_READ_MAX)
        try:
            return decode_body(raw, fields)
        except ValueError as err:
            raise ApiError(400, error or str(err)) from None

    # -- pages and assets ---------------------------------------------------------------------
    async def ping(self, request: web.Request, params: Params) -> object:
        return "OK"

    async def index(self, request: web.Request, params: Params) -> web.StreamResponse:
        template = pages.read_asset(self.opts, "index.html")
        if template is None:
            return respond_plain(404, "NOT_FOUND")
        html = pages.render_index(template.decode("utf-8"), self.opts, self.is_admin(request))
        return web.Response(body=html.encode(), headers={"Content-Type": "text/html"})

    async def asset(self, request: web.Request, params: Params) -> web.StreamResponse:
        name = params["asset"]
        body = pages.read_asset(self.opts, name)
        if body is None:
            return respond_plain(404, "NOT_FOUND")
        headers = {}
        if (kind := pages.content_type(name, body)) is not None:
            headers["Content-Type"] = kind
        return web.Response(body=body, headers=headers)

    async def render_proxy(self, request: web.Request, params: Params) -> web.StreamResponse:
        assert self.admin.upstream is not None
        return await graphite.proxy(self.admin.upstream, self.opts.graphite_url, request)

    # -- reads --------------------------------------------------------------------------------
    async def topics(self, request: web.Request, params: Params) -> object:
        query = QueryParams.of(request)
        if query.error is not None:
            raise ApiError(400, query.error)
        warnings = Warnings()
        if self._lookupds:
            names, errors = await upstream("get topics", self.ci.lookupd_topics(self._lookupds))
        else:
            names, errors = await upstream("get topics", self.ci.nsqd_topics(self._nsqds))
        warnings.add(errors)
        if query.get("inactive") == "true":
            inactive = await self._inactive_topics(names or [])
            return {"topics": inactive, "message": warnings.text()}
        return {"topics": names, "message": warnings.text()}

    async def _inactive_topics(self, names: list[str]) -> dict[str, list[str] | None]:
        """Topics lookupd knows with no producer, and their channels (errors ignored, as
        in Go: a topic whose lookup failed everywhere counts as inactive)."""
        inactive: dict[str, list[str] | None] = {}
        if not self._lookupds:
            return inactive
        for name in names:
            try:
                producers, _ = await self.ci.lookupd_topic_producers(name, self._lookupds)
            except ClusterError:
                producers = []
            if not producers:
                try:
                    channels, _ = await self.ci.lookupd_topic_channels(name, self._lookupds)
                except ClusterError:
                    channels = None
                inactive[name] = channels
        return inactive

    async def topic(self, request: web.Request, params: Params) -> object:
        name = params["topic"]
        warnings = Warnings()
        producers, errors = await upstream(
            "get topic producers", self.ci.topic_producers(name, self._lookupds, self._nsqds)
        )
        warnings.add(errors)
        stats, errors = await upstream(
            "get topic metadata",
            self.ci.nsqd_stats(producers, name, "", False, self.admin.clock()),
        )
        warnings.add(errors)
        channels = list(stats.channels.values()) or None
        total = aggregate.topic_aggregate(name, stats.topics, channels)
        return {**total, "message": warnings.text()}

    async def channel(self, request: web.Request, params: Params) -> object:
        topic, channel = params["topic"], params["channel"]
        warnings = Warnings()
        producers, errors = await upstream(
            "get topic producers", self.ci.topic_producers(topic, self._lookupds, self._nsqds)
        )
        warnings.add(errors)
        stats, errors = await upstream(
            "get channel metadata",
            self.ci.nsqd_stats(producers, topic, channel, True, self.admin.clock()),
        )
        warnings.add(errors)
        found: dict[str, Any] = stats.channels.get(channel) or {}  # Go: a nil embedded struct
        return {**found, "message": warnings.text()}

    async def nodes(self, request: web.Request, params: Params) -> object:
        warnings = Warnings()
        producers, errors = await upstream(
            "get nodes", self.ci.producers(self._lookupds, self._nsqds)
        )
        warnings.add(errors)
        return {"nodes": [p.to_json() for p in producers] or None, "message": warnings.text()}

    async def node(self, request: web.Request, params: Params) -> object:
        name = params["node"]
        warnings = Warnings()
        producers, errors = await upstream(
            "get producers", self.ci.producers(self._lookupds, self._nsqds)
        )
        warnings.add(errors)
        producer = search(producers, name)
        if producer is None:
            raise ApiError(404, "NODE_NOT_FOUND")
        stats, _ = await upstream(
            "get nsqd stats", self.ci.nsqd_stats([producer], "", "", True, self.admin.clock())
        )
        total_messages, total_clients = aggregate.node_totals(stats.topics)
        return {
            "node": name,
            "topics": stats.topics or None,
            "total_messages": total_messages,
            "total_clients": total_clients,
            "message": warnings.text(),
        }

    async def counter(self, request: web.Request, params: Params) -> object:
        warnings = Warnings()
        producers, errors = await upstream(
            "get counter producer list", self.ci.producers(self._lookupds, self._nsqds)
        )
        warnings.add(errors)
        stats, errors = await upstream(
            "get nsqd stats", self.ci.nsqd_stats(producers, "", "", False, self.admin.clock())
        )
        warnings.add(errors)
        return {"stats": aggregate.counter_stats(stats.channels), "message": warnings.text()}

    async def graphite(self, request: web.Request, params: Params) -> object:
        assert self.admin.upstream is not None
        return await graphite.rate(self.admin.upstream, self.opts, request)

    async def history(self, request: web.Request, params: Params) -> object:
        query = QueryParams.of(request)
        if query.error is not None:
            raise ApiError(400, "INVALID_REQUEST")
        points = self.sampler.history.points(
            query.get("topic") or None, query.get("channel") or None, query.get("node") or None
        )
        message = self.sampler.message
        return {"interval": self.sampler.interval, "points": points, "message": message}

    async def history_topics(self, request: web.Request, params: Params) -> object:
        """Every topic's newest numbers and recent rates at once (the topics list)."""
        query = QueryParams.of(request)
        if query.error is not None:
            raise ApiError(400, "INVALID_REQUEST")
        limit = _SUMMARY_POINTS
        if raw := query.get("points"):
            if not raw.isdigit() or not 1 <= int(raw) <= _SUMMARY_POINTS_MAX:
                raise ApiError(400, "INVALID_POINTS")
            limit = int(raw)
        topics = self.sampler.history.topic_summaries(limit)
        message = self.sampler.message
        return {"interval": self.sampler.interval, "topics": topics, "message": message}

    async def alerts(self, request: web.Request, params: Params) -> object:
        return {"alerts": self.sampler.all_alerts(), "message": self.sampler.message}

    async def dead_letter_topics(self, request: web.Request, params: Params) -> object:
        return {"topics": self.sampler.dead_letters, "message": self.sampler.message}

    # -- actions ------------------------------------------------------------------------------
    async def tombstone_node_for_topic(self, request: web.Request, params: Params) -> object:
        self._require_admin(request)
        node = params["node"]
        body = await self._body(request, ("topic",), "INVALID_BODY")
        if not is_valid_name(body["topic"]):
            raise ApiError(400, "INVALID_TOPIC")
        warnings = Warnings()
        warnings.add(
            await upstream(
                "tombstone node for topic",
                actions.tombstone_node_for_topic(self.ci, body["topic"], node, self._lookupds),
            )
        )
        self._notify(request, "tombstone_topic_producer", body["topic"], node=node)
        return {"message": warnings.text()}

    async def create_topic_channel(self, request: web.Request, params: Params) -> object:
        self._require_admin(request)
        body = await self._body(request, ("topic", "channel"), None)
        topic, channel = body["topic"], body["channel"]
        if not is_valid_name(topic):
            raise ApiError(400, "INVALID_TOPIC")
        if channel and not is_valid_name(channel):
            raise ApiError(400, "INVALID_CHANNEL")
        warnings = Warnings()
        warnings.add(
            await upstream(
                "create topic/channel",
                actions.create_topic_channel(self.ci, topic, channel, self._lookupds),
            )
        )
        self._notify(request, "create_topic", topic)
        if channel:
            self._notify(request, "create_channel", topic, channel)
        return {"message": warnings.text()}

    async def delete_topic(self, request: web.Request, params: Params) -> object:
        self._require_admin(request)
        topic = params["topic"]
        warnings = Warnings()
        warnings.add(
            await upstream(
                "delete topic",
                actions.delete_topic(self.ci, topic, self._lookupds, self._nsqds),
            )
        )
        self._notify(request, "delete_topic", topic)
        return {"message": warnings.text()}

    async def delete_channel(self, request: web.Request, params: Params) -> object:
        self._require_admin(request)
        topic, channel = params["topic"], params["channel"]
        warnings = Warnings()
        warnings.add(
            await upstream(
                "delete channel",
                actions.delete_channel(self.ci, topic, channel, self._lookupds, self._nsqds),
            )
        )
        self._notify(request, "delete_channel", topic, channel)
        return {"message": warnings.text()}

    async def topic_action(self, request: web.Request, params: Params) -> object:
        return await self._topic_channel_action(request, params["topic"], "")

    async def channel_action(self, request: web.Request, params: Params) -> object:
        return await self._topic_channel_action(request, params["topic"], params["channel"])

    async def _topic_channel_action(self, request: web.Request, topic: str, channel: str) -> object:
        self._require_admin(request)
        action, rest = await self._action_body(request)
        lookupds, nsqds, ci = self._lookupds, self._nsqds, self.ci
        outcome: dict[str, object] = {}
        if action in actions.ACTIONS:
            call = actions.topic_channel_action(ci, action, topic, channel, lookupds, nsqds)
            errors = await self._fan_out(request, action, topic, channel, call)
        elif action == "redrive":
            moved = actions.redrive(ci, topic, channel, lookupds, nsqds)
            outcome["redriven"], errors = await self._fan_out(
                request, action, topic, channel, moved
            )
        elif action == "config":
            body = self._settings_body(rest)
            call = actions.configure(ci, topic, channel, body, lookupds, nsqds)
            errors = await self._fan_out(request, action, topic, channel, call)
        else:
            raise ApiError(400, "INVALID_ACTION")
        warnings = Warnings()
        warnings.add(errors)
        return {**outcome, "message": warnings.text()}

    @staticmethod
    async def _action_body(request: web.Request) -> tuple[str, dict[str, object]]:
        raw = await read_limited(request, _BODY_READ_MAX)
        try:
            return decode_action(raw)
        except ValueError as err:
            raise ApiError(400, str(err)) from None

    @staticmethod
    def _settings_body(settings: dict[str, object]) -> bytes:
        try:
            return actions.settings_body(settings)
        except ValueError as err:
            raise ApiError(400, f"INVALID_BODY: {err}") from None

    async def _fan_out(
        self, request: web.Request, action: str, topic: str, channel: str, call: Awaitable[T]
    ) -> T:
        """Await an action's fan-out and notify (Go notifies before it looks at the outcome);
        no producer found is 502 UPSTREAM_ERROR, an nsqd's refusal its own 400."""
        try:
            return await call
        except RefusedError as err:
            raise ApiError(400, str(err)) from None
        except ClusterError as err:
            log.error("failed to %s topic/channel - %s", action, err)
            raise ApiError(502, f"UPSTREAM_ERROR: {err}") from None
        finally:
            self._notify(request, actions.notification_name(action, channel), topic, channel)

    # -- runtime options ----------------------------------------------------------------------
    async def config(self, request: web.Request, params: Params) -> object:
        name = params["opt"]
        self._check_config_remote(request)
        if request.method == "PUT":
            await self._put_config(request, name)
        try:
            return config_value(self.opts, name)
        except KeyError:
            raise ApiError(400, "INVALID_OPTION") from None

    def _check_config_remote(self, request: web.Request) -> None:
        cidr = self.opts.allow_config_from_cidr
        if not cidr:
            return
        remote = remote_address(request)
        try:
            allowed = remote_ip_allowed(remote, parse_cidr(cidr))
        except ValueError:
            log.error("failed to parse RemoteAddr %s", remote)
            raise ApiError(400, "INVALID_REMOTE_ADDR") from None
        if not allowed:
            raise ApiError(403, "FORBIDDEN")

    async def _put_config(self, request: web.Request, name: str) -> None:
        body = await read_limited(request, _CONFIG_READ_MAX)
        if len(body) == _CONFIG_READ_MAX or not body:
            raise ApiError(413, "INVALID_VALUE")
        if name == "nsqlookupd_http_addresses":
            self.opts.nsqlookupd_http_addresses = json_string_list(body)
        elif name == "log_level":
            try:
                level = parse_level(body.decode("utf-8", "surrogateescape"))
            except ValueError:
                raise ApiError(400, "INVALID_VALUE") from None
            self.admin.set_log_level(level)
        else:
            raise ApiError(400, "INVALID_OPTION")


def make_app(admin: Admin) -> web.Application:
    """The aiohttp application serving nsqadmin (compression wraps the router); actions
    asked for by pages of other web origins are refused before the router (nsqpy's rule)."""
    router = AdminHttpApi(admin).router
    origins = OriginGuard(
        admin.opts.http_allowed_origins,
        own_origin=True,
        flag="--http-allowed-origin",
        log=log,
    )
    middlewares = [compress_middleware, router.middleware]
    if not origins.allow_any:
        middlewares.insert(1, origins.middleware)
    return web.Application(middlewares=middlewares)

"""nsqpy's HTTP routes for leases (``nsqpy.nsqd.core.lease``); not in nsqd.

``POST /channel/lease?topic=T&channel=C&lease=L&count=N[&bytes=B][&wait=D][&ttl=D][&reserve=true]``
takes (or, for a lease that exists, gives back) the lease ``L`` of the channel::

    {"lease":"L","messages":[{"id":"0a1b...","attempts":1,"timestamp":1700000000000000000,
      "body":"aGVsbG8="}],"count":1,"bytes":5}

``id`` is the message id as NSQ writes it (16 hex characters), ``timestamp`` unix ns, ``body``
base64. With ``reserve=true`` the answer is ``{"lease":"L","count":N,"bytes":B}``: the lease is
taken and sealed all the same, so a planner can size a batch that its executors then fetch.
``count`` (1 to ``--max-rdy-count``) is needed for a new lease; ``bytes`` (0: no limit) caps
the bodies' total; both may be left out when asking for a lease that exists, and must match
it when given. ``wait`` (a Go duration, default 0, at most ``--max-msg-timeout``) is how long
a new lease may wait for messages before it is sealed with what came; ``ttl`` (a Go duration,
default ``--lease-ttl``, at most ``--max-msg-timeout``) how long it then has to be finished.

``POST /channel/lease/fin?topic=T&channel=C&lease=L`` finishes every message of the lease;
``POST /channel/lease/req?topic=T&channel=C&lease=L[&delay=D]`` requeues them (after ``delay``,
a Go duration capped like a REQ by ``--max-req-timeout``). Both answer an empty 200, again
for a repeat.

Errors are nsqd's ``{"message":"CODE"}``: the topic and channel checks of ``/channel/*``
(``MISSING_ARG_TOPIC``, ``INVALID_ARG_CHANNEL``, 404 ``TOPIC_NOT_FOUND``,
``CHANNEL_NOT_FOUND``, ...), then 400 ``EPHEMERAL_CHANNEL``, ``MISSING_ARG_LEASE``,
``INVALID_LEASE``, ``INVALID_COUNT``, ``MISSING_ARG_COUNT``, ``INVALID_BYTES``,
``INVALID_WAIT``, ``INVALID_TTL``, ``INVALID_DELAY``, ``INVALID_RESERVE``, ``LEASE_MISMATCH``
(other count or bytes than the lease's), ``LEASE_FINISHED`` / ``LEASE_REQUEUED`` (the lease is
closed that way), and 404 ``LEASE_NOT_FOUND``. A refused request changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Final

from aiohttp import web

from nsqpy._internal.duration import SECOND, parse_go_duration
from nsqpy._internal.http_api import ApiError, Params, QueryParams, Router
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.lease import Lease, LeaseBook, LeaseError, is_valid_lease_name
from nsqpy.nsqd.server.context import Daemon

_NOT_FOUND: Final = frozenset({"LEASE_NOT_FOUND"})
_BOOLS: Final = {"true": True, "1": True, "false": False, "0": False}
_MAX_BYTES: Final = 1 << 62


class LeaseRoutes:
    """The routes, behind the nsqd API's own channel check (``channel_of``: the request's
    existing channel, or the API's 400/404)."""

    def __init__(self, nsqd: Daemon, channel_of: Callable[[web.Request], Channel]) -> None:
        self.nsqd = nsqd
        self._channel_of = channel_of

    def register(self, router: Router) -> None:
        router.v1("POST", "/channel/lease", self.lease)
        router.v1("POST", "/channel/lease/fin", self.finish)
        router.v1("POST", "/channel/lease/req", self.requeue)

    def _target(self, request: web.Request) -> tuple[Channel, QueryParams, str]:
        channel = self._channel_of(request)
        if channel.ephemeral:
            raise ApiError(400, "EPHEMERAL_CHANNEL")
        query = QueryParams.of(request)
        name = query.get("lease")
        if name is None:
            raise ApiError(400, "MISSING_ARG_LEASE")
        if not is_valid_lease_name(name):
            raise ApiError(400, "INVALID_LEASE")
        return channel, query, name

    def _now(self) -> float:
        return self.nsqd.loop.time()

    async def lease(self, request: web.Request, params: Params) -> object:
        channel, query, name = self._target(request)
        opts = self.nsqd.opts
        count = _int(query, "count", "INVALID_COUNT", 1, opts.max_rdy_count)
        max_bytes = _int(query, "bytes", "INVALID_BYTES", 0, _MAX_BYTES)
        wait = _seconds(query, "wait", "INVALID_WAIT", opts.max_msg_timeout, 0)
        ttl = _seconds(
            query,
            "ttl",
            "INVALID_TTL",
            opts.max_msg_timeout,
            min(opts.lease_ttl, opts.max_msg_timeout),
        )
        reserve = _BOOLS.get(query.get("reserve") or "false")
        if reserve is None:
            raise ApiError(400, "INVALID_RESERVE")
        if ttl <= 0:
            raise ApiError(400, "INVALID_TTL")
        book = LeaseBook.of(channel)
        try:
            lease = book.lease(name, count, max_bytes, ttl=ttl, wait=wait, now=self._now())
        except LeaseError as err:
            raise _api_error(err) from None
        if not lease.sealed:
            await self._sealed(book, lease)
        await self._durable(lease)
        return _lease_doc(lease, reserve=reserve)

    async def _durable(self, lease: Lease) -> None:
        """--durable: answer once the lease journal's record of the seal, FIN or REQ is on
        stable storage (the group commit after it); at once otherwise."""
        if not await self.nsqd.committed() or not lease.recorded:
            raise ApiError(500, "INTERNAL_ERROR")

    async def _sealed(self, book: LeaseBook, lease: Lease) -> None:
        """Wait until ``lease`` is sealed: full (the queue scan fills it), or its wait over."""
        loop = self.nsqd.loop
        woken = loop.create_future()

        def wake(_: Lease) -> None:
            if not woken.done():
                woken.set_result(None)

        lease.waiters.append(wake)
        try:
            async with asyncio.timeout(max(lease.fill_until - loop.time(), 0.0)):
                await woken
        except TimeoutError:
            book.seal(lease, loop.time())
        if not lease.sealed:  # the channel went meanwhile
            raise ApiError(404, "LEASE_NOT_FOUND")

    async def finish(self, request: web.Request, params: Params) -> object:
        channel, _, name = self._target(request)
        try:
            lease = _book(channel).finish(name, self._now())
        except LeaseError as err:
            raise _api_error(err) from None
        await self._durable(lease)
        return None

    async def requeue(self, request: web.Request, params: Params) -> object:
        channel, query, name = self._target(request)
        delay = _seconds(query, "delay", "INVALID_DELAY", self.nsqd.opts.max_req_timeout, 0)
        try:
            lease = _book(channel).requeue(name, delay, self._now())
        except LeaseError as err:
            raise _api_error(err) from None
        await self._durable(lease)
        return None


def _book(channel: Channel) -> LeaseBook:
    if channel.leases is None:
        raise LeaseError("LEASE_NOT_FOUND")
    return LeaseBook.of(channel)


def _api_error(err: LeaseError) -> ApiError:
    return ApiError(404 if err.code in _NOT_FOUND else 400, err.code)


def _int(query: QueryParams, key: str, code: str, low: int, high: int) -> int | None:
    text = query.get(key)
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise ApiError(400, code)
    return int(text)


def _seconds(query: QueryParams, key: str, code: str, high_ns: int, default_ns: int) -> float:
    """A Go duration parameter in 0..``high_ns``, as seconds (the loop's clock)."""
    text = query.get(key)
    if text is None:
        return default_ns / SECOND
    try:
        value = parse_go_duration(text)
    except ValueError:
        raise ApiError(400, code) from None
    if not 0 <= value <= high_ns:
        raise ApiError(400, code)
    return value / SECOND


def _lease_doc(lease: Lease, *, reserve: bool) -> dict[str, object]:
    if reserve:
        return {"lease": lease.name, "count": len(lease.messages), "bytes": lease.size}
    return {
        "lease": lease.name,
        "messages": [
            {
                "id": msg.id.decode("ascii"),
                "attempts": msg.attempts,
                "timestamp": msg.timestamp,
                "body": base64.b64encode(msg.body).decode("ascii"),
            }
            for msg in lease.messages
        ],
        "count": len(lease.messages),
        "bytes": lease.size,
    }

"""nsqpy's HTTP routes for dead letters and TTL (``nsqpy.nsqd.core.policy``); not in nsqd.

``GET|POST /topic/config?topic=T`` and ``GET|POST /channel/config?topic=T&channel=C``
answer with the topic's or channel's own settings (``null`` where inherited) and, under
``effective``, what applies (for a topic: to a channel of it with no settings of its own)::

    {"topic_name":"T","channel_name":"C","max_attempts":5,"message_ttl":null,
     "dead_letter_topic":null,
     "effective":{"max_attempts":5,"message_ttl":"1h0m0s","dead_letter_topic":"T.dead"}}

A POST body is a JSON object with any of ``max_attempts``, ``message_ttl`` (a Go duration
string) and ``dead_letter_topic``; ``null`` removes a setting. It is all taken or, with a 400
``{"message":"<CODE>: <why>"}``, none of it. Settings are written to nsqd.dat at once.

``POST /channel/redrive?topic=T&channel=C`` moves the channel's letters from its dead-letter
topic back into it; ``POST /topic/redrive?topic=D`` moves every letter of ``D`` back to the
channel it came from. Both answer ``{"dead_letter_topic":D,"redriven":N,"kept":M}``.

The topic and channel checks and their errors are those of nsqd's ``/topic/*`` and
``/channel/*`` routes, so ``--http-auth-required`` covers these routes too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from aiohttp import web

from nsqpy._internal.http_api import ApiError, Params, Router, read_limited
from nsqpy.nsqd.core import policy
from nsqpy.nsqd.core.channel import Channel
from nsqpy.nsqd.core.errors import BrokerError
from nsqpy.nsqd.core.topic import Topic
from nsqpy.nsqd.server.context import Daemon

log = logging.getLogger("nsqpy.nsqd")

#: A settings body is a handful of keys.
_BODY_MAX: Final = 64 * 1024


class DeadLetterRoutes:
    """The routes, using the nsqd API's own argument checks (``topic_of``, ``channel_of``:
    the request's existing topic or channel, or the API's 400/404)."""

    def __init__(
        self,
        nsqd: Daemon,
        topic_of: Callable[[web.Request], Topic],
        channel_of: Callable[[web.Request], Channel],
    ) -> None:
        self.nsqd = nsqd
        self._topic_of = topic_of
        self._channel_of = channel_of

    def register(self, router: Router) -> None:
        for method in ("GET", "POST"):
            router.v1(method, "/topic/config", self.topic_config)
            router.v1(method, "/channel/config", self.channel_config)
        router.v1("POST", "/topic/redrive", self.topic_redrive)
        router.v1("POST", "/channel/redrive", self.channel_redrive)

    # -- settings -------------------------------------------------------------------------------
    async def topic_config(self, request: web.Request, params: Params) -> object:
        topic = self._topic_of(request)
        broker = self.nsqd.broker
        if request.method == "POST":
            changes = await _changes(request, topic.name)
            try:
                broker.set_topic_settings(topic, changes)
            except policy.SettingsError as err:
                raise ApiError(400, str(err)) from None
            self.nsqd.persist_metadata()
            await self.nsqd.metadata_written()  # answered once it is on disk
        return {
            "topic_name": topic.name,
            **topic.settings.to_json(),
            "effective": broker.effective(topic, policy.Settings()).to_json(),
        }

    async def channel_config(self, request: web.Request, params: Params) -> object:
        channel = self._channel_of(request)
        if request.method == "POST":
            changes = await _changes(request, channel.topic_name)
            try:
                self.nsqd.broker.set_channel_settings(channel, changes)
            except policy.SettingsError as err:
                raise ApiError(400, str(err)) from None
            self.nsqd.persist_metadata()
            await self.nsqd.metadata_written()  # answered once it is on disk
        return channel_config_doc(channel)

    # -- redrive --------------------------------------------------------------------------------
    async def topic_redrive(self, request: web.Request, params: Params) -> object:
        return await self._redrive(self._topic_of(request).name, None)

    async def channel_redrive(self, request: web.Request, params: Params) -> object:
        channel = self._channel_of(request)
        target = channel.dead_letter_topic or policy.default_dead_letter_topic(
            channel.topic_name, self.nsqd.opts.dead_letter_suffix
        )
        return await self._redrive(target, f"{channel.topic_name}:{channel.name}")

    async def _redrive(self, target: str, origin: str | None) -> object:
        try:
            job = await self.nsqd.redrive(target, origin) if target else None
        except (BrokerError, OSError) as err:
            log.error("redrive of %s failed - %s", target, err)
            raise ApiError(500, f"REDRIVE_FAILED: {err}") from None
        redriven, kept = (job.redriven, job.kept) if job is not None else (0, 0)
        if redriven:
            log.info("redrive: %d messages from %s back to %s", redriven, target, origin or "*")
        return {"dead_letter_topic": target, "redriven": redriven, "kept": kept}


def channel_config_doc(channel: Channel) -> dict[str, object]:
    return {
        "topic_name": channel.topic_name,
        "channel_name": channel.name,
        **channel.settings.to_json(),
        "effective": channel.effective.to_json(),
    }


async def _changes(request: web.Request, topic: str) -> dict[str, object]:
    body = await read_limited(request, _BODY_MAX + 1)
    if len(body) > _BODY_MAX:
        raise ApiError(413, "BODY_TOO_BIG")
    try:
        return policy.parse_update(body, topic)
    except policy.SettingsError as err:
        raise ApiError(400, str(err)) from None

"""Admin-action notifications (NSQ ``nsqadmin/notify.go``): JSON POSTed to an endpoint.

``admin_action`` builds NSQ's AdminAction document from the request; ``Notifier`` POSTs them
one at a time from a single task, so an action never waits for the endpoint. Go queues each
notification on a goroutine of its own; here the queue is bounded and a notification that
finds it full is dropped with an error log instead of piling up behind a dead endpoint.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import socket
from typing import Final

import aiohttp
from aiohttp import web

from nsqpy._internal import gojson
from nsqpy._internal.http_api import remote_address

log = logging.getLogger("nsqpy.nsqadmin")

#: Notifications waiting to be POSTed before new ones are dropped.
QUEUE_LIMIT: Final = 1000


def basic_auth_user(request: web.Request) -> str:
    """The user name of an ``Authorization: Basic`` header, or "" (Go's basicAuthUser)."""
    scheme, space, encoded = request.headers.get("Authorization", "").partition(" ")
    if scheme != "Basic" or not space:
        return ""
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8", "surrogateescape")
    except (binascii.Error, ValueError):
        return ""
    user, colon, _password = decoded.partition(":")
    return user if colon else ""


def request_url(request: web.Request) -> str:
    """The URL that triggered the action, rebuilt from Host, path and query as Go does."""
    scheme = "https" if request.secure or request.headers.get("X-Scheme") == "https" else "http"
    path, sep, query = request.raw_path.partition("?")
    return f"{scheme}://{request.host}{path}{sep if query else ''}{query}"


def admin_action(
    action: str, topic: str, channel: str, node: str, request: web.Request, now: float
) -> dict[str, object]:
    """NSQ's AdminAction JSON, fields in its order (channel, node and user omitted if "")."""
    doc: dict[str, object] = {"action": action, "topic": topic}
    if channel:
        doc["channel"] = channel
    if node:
        doc["node"] = node
    doc["timestamp"] = int(now)
    if user := basic_auth_user(request):
        doc["user"] = user
    doc["remote_ip"] = remote_address(request)
    doc["user_agent"] = request.headers.get("User-Agent", "")
    doc["url"] = request_url(request)
    doc["via"] = socket.gethostname()
    return doc


class Notifier:
    """POSTs queued notifications to ``endpoint`` from one task (started lazily)."""

    def __init__(
        self, endpoint: str, session: aiohttp.ClientSession, limit: int = QUEUE_LIMIT
    ) -> None:
        self.endpoint = endpoint
        self.session = session
        self.dropped = 0
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(limit)
        self._task: asyncio.Task[None] | None = None

    def notify(self, doc: dict[str, object]) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="nsqadmin-notifier")
        try:
            self._queue.put_nowait(gojson.dumps(doc))
        except asyncio.QueueFull:
            self.dropped += 1
            log.error("failed to queue notification - %d already waiting", self._queue.maxsize)

    async def _run(self) -> None:
        while True:
            body = await self._queue.get()
            log.info("POSTing notification to %s", self.endpoint)
            try:
                async with self.session.post(
                    self.endpoint, data=body, headers={"Content-Type": "application/json"}
                ) as resp:
                    await resp.read()
            except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                log.error("failed to POST notification - %s", err)
            finally:
                self._queue.task_done()

    async def close(self, grace: float) -> None:
        """Give queued notifications ``grace`` seconds to go out, then stop."""
        if self._task is None:
            return
        try:
            async with asyncio.timeout(grace):
                await self._queue.join()
        except TimeoutError:
            log.error("dropping %d unsent notifications", self._queue.qsize())
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

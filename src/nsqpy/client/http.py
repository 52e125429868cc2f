"""nsqd's HTTP API from the client side: publish without a TCP connection, read /stats, create
topics and channels, and manage nsqpy's dead letters, message TTL and redrive."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Self

import aiohttp

from nsqpy.client.closing import AsyncClosing
from nsqpy.client.dead_letters import TTL, UNSET, QueueConfig, RedriveResult, Unset, settings_body
from nsqpy.client.errors import NSQError, ServerError
from nsqpy.protocol.commands import mpub_body

#: nsqd's error words: ``TOPIC_NOT_FOUND``, ``INVALID_MESSAGE_TTL``.
_CODE = re.compile(r"[A-Z][A-Z0-9_]*")


class HTTPError(ServerError):
    """nsqd answered with a non-200 status.

    ``message`` is nsqd's whole message; ``code`` its leading word (``TOPIC_NOT_FOUND``, or
    ``INVALID_MESSAGE_TTL`` for ``"INVALID_MESSAGE_TTL: message_ttl must be ..."``), so callers
    can match on it without parsing; ``str(err)`` shows the whole message and the status.
    """

    def __init__(self, status: int, message: str) -> None:
        code, sep, reason = message.partition(": ")
        if not (sep and _CODE.fullmatch(code)):
            code, reason = message, ""
        super().__init__(code, f"{reason} (HTTP {status})".lstrip())
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} (HTTP {self.status})"


class NsqdHTTPClient(AsyncClosing):
    """One nsqd's HTTP API: ``/pub``, ``/mpub`` (binary), deferred ``/pub``, ``/stats``, topic
    and channel creation, and nsqpy's ``/topic/config``, ``/channel/config`` and redrive."""

    def __init__(
        self, address: str, *, session: aiohttp.ClientSession | None = None, timeout: float = 5.0
    ) -> None:
        self.base = address if "://" in address else f"http://{address}"
        self._own_session = session is None
        self._session = session or aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout)
        )

    async def __aenter__(self) -> Self:
        return self

    async def close(self) -> None:
        if self._own_session:
            await self._session.close()

    async def publish(self, topic: str, body: bytes, *, defer: float | None = None) -> None:
        params = {"topic": topic}
        if defer is not None:
            params["defer"] = str(round(defer * 1000))
        await self._post("/pub", params, body)

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        # binary mode (the same count + sized bodies as TCP MPUB): bodies may contain newlines
        await self._post("/mpub", {"topic": topic, "binary": "true"}, mpub_body(bodies))

    async def stats(self, topic: str = "", channel: str = "") -> dict[str, Any]:
        params = {"format": "json"}
        if topic:
            params["topic"] = topic
        if channel:
            params["channel"] = channel
        data = await self._request("GET", "/stats", params, None)
        doc: dict[str, Any] = json.loads(data)
        return doc

    async def create_topic(self, topic: str) -> None:
        await self._post("/topic/create", {"topic": topic}, b"")

    async def create_channel(self, topic: str, channel: str) -> None:
        """Create the channel and its topic now, e.g. to configure it before consumers come."""
        # nsqd's /channel/create answers TOPIC_NOT_FOUND for a new topic; /topic/create is a
        # no-op for an existing one, so the pair always works
        await self.create_topic(topic)
        await self._post("/channel/create", {"topic": topic, "channel": channel}, b"")

    # -- dead letters and TTL (nsqpy's nsqd only) -----------------------------------------------

    async def topic_config(self, topic: str) -> QueueConfig:
        return await self._config("GET", "/topic/config", {"topic": topic}, None)

    async def channel_config(self, topic: str, channel: str) -> QueueConfig:
        params = {"topic": topic, "channel": channel}
        return await self._config("GET", "/channel/config", params, None)

    async def set_topic_config(
        self,
        topic: str,
        *,
        max_attempts: int | Unset | None = UNSET,
        message_ttl: TTL | Unset | None = UNSET,
        dead_letter_topic: str | Unset | None = UNSET,
    ) -> QueueConfig:
        """Set the topic's defaults for its channels; a keyword left out keeps its setting,
        ``None`` clears it. ``message_ttl`` is seconds, a timedelta or Go text ("1h30m")."""
        body = settings_body(max_attempts, message_ttl, dead_letter_topic)
        return await self._config("POST", "/topic/config", {"topic": topic}, body)

    async def set_channel_config(
        self,
        topic: str,
        channel: str,
        *,
        max_attempts: int | Unset | None = UNSET,
        message_ttl: TTL | Unset | None = UNSET,
        dead_letter_topic: str | Unset | None = UNSET,
    ) -> QueueConfig:
        """Set the channel's own settings, as ``set_topic_config`` does the topic's."""
        body = settings_body(max_attempts, message_ttl, dead_letter_topic)
        params = {"topic": topic, "channel": channel}
        return await self._config("POST", "/channel/config", params, body)

    async def redrive(self, topic: str, channel: str | None = None) -> RedriveResult:
        """Move dead letters back: with ``channel``, the letters of that channel of ``topic``
        from its dead-letter topic; without, every letter of the dead-letter topic ``topic``
        back to the channel each came from."""
        if channel is None:
            path, params = "/topic/redrive", {"topic": topic}
        else:
            path, params = "/channel/redrive", {"topic": topic, "channel": channel}
        doc = json.loads(await self._request("POST", path, params, b""))
        return RedriveResult.from_json(doc)

    async def _config(
        self, method: str, path: str, params: dict[str, str], body: dict[str, object] | None
    ) -> QueueConfig:
        data = None if body is None else json.dumps(body).encode()
        return QueueConfig.from_json(json.loads(await self._request(method, path, params, data)))

    async def _post(self, path: str, params: dict[str, str], body: bytes) -> None:
        await self._request("POST", path, params, body)

    async def _request(
        self, method: str, path: str, params: dict[str, str], body: bytes | None
    ) -> bytes:
        try:
            async with self._session.request(
                method, self.base + path, params=params, data=body
            ) as resp:
                data = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise NSQError(f"{self.base}{path}: {exc!r}") from exc
        if resp.status != 200:
            raise HTTPError(resp.status, _message(data))
        return data


def _message(data: bytes) -> str:
    try:
        doc = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace").strip()
    if isinstance(doc, dict):
        return str(doc.get("message") or doc.get("status_txt") or doc)
    return str(doc)

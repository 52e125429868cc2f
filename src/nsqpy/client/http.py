"""nsqd's HTTP API from the client side: publish without a TCP connection, read /stats."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Self

import aiohttp

from nsqpy.client.closing import AsyncClosing
from nsqpy.client.errors import NSQError, ServerError
from nsqpy.protocol.commands import mpub_body


class HTTPError(ServerError):
    """nsqd answered with a non-200 status; ``code`` is its message (e.g. ``TOPIC_NOT_FOUND``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, f"(HTTP {status})")
        self.status = status


class NsqdHTTPClient(AsyncClosing):
    """``/pub``, ``/mpub`` (binary), deferred ``/pub`` and ``/stats`` on one nsqd."""

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

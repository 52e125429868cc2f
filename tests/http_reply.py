"""Raw HTTP calls for the daemons' API tests: paths sent exactly as written, replies kept whole."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

JSON_CT = "application/json; charset=utf-8"
TEXT_CT = "text/plain; charset=utf-8"
V1 = "nsq; version=1.0"


@dataclass
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def v1_json(self) -> Any:
        """The JSON body of a V1 reply, checking the envelope headers on the way."""
        assert self.headers["X-NSQ-Content-Type"] == V1
        assert self.headers["Content-Type"] == JSON_CT
        return self.json

    @property
    def message(self) -> str:
        """The code of a V1 error body."""
        doc = self.v1_json
        assert list(doc) == ["message"]
        return str(doc["message"])

    def is_empty_v1_ok(self) -> bool:
        return (
            self.status == 200
            and self.body == b""
            and self.headers.get("X-NSQ-Content-Type") == V1
            and "Content-Type" not in self.headers
        )


class HttpApi:
    """Calls to one daemon's HTTP API at ``base`` (``http://host:port``); no redirects followed."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(
        self,
        method: str,
        path: str,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        url = URL(self.base + path, encoded=True)
        async with self.session.request(
            method, url, data=data, headers=headers, allow_redirects=False
        ) as resp:
            return Reply(resp.status, resp.headers, await resp.read())

    async def get(self, path: str) -> Reply:
        return await self.call("GET", path)

    async def post(self, path: str, data: Any = None) -> Reply:
        return await self.call("POST", path, data)

    async def put(self, path: str, data: Any = None) -> Reply:
        return await self.call("PUT", path, data)

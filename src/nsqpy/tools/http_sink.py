"""nsq_to_http's message handler: each message becomes an HTTP request.

As NSQ v1.3.0's ``apps/nsq_to_http``:

- ``--post`` sends the body with ``--content-type``; a response outside 2xx is an error.
- ``--get`` replaces the single ``%s`` in the address with the body as Go's ``url.QueryEscape``
  writes it (space as ``+``, everything but ``A-Za-z0-9-_.~`` as ``%XX``); only 200 is success.
- ``--header key:value`` headers are set after ``User-Agent: nsq_to_http v1.3.0`` (and the
  content type), so they can override them.
- ``--mode`` picks the address: ``round-robin``, ``hostpool`` (go-hostpool's standard pool),
  ``epsilon-greedy``; NSQ quietly treats any other mode as "every address in turn", and so
  does this.
- ``--sample`` publishes that fraction of messages; the rest are FINished untouched.
- An error raised here makes the consumer REQ the message with backoff.
- Latency status lines every ``--status-every`` requests: per address (when there are several)
  and ``[aggregate]:``.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import aiohttp
from yarl import URL

from nsqpy._internal.gostrconv import query_escape
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.tools.epsilon_greedy import EpsilonGreedyPool
from nsqpy.tools.hostpool import HostPool, RoundRobin
from nsqpy.tools.timer_metrics import Log, TimerMetrics

USER_AGENT: Final = f"nsq_to_http v{NSQ_VERSION}"
DEFAULT_CONTENT_TYPE: Final = "application/octet-stream"
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class PublishFailed(Exception):
    """The endpoint answered with a status that does not count as success."""


class Body(Protocol):
    @property
    def body(self) -> bytes: ...


def canonical_header_key(key: str) -> str:
    """Go's ``CanonicalMIMEHeaderKey``: ``content-type`` → ``Content-Type``; keys that are not
    plain tokens are left alone."""
    if not _TOKEN.fullmatch(key):
        return key
    return "-".join(part[:1].upper() + part[1:].lower() for part in key.split("-"))


def parse_headers(texts: Sequence[str]) -> dict[str, str]:
    """``--header`` values, split at the first ``:`` and trimmed; ValueError if a side is
    empty or there is no colon."""
    headers: dict[str, str] = {}
    for text in texts:
        key, colon, value = text.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not key or not value:
            raise ValueError(f"invalid header: {text!r}")
        headers[key] = value
    return headers


def get_url(template: str, body: bytes) -> str:
    """The GET address for ``body``: Go's ``fmt.Sprintf(template, url.QueryEscape(body))``.

    ``%%`` becomes ``%`` as in Sprintf; other ``%`` sequences are kept as written (Go would
    print them as ``%!x(MISSING)``, which no endpoint wants).
    """
    escaped = query_escape(body)
    out: list[str] = []
    i, used = 0, False
    while i < len(template):
        pair = template[i : i + 2]
        if pair == "%%":
            out.append("%")
        elif pair == "%s" and not used:
            out.append(escaped)
            used = True
        else:
            out.append(template[i])
            i += 1
            continue
        i += 2
    return "".join(out)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    addresses: Sequence[str]
    post: bool
    mode: str = "hostpool"
    content_type: str = DEFAULT_CONTENT_TYPE
    headers: Mapping[str, str] = field(default_factory=dict)
    sample: float = 1.0
    status_every: int = 250


Selector = RoundRobin | HostPool


def selector_for(mode: str, addresses: Sequence[str]) -> Selector | None:
    """The address chooser for ``--mode``; None means NSQ's "every address" fallback."""
    if mode == "round-robin":
        return RoundRobin(addresses)
    if mode == "hostpool":
        return HostPool(addresses)
    if mode == "epsilon-greedy":
        return EpsilonGreedyPool(addresses)
    return None


class HttpSink:
    """Publishes messages to the configured endpoints (see the module doc)."""

    def __init__(
        self,
        opts: SinkOptions,
        session: aiohttp.ClientSession,
        *,
        log: Log,
        selector: Selector | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.opts = opts
        self._session = session
        if selector is None:
            selector = selector_for(opts.mode, opts.addresses)
        self._selector = selector
        self._rand = rand
        self._clock = clock
        self._headers = self._request_headers()
        # One address: its own status line would repeat the aggregate one, so it is off.
        every = opts.status_every if len(opts.addresses) > 1 else 0
        self.per_address = {a: TimerMetrics(every, f"[{a}]:", log) for a in opts.addresses}
        self.aggregate = TimerMetrics(opts.status_every, "[aggregate]:", log)

    def _request_headers(self) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT}
        if self.opts.post:
            headers["Content-Type"] = self.opts.content_type
        for key, value in self.opts.headers.items():
            headers[canonical_header_key(key)] = value
        return headers

    async def handle(self, msg: Body) -> None:
        """The consumer's handler: returns when published, raises to have it requeued."""
        if self.opts.sample < 1.0 and self._rand() > self.opts.sample:
            return
        start = self._clock()
        if self._selector is None:
            for address in self.opts.addresses:
                began = self._clock()
                await self.publish(address, msg.body)
                self.per_address[address].record(self._since(began))
        else:
            address = self._selector.get()
            try:
                await self.publish(address, msg.body)
            except BaseException:
                self._mark(address, False, start)
                raise
            self._mark(address, True, start)
            self.per_address[address].record(self._since(start))
        self.aggregate.record(self._since(start))

    async def publish(self, address: str, body: bytes) -> None:
        if self.opts.post:
            request = self._session.post(address, data=body, headers=self._headers)
            ok = range(200, 300)
        else:
            # Already escaped: sent exactly as built, not re-quoted.
            url = URL(get_url(address, body), encoded=True)
            request = self._session.get(url, headers=self._headers)
            ok = range(200, 201)
        async with request as resp:
            await resp.read()
            if resp.status not in ok:
                raise PublishFailed(f"got status code {resp.status}")

    def _mark(self, address: str, ok: bool, start: float) -> None:
        selector = self._selector
        if isinstance(selector, EpsilonGreedyPool):
            selector.mark_timed(address, ok, self._clock() - start)
        elif selector is not None:
            selector.mark(address, ok)

    def _since(self, start: float) -> int:
        return int((self._clock() - start) * 1e9)

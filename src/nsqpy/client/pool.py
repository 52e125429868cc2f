"""A consumer's connections: which nsqd to be connected to, reconnects, and RDY.

Addresses come from the caller (``nsqd_tcp_addresses``: redialled with backoff whenever they
drop) or from nsqlookupd (polled every ``lookupd_poll_interval`` after a random jitter;
every lookupd is asked and the answers are merged; a producer that no longer appears is
closed gracefully, a new one is joined; a dropped connection triggers an early poll).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import aiohttp

from nsqpy.client.backoff import ReconnectPolicy
from nsqpy.client.config import Config
from nsqpy.client.connection import Delegate, NsqdConnection
from nsqpy.client.discovery import merge, query_lookupd
from nsqpy.client.errors import NSQError
from nsqpy.client.rdy import ConnView, plan

log = logging.getLogger("nsqpy.client")


class ConnectionPool:
    def __init__(
        self,
        topic: str,
        channel: str,
        config: Config,
        delegate: Delegate,
        nsqd_tcp_addresses: Sequence[str],
        lookupd_http_addresses: Sequence[str],
    ) -> None:
        self.topic = topic
        self.channel = channel
        self.config = config
        self.delegate = delegate
        self.direct = list(nsqd_tcp_addresses)
        self.lookupds = list(lookupd_http_addresses)
        self.conns: dict[str, NsqdConnection] = {}
        self.discovered: set[str] = set()
        self.rng = random.Random()
        self.paused_rdy = False  # the consumer's backoff holds RDY at 0
        self.on_change: Callable[[], None] = lambda: None
        self._policies: dict[str, ReconnectPolicy] = {}
        self._dialing: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._poll_now = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._closing = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.gather(*(self._dial(a) for a in self.direct))
        if self.lookupds:
            timeout = aiohttp.ClientTimeout(
                total=max(self.config.read_timeout, 1.0), connect=self.config.dial_timeout
            )
            self._session = aiohttp.ClientSession(timeout=timeout)
            await self.poll_lookupds()
            self._spawn(self._lookupd_loop())
        self._spawn(self._redistribute_loop())

    async def stop(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def close_all(self) -> None:
        for conn in list(self.conns.values()):
            conn.close()

    # --- connections ---------------------------------------------------------------------------

    async def _dial(self, address: str) -> None:
        if address in self.conns or address in self._dialing or self._closing:
            return
        self._dialing.add(address)
        policy = self._policies.setdefault(address, ReconnectPolicy())
        try:
            conn = await NsqdConnection.open(address, self.config, self.delegate)
            await conn.subscribe(self.topic, self.channel)
        except NSQError as exc:
            log.warning("%s: connect failed: %s", address, exc)
            self._retry(address, policy.failure())
            return
        finally:
            self._dialing.discard(address)
        if self._closing:  # close() ran while we were dialling
            conn.close()  # type: ignore[unreachable]
            return
        policy.success()
        log.info("%s: connected (%s/%s)", address, self.topic, self.channel)
        self.conns[address] = conn
        self.update_rdy()
        self.on_change()

    def lost(self, conn: NsqdConnection, exc: BaseException | None) -> None:
        """A connection closed: forget it, and redial or re-poll unless we are stopping."""
        if self.conns.get(conn.address) is not conn:
            return
        del self.conns[conn.address]
        log.info("%s: disconnected (%s)", conn.address, exc or "closed")
        self.on_change()
        if self._closing:
            return
        self.update_rdy()
        policy = self._policies.setdefault(conn.address, ReconnectPolicy())
        if conn.address in self.direct:
            self._retry(conn.address, policy.failure())
        elif conn.address in self.discovered:
            self._retry(conn.address, policy.failure())
            self._poll_now.set()

    def _retry(self, address: str, delay: float) -> None:
        if self._closing:
            return

        async def later() -> None:
            await asyncio.sleep(delay)
            if address in self.direct or address in self.discovered:
                await self._dial(address)

        self._spawn(later())

    def retire(self, address: str) -> None:
        """lookupd no longer lists it: stop taking messages, close once they are answered."""
        conn = self.conns.get(address)
        if conn is None:
            return
        del self.conns[address]
        self.update_rdy()
        self._spawn(_drain_and_close(conn, self.config.read_timeout))

    # --- lookupd -------------------------------------------------------------------------------

    async def poll_lookupds(self) -> None:
        assert self._session is not None
        session = self._session
        results = await asyncio.gather(
            *(query_lookupd(session, a, self.topic, auth_secret=self.config.auth_secret)
              for a in self.lookupds),
            return_exceptions=True,
        )
        found = merge(results)
        if found is None:
            return  # every lookupd failed: keep the connections we have
        for gone in self.discovered - found:
            if gone not in self.direct:
                log.info("%s: no longer listed by lookupd", gone)
                self.retire(gone)
        self.discovered = found
        await asyncio.gather(*(self._dial(a) for a in sorted(found)))

    async def _lookupd_loop(self) -> None:
        interval = self.config.lookupd_poll_interval
        # spread many consumers' polls so they do not hit lookupd in step
        await asyncio.sleep(self.rng.random() * self.config.lookupd_poll_jitter * interval)
        while True:
            try:
                async with asyncio.timeout(interval):
                    await self._poll_now.wait()
            except TimeoutError:
                pass
            self._poll_now.clear()
            await self.poll_lookupds()

    # --- RDY -----------------------------------------------------------------------------------

    def update_rdy(self) -> None:
        if self.paused_rdy:
            return
        conns = list(self.conns.values())
        now = asyncio.get_running_loop().time()
        views = [ConnView(c.rdy, c.last_message_at, c.last_rdy_at) for c in conns]
        counts = plan(
            self.config.max_in_flight, views, now, self.config.low_rdy_idle_timeout, self.rng
        )
        # lower first, so the total never exceeds max_in_flight even for a moment
        for conn, count in sorted(zip(conns, counts, strict=True), key=lambda p: p[1]):
            if count != conn.rdy:
                conn.set_rdy(count)

    def set_all_rdy(self, count: int) -> None:
        for conn in self.conns.values():
            conn.set_rdy(count)

    def test_one(self) -> None:
        """After a backoff pause: RDY 1 on one random connection."""
        conns = list(self.conns.values())
        if conns:
            self.rng.choice(conns).set_rdy(1)

    async def _redistribute_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.rdy_redistribute_interval)
            if len(self.conns) > self.config.max_in_flight:
                self.update_rdy()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _drain_and_close(conn: NsqdConnection, limit: float) -> None:
    try:
        async with asyncio.timeout(limit):
            await conn.start_close()
            await conn.wait_drained()
    except (TimeoutError, NSQError):
        pass
    conn.close()

"""Producer: publish to one or more nsqd over TCP, pipelined, with reconnect and failover.

Concurrent publishes share a connection: each command is written at once and its response is
matched in order (see connection.py), so ``asyncio.gather`` of many publishes pipelines them.
A publish that fails because a connection broke is retried on the next address; an error
frame from nsqd (bad topic, body too big) is raised as is, since another nsqd would say the same.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import Final, Literal, Self

from nsqpy.client.backoff import ReconnectPolicy
from nsqpy.client.closing import AsyncClosing
from nsqpy.client.config import Config
from nsqpy.client.connection import NsqdConnection, split_address
from nsqpy.client.errors import ConnectionClosedError, NotConnectedError
from nsqpy.protocol import commands

log = logging.getLogger("nsqpy.client")

Strategy = Literal["round_robin", "failover"]
STRATEGIES: Final = ("round_robin", "failover")


class _Node:
    """One nsqd address: its live connection and when it may be dialled again."""

    def __init__(self, address: str, policy: ReconnectPolicy) -> None:
        split_address(address)  # fail early on a malformed address
        self.address = address
        self.conn: NsqdConnection | None = None
        self.connecting: asyncio.Future[NsqdConnection] | None = None
        self.policy = policy
        self.retry_at = 0.0

    def usable(self, now: float) -> bool:
        live = self.conn is not None and not self.conn.closed
        return live or now >= self.retry_at


class Producer(AsyncClosing):
    """Publish to nsqd. ``strategy`` picks the next address per publish ("round_robin") or
    keeps to the first working one in the given order ("failover")."""

    def __init__(
        self,
        nsqd_tcp_addresses: str | Sequence[str],
        *,
        config: Config | None = None,
        strategy: Strategy = "round_robin",
    ) -> None:
        if isinstance(nsqd_tcp_addresses, str):
            nsqd_tcp_addresses = [a for a in nsqd_tcp_addresses.split(",") if a]
        if not nsqd_tcp_addresses:
            raise ValueError("at least one nsqd address is required")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r} (want one of {STRATEGIES})")
        self.config = config or Config()
        self.strategy = strategy
        self._nodes = [_Node(a, ReconnectPolicy()) for a in nsqd_tcp_addresses]
        self._rr = itertools.count()
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self._nodes]

    async def connect(self) -> None:
        """Connect to every address now; raises if none can be reached."""
        results = await asyncio.gather(
            *(self._connection(n) for n in self._nodes), return_exceptions=True
        )
        if all(isinstance(r, BaseException) for r in results):
            raise NotConnectedError(f"no nsqd reachable: {results[0]}")

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB one message; returns once nsqd has acknowledged it."""
        await self._send(commands.pub(topic, body))

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB: all of ``bodies`` in one command (nsqd takes all or none)."""
        if not bodies:
            raise ValueError("multi_publish needs at least one body")
        await self._send(commands.mpub(topic, bodies))

    async def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        """DPUB: deliver after ``delay`` seconds (nsqd caps it at --max-req-timeout)."""
        await self._send(commands.dpub(topic, round(delay * 1000), body))

    async def close(self) -> None:
        self._closed = True
        conns = [n.conn for n in self._nodes if n.conn is not None]
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()

    # --- internals -------------------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        conn = self._live_connection()
        if conn is not None:
            try:
                await conn.command(data)
                return
            except ConnectionClosedError:
                pass  # that connection just died: the slow path below redials or fails over
        await self._send_slow(data)

    def _live_connection(self) -> NsqdConnection | None:
        """The fast path: the connection this publish should use, if it is up and writable."""
        nodes = self._nodes
        if self.strategy == "round_robin":
            conn = nodes[next(self._rr) % len(nodes)].conn
        else:
            conn = next((n.conn for n in nodes if n.conn is not None and not n.conn.closed), None)
        if conn is None or conn.closed or not conn.writable:
            return None
        return conn

    async def _send_slow(self, data: bytes) -> None:
        if self._closed:
            raise NotConnectedError("producer is closed")
        last: Exception | None = None
        for node in self._candidates():
            try:
                conn = await self._connection(node)
                await conn.wait_writable()
                await conn.command(data)
                return
            except ConnectionClosedError as exc:
                last = exc
                log.warning("publish via %s failed: %s", node.address, exc)
        raise NotConnectedError(f"publish failed on every nsqd: {last}")

    def _candidates(self) -> list[_Node]:
        nodes = self._nodes
        if self.strategy == "round_robin":
            start = next(self._rr) % len(nodes)
            nodes = nodes[start:] + nodes[:start]
        now = asyncio.get_running_loop().time()
        ready = [n for n in nodes if n.usable(now)]
        # when every address is backing off, try them all anyway rather than fail at once
        return ready or nodes

    async def _connection(self, node: _Node) -> NsqdConnection:
        if node.conn is not None and not node.conn.closed:
            return node.conn
        if node.connecting is None:
            node.connecting = asyncio.ensure_future(self._dial(node))
        connecting = node.connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done() and node.connecting is connecting:
                node.connecting = None

    async def _dial(self, node: _Node) -> NsqdConnection:
        loop = asyncio.get_running_loop()
        try:
            conn = await NsqdConnection.open(node.address, self.config)
        except ConnectionClosedError:
            node.retry_at = loop.time() + node.policy.failure()
            raise
        node.policy.success()
        node.conn = conn
        return conn

"""What the adapters see of the daemon: ``Daemon``, a narrow typed protocol.

The TCP and HTTP adapters are built by ``nsqd.app.NSQD`` and handed the daemon; they are
written against this protocol instead of the class, so no adapter imports ``app`` (which
imports them) and what they may reach is listed in one place. ``NSQD`` satisfies it
structurally; a test may pass any object that does.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Protocol

from nsqpy.nsqd.core.auth import AuthState
from nsqpy.nsqd.core.backend import DiskHooks
from nsqpy.nsqd.core.broker import Broker
from nsqpy.nsqd.core.redrive import Redrive
from nsqpy.nsqd.observe.alerts import AlertMonitor
from nsqpy.nsqd.observe.stats import ClientView
from nsqpy.nsqd.options import NsqdOptions
from nsqpy.nsqd.server.read_batching import ReadBatcher
from nsqpy.protocol.identify import ServerLimits


class Connection(ClientView, Protocol):
    """A client connection as the daemon handles it: stats, coalesced flushes, shutdown."""

    flush_pending: bool

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class Daemon(Protocol):
    """The daemon's state and services that the TCP and HTTP adapters use."""

    @property
    def opts(self) -> NsqdOptions: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def broker(self) -> Broker: ...

    @property
    def store(self) -> DiskHooks: ...

    @property
    def limits(self) -> ServerLimits: ...

    @property
    def alerts(self) -> AlertMonitor: ...

    @property
    def tls_context(self) -> ssl.SSLContext | None: ...

    @property
    def read_batcher(self) -> ReadBatcher: ...

    @property
    def auth_enabled(self) -> bool: ...

    @property
    def health(self) -> str: ...

    @property
    def start_time(self) -> int: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    @property
    def https_port(self) -> int: ...

    @property
    def clients(self) -> Mapping[int, Connection]: ...

    # -- connections ------------------------------------------------------------------------
    def next_client_id(self) -> int: ...

    def client_arrived(self, client_id: int, conn: Connection) -> None: ...

    def client_gone(self, client_id: int) -> None: ...

    def schedule_flush(self, conn: Connection) -> None: ...

    def disconnect(self, client_ids: list[int]) -> None: ...

    # -- services ---------------------------------------------------------------------------
    def persist_metadata(self) -> None: ...

    def metadata_pending(self, topic: str) -> bool: ...

    async def metadata_written(self) -> bool: ...

    async def committed(self) -> bool: ...

    async def query_auth(
        self, *, remote_ip: str, tls: bool, common_name: str, secret: str
    ) -> AuthState: ...

    async def redrive(self, topic_name: str, origin: str | None = None) -> Redrive | None: ...

    def set_lookupd_addresses(self, addresses: list[str]) -> None: ...

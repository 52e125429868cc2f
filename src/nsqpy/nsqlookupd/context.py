"""What nsqlookupd's adapters (TCP and HTTP) see of the daemon.

The adapters are written against ``LookupdContext``, a narrow typed view, so they never import
the ``NSQLookupd`` class that wires them together (which would make a cycle: the daemon builds
the adapters). ``NSQLookupd`` satisfies this protocol structurally.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Protocol

from nsqpy.nsqlookupd.options import NsqlookupdOptions
from nsqpy.nsqlookupd.registry import RegistrationDB


class Connection(Protocol):
    """What the daemon does with an open V1 connection at shutdown."""

    def close(self) -> None: ...

    def abort(self) -> None: ...


class LookupdContext(Protocol):
    """The daemon's state and hooks that the TCP and HTTP adapters use."""

    @property
    def opts(self) -> NsqlookupdOptions: ...

    @property
    def registry(self) -> RegistrationDB: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def tcp_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    def connection_opened(self, conn: Connection) -> None: ...

    def connection_closed(self, conn: Connection) -> None: ...

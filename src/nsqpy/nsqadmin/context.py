"""What nsqadmin's HTTP API sees of the daemon: ``Admin``, a narrow typed protocol.

``NSQAdmin`` builds the HTTP application and satisfies this structurally, so ``http_api`` never
imports the class that imports it. The services are None until ``NSQAdmin.start`` made them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from nsqpy.nsqadmin.cluster import ClusterInfo
from nsqpy.nsqadmin.notify import Notifier
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.nsqadmin.sampler import Sampler
from nsqpy.nsqadmin.upstream import Upstream


class Admin(Protocol):
    """The daemon's options, clock, upstream services and the one setting it changes live."""

    @property
    def opts(self) -> NsqadminOptions: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def ci(self) -> ClusterInfo | None: ...

    @property
    def sampler(self) -> Sampler | None: ...

    @property
    def upstream(self) -> Upstream | None: ...

    @property
    def notifier(self) -> Notifier | None: ...

    def set_log_level(self, level: str) -> None: ...

"""Client settings, with go-nsq's names and defaults.

Durations are float seconds. ``Config.set(name, text)`` accepts go-nsq's ``Config`` option names
with Go-style values (``"5s"``, ``"true"``), which is what the utilities' ``--consumer-opt`` and
``--producer-opt`` flags pass through.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
from dataclasses import dataclass, field
from typing import Final

from nsqpy._internal.duration import SECOND, parse_go_duration
from nsqpy._internal.gostrconv import GoNumError, parse_go_bool, parse_go_float, parse_go_int
from nsqpy._version import __version__

DEFAULT_USER_AGENT: Final = f"nsqpy/{__version__}"

_TLS_VERSIONS: Final = {
    "ssl3.0": ssl.TLSVersion.SSLv3,
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def _hostname() -> str:
    return socket.gethostname()


@dataclass(slots=True)
class Config:
    """Everything a Producer or Consumer can be told (go-nsq ``Config`` equivalents)."""

    # --- connection ------------------------------------------------------------------------
    dial_timeout: float = 1.0
    read_timeout: float = 60.0
    write_timeout: float = 1.0
    # --- IDENTIFY ----------------------------------------------------------------------------
    client_id: str = field(default_factory=lambda: _hostname().split(".")[0])
    hostname: str = field(default_factory=_hostname)
    user_agent: str = DEFAULT_USER_AGENT
    heartbeat_interval: float = 30.0  # -1 disables heartbeats
    sample_rate: int = 0
    output_buffer_size: int = 16384  # -1 disables buffering
    output_buffer_timeout: float = 0.25  # -1 disables the timeout
    msg_timeout: float = 0.0  # 0 = nsqd's --msg-timeout
    # --- transport upgrades --------------------------------------------------------------------
    tls_v1: bool = False
    tls_context: ssl.SSLContext | None = None  # built from the tls_* fields when None
    tls_root_ca_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_insecure_skip_verify: bool = False
    tls_min_version: str = "tls1.2"
    tls_server_name: str = ""  # defaults to the nsqd host
    deflate: bool = False
    deflate_level: int = 6
    snappy: bool = False
    auth_secret: str = ""
    # --- consumer ----------------------------------------------------------------------------
    max_in_flight: int = 1
    max_attempts: int = 5  # 0 = unlimited
    default_requeue_delay: float = 90.0
    max_requeue_delay: float = 900.0
    backoff_multiplier: float = 1.0
    max_backoff_duration: float = 120.0
    low_rdy_idle_timeout: float = 10.0
    rdy_redistribute_interval: float = 5.0
    lookupd_poll_interval: float = 60.0
    lookupd_poll_jitter: float = 0.3
    #: TOUCH a message this long before its timeout while its handler still runs (0 = off).
    auto_touch: bool = False

    def copy(self, **changes: object) -> Config:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def set(self, name: str, text: str) -> None:
        """Set one option from its go-nsq name and Go-syntax text (``--consumer-opt`` style)."""
        key = name.strip().lower()
        if key not in _FIELD_TYPES or key == "tls_context":
            raise ValueError(f"invalid option {name}")
        kind = _FIELD_TYPES[key]
        try:
            value = _parse(kind, text)
        except (GoNumError, ValueError) as exc:
            raise ValueError(f"failed to set {name}: {exc}") from None
        setattr(self, key, value)

    def identify_body(self) -> dict[str, object]:
        """The IDENTIFY JSON go-nsq sends, with this config's values."""
        return {
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "short_id": self.client_id,  # deprecated, still read by old nsqd
            "long_id": self.hostname,
            "tls_v1": self.tls_v1,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "snappy": self.snappy,
            "feature_negotiation": True,
            "heartbeat_interval": _ms(self.heartbeat_interval),
            "sample_rate": self.sample_rate,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": _ms(self.output_buffer_timeout),
            "msg_timeout": _ms(self.msg_timeout),
        }

    def ssl_context(self) -> ssl.SSLContext:
        """The context for ``tls_v1``: the given one, or one built from the tls_* options."""
        if self.tls_context is not None:
            return self.tls_context
        ctx = ssl.create_default_context(cafile=self.tls_root_ca_file or None)
        if self.tls_insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
        ctx.minimum_version = _TLS_VERSIONS.get(self.tls_min_version, ssl.TLSVersion.TLSv1_2)
        return ctx


def _ms(seconds: float) -> int:
    return -1 if seconds < 0 else round(seconds * 1000)


def _parse(kind: str, text: str) -> object:
    if kind == "float" and text and text[-1].isalpha():
        return parse_go_duration(text) / SECOND
    if kind == "float":
        return parse_go_float(text)
    if kind == "int":
        return parse_go_int(text)
    if kind == "bool":
        return parse_go_bool(text)
    return text


_FIELD_TYPES: Final = {
    f.name: f.type if isinstance(f.type, str) else f.type.__name__
    for f in dataclasses.fields(Config)
}

"""IDENTIFY: validate a client's JSON, apply its settings, build nsqd's reply.

Pure: the adapter performs any transport upgrade (TLS, snappy, deflate) after sending the
reply this module builds. Field handling follows Go's ``encoding/json`` into nsqd's typed
struct: keys match case-insensitively, unknown keys are ignored, ``null`` leaves a default,
and a value of the wrong JSON type fails the whole body.

One key is nsqpy's own: ``"leases": true`` asks for the lease commands (an nsqpy extension,
``nsqpy.nsqd.server.tcp_leases``). nsqd ignores the key, so a value that is not a JSON bool is
ignored too, and the reply gains ``"leases":true`` only when it was asked for (with
``feature_negotiation``) and the server offers it: a client that does not ask gets nsqd's bytes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final

from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.errors import ClientError

_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_INT32: Final = (-(1 << 31), (1 << 31) - 1)

_STRING_FIELDS: Final = ("client_id", "hostname", "user_agent")
_BOOL_FIELDS: Final = ("feature_negotiation", "tls_v1", "deflate", "snappy")
_INT_FIELDS: Final = (
    "heartbeat_interval",
    "output_buffer_size",
    "output_buffer_timeout",
    "deflate_level",
    "msg_timeout",
)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What nsqd's options allow a client to ask for (all durations in ms)."""

    max_heartbeat_interval: int = 60_000
    max_output_buffer_size: int = 65536
    min_output_buffer_timeout: int = 25
    max_output_buffer_timeout: int = 30_000
    max_msg_timeout: int = 900_000
    max_rdy_count: int = 2500
    max_deflate_level: int = 6
    tls_available: bool = False
    snappy_enabled: bool = False
    deflate_enabled: bool = False
    auth_required: bool = False
    #: False until the transport layer can wrap a connection in snappy or deflate; the
    #: options above still decide whether asking for both is an error, as in nsqd.
    compression_available: bool = False
    #: nsqpy's lease commands can be negotiated (``"leases": true``).
    leases_available: bool = False


@dataclass(slots=True)
class ClientSettings:
    """A connection's negotiated settings (durations in ms; 0 interval = disabled)."""

    heartbeat_interval: int = 30_000
    output_buffer_size: int = 16384
    output_buffer_timeout: int = 250
    msg_timeout: int = 60_000
    sample_rate: int = 0
    client_id: str = ""
    hostname: str = ""
    user_agent: str = ""
    feature_negotiation: bool = False
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6
    leases: bool = False  # nsqpy extension: the lease commands were negotiated


def decode_identify(body: bytes) -> dict[str, Any]:
    """Parse the JSON body into typed fields, or raise nsqd's decode error."""
    fail = ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    try:
        raw = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        raise fail from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise fail
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.lower()
        if value is None:
            continue
        if name == "leases":  # nsqpy's key: unknown to nsqd, so never an error
            if isinstance(value, bool):
                fields[name] = value
            continue
        if name in _STRING_FIELDS:
            ok = isinstance(value, str)
        elif name in _BOOL_FIELDS:
            ok = isinstance(value, bool)
        elif name in _INT_FIELDS:
            ok = _is_int(value, _INT64)
        elif name == "sample_rate":
            ok = _is_int(value, _INT32)
        else:
            continue
        if not ok:
            raise fail
        fields[name] = value
    return fields


def _is_int(value: object, bounds: tuple[int, int]) -> bool:
    return type(value) is int and bounds[0] <= value <= bounds[1]


def apply_settings(
    fields: dict[str, Any], current: ClientSettings, limits: ServerLimits
) -> ClientSettings:
    """nsqd's clientV2.Identify: validate and apply, in nsqd's order."""
    new = dataclasses.replace(current)
    for name in _STRING_FIELDS:
        setattr(new, name, fields.get(name, ""))
    for name in _BOOL_FIELDS:
        setattr(new, name, fields.get(name, False))
    new.heartbeat_interval = _heartbeat(fields.get("heartbeat_interval", 0), new, limits)
    _output_buffer(
        fields.get("output_buffer_size", 0), fields.get("output_buffer_timeout", 0), new, limits
    )
    rate = fields.get("sample_rate", 0)
    if not 0 <= rate <= 99:
        raise _invalid(f"sample rate ({rate}) is invalid")
    new.sample_rate = rate
    timeout = fields.get("msg_timeout", 0)
    if timeout != 0:
        if not 1000 <= timeout <= limits.max_msg_timeout:
            raise _invalid(f"msg timeout ({timeout}) is invalid")
        new.msg_timeout = timeout
    new.deflate_level = fields.get("deflate_level", 0)
    new.leases = fields.get("leases", False)
    return new


def _invalid(desc: str) -> ClientError:
    return ClientError("E_BAD_BODY", f"IDENTIFY {desc}")


def _heartbeat(wanted: int, current: ClientSettings, limits: ServerLimits) -> int:
    if wanted == -1:
        return 0
    if wanted == 0:
        return current.heartbeat_interval
    if 1000 <= wanted <= limits.max_heartbeat_interval:
        return wanted
    raise _invalid(f"heartbeat interval ({wanted}) is invalid")


def _output_buffer(size: int, timeout: int, new: ClientSettings, limits: ServerLimits) -> None:
    if timeout == -1:
        new.output_buffer_timeout = 0
    elif timeout != 0:
        if not limits.min_output_buffer_timeout <= timeout <= limits.max_output_buffer_timeout:
            raise _invalid(f"output buffer timeout ({timeout}) is invalid")
        new.output_buffer_timeout = timeout
    if size == -1:
        new.output_buffer_size = 1
        new.output_buffer_timeout = 0
    elif size != 0:
        if not 64 <= size <= limits.max_output_buffer_size:
            raise _invalid(f"output buffer size ({size}) is invalid")
        new.output_buffer_size = size


def negotiate(
    body: bytes, current: ClientSettings, limits: ServerLimits
) -> tuple[ClientSettings, bytes | None]:
    """Run IDENTIFY; returns the new settings and the JSON reply (None means plain ``OK``).

    The returned settings' ``tls_v1``/``snappy``/``deflate`` say which upgrades the adapter must
    perform, in that order, after sending the reply.
    """
    fields = decode_identify(body)
    new = apply_settings(fields, current, limits)
    if not new.feature_negotiation:
        new.tls_v1 = new.snappy = new.deflate = False
        new.deflate_level = 6
        new.leases = False
        return new, None
    new.tls_v1 = limits.tls_available and new.tls_v1
    new.deflate = limits.deflate_enabled and new.deflate
    new.snappy = limits.snappy_enabled and new.snappy
    if new.deflate and new.snappy:
        raise ClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
    if not limits.compression_available:
        new.snappy = new.deflate = False  # answer as nsqd with --snappy=false --deflate=false
    level = new.deflate_level if new.deflate and new.deflate_level > 0 else 6
    new.deflate_level = min(level, limits.max_deflate_level)
    new.leases = limits.leases_available and new.leases
    reply: dict[str, object] = {
        "max_rdy_count": limits.max_rdy_count,
        "version": NSQ_VERSION,
        "max_msg_timeout": limits.max_msg_timeout,
        "msg_timeout": new.msg_timeout,
        "tls_v1": new.tls_v1,
        "deflate": new.deflate,
        "deflate_level": new.deflate_level,
        "max_deflate_level": limits.max_deflate_level,
        "snappy": new.snappy,
        "sample_rate": new.sample_rate,
        "auth_required": limits.auth_required,
        "output_buffer_size": new.output_buffer_size,
        "output_buffer_timeout": new.output_buffer_timeout,
    }
    if new.leases:
        reply["leases"] = True
    return new, json.dumps(reply, separators=(",", ":")).encode()

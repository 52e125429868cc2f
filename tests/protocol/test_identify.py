"""IDENTIFY negotiation: validation messages and the reply's exact JSON (§2.9)."""

from __future__ import annotations

import json

import pytest

from nsqpy.protocol.errors import ClientError
from nsqpy.protocol.identify import ClientSettings, ServerLimits, negotiate

LIMITS = ServerLimits(snappy_enabled=True, deflate_enabled=True)


def run(body: dict[str, object] | bytes) -> tuple[ClientSettings, bytes | None]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return negotiate(raw, ClientSettings(), LIMITS)


def test_without_feature_negotiation_reply_is_plain_ok_but_settings_apply() -> None:
    settings, reply = run({"heartbeat_interval": 5000, "msg_timeout": 2000, "client_id": "c"})
    assert reply is None
    assert (settings.heartbeat_interval, settings.msg_timeout, settings.client_id) == (
        5000,
        2000,
        "c",
    )


def test_reply_golden_bytes_with_defaults() -> None:
    _, reply = run({"feature_negotiation": True})
    assert reply == (
        b'{"max_rdy_count":2500,"version":"1.3.0","max_msg_timeout":900000,'
        b'"msg_timeout":60000,"tls_v1":false,"deflate":false,"deflate_level":6,'
        b'"max_deflate_level":6,"snappy":false,"sample_rate":0,"auth_required":false,'
        b'"output_buffer_size":16384,"output_buffer_timeout":250}'
    )


def test_effective_values_are_reported() -> None:
    _, reply = run(
        {
            "feature_negotiation": True,
            "output_buffer_size": -1,
            "output_buffer_timeout": 1000,
            "sample_rate": 10,
            "msg_timeout": 1000,
        }
    )
    assert reply is not None
    data = json.loads(reply)
    assert data["output_buffer_size"] == 1
    assert data["output_buffer_timeout"] == 0
    assert data["sample_rate"] == 10
    assert data["msg_timeout"] == 1000


@pytest.mark.parametrize(
    ("field", "value", "desc"),
    [
        ("heartbeat_interval", 999, "IDENTIFY heartbeat interval (999) is invalid"),
        ("heartbeat_interval", 60001, "IDENTIFY heartbeat interval (60001) is invalid"),
        ("heartbeat_interval", -2, "IDENTIFY heartbeat interval (-2) is invalid"),
        ("output_buffer_size", 63, "IDENTIFY output buffer size (63) is invalid"),
        ("output_buffer_size", 65537, "IDENTIFY output buffer size (65537) is invalid"),
        ("output_buffer_timeout", 24, "IDENTIFY output buffer timeout (24) is invalid"),
        ("sample_rate", 100, "IDENTIFY sample rate (100) is invalid"),
        ("sample_rate", -1, "IDENTIFY sample rate (-1) is invalid"),
        ("msg_timeout", 999, "IDENTIFY msg timeout (999) is invalid"),
        ("msg_timeout", 900001, "IDENTIFY msg timeout (900001) is invalid"),
    ],
)
def test_invalid_values(field: str, value: int, desc: str) -> None:
    with pytest.raises(ClientError) as info:
        run({field: value})
    assert (info.value.code, info.value.desc, info.value.fatal) == ("E_BAD_BODY", desc, True)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"heartbeat_interval":"x"}',
        b'{"tls_v1":1}',
        b'{"msg_timeout":1.5}',
        b'{"sample_rate":4294967296}',
        b'{"client_id":5}',
    ],
)
def test_undecodable_bodies(body: bytes) -> None:
    with pytest.raises(ClientError) as info:
        run(body)
    assert info.value.desc == "IDENTIFY failed to decode JSON body"


def test_null_unknown_and_case_insensitive_keys() -> None:
    settings, _ = run({"Client_ID": "x", "short_id": "s", "hostname": None, "long_id": 3})
    assert settings.client_id == "x"
    assert settings.hostname == ""
    settings, reply = run(b"null")
    assert reply is None


def test_both_compressions_refused() -> None:
    with pytest.raises(ClientError) as info:
        run({"feature_negotiation": True, "snappy": True, "deflate": True})
    assert info.value.wire == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"


def test_compression_not_offered_until_available() -> None:
    settings, reply = run({"feature_negotiation": True, "snappy": True})
    assert reply is not None
    assert json.loads(reply)["snappy"] is False
    assert not settings.snappy


def test_deflate_level_capped_by_server() -> None:
    limits = ServerLimits(deflate_enabled=True, compression_available=True, max_deflate_level=3)
    body = json.dumps({"feature_negotiation": True, "deflate": True, "deflate_level": 9})
    settings, reply = negotiate(body.encode(), ClientSettings(), limits)
    assert reply is not None
    assert json.loads(reply)["deflate_level"] == 3
    assert settings.deflate


def test_unavailable_deflate_reports_the_default_level() -> None:
    """Like nsqd with --deflate=false: deflate false and level 6, never false with 3."""
    _, reply = run({"feature_negotiation": True, "deflate": True, "deflate_level": 3})
    assert reply is not None
    data = json.loads(reply)
    assert (data["deflate"], data["deflate_level"]) == (False, 6)


def test_leases_are_answered_only_when_asked_for_and_offered() -> None:
    offered = ServerLimits(leases_available=True)
    settings, reply = negotiate(
        b'{"feature_negotiation":true,"leases":true}', ClientSettings(), offered
    )
    assert settings.leases and reply is not None and reply.endswith(b',"leases":true}')
    for body in (b'{"feature_negotiation":true}', b'{"feature_negotiation":true,"leases":1}'):
        settings, reply = negotiate(body, ClientSettings(), offered)
        assert not settings.leases and reply is not None and b"leases" not in reply
    settings, reply = negotiate(
        b'{"feature_negotiation":true,"leases":true}', ClientSettings(), ServerLimits()
    )
    assert not settings.leases and reply is not None and b"leases" not in reply
    settings, reply = negotiate(b'{"leases":true}', ClientSettings(), offered)
    assert not settings.leases and reply is None

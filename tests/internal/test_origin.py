"""The cross-origin rule shared by nsqd and nsqadmin (``nsqpy._internal.origin``), in isolation.

The daemons' own tests (tests/nsqd/test_http_origin.py, tests/nsqadmin/test_api_origin.py and
test_browser_origin.py) check it over real sockets and from a real browser.
"""

from __future__ import annotations

import logging

import pytest
from aiohttp.test_utils import make_mocked_request

from nsqpy._internal.origin import (
    OriginGuard,
    addressed_origin,
    normalize_origin,
    parse_allowed_origin,
    split_allowed_origins,
)

log = logging.getLogger("test.origin")


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("http://evil.example", "http://evil.example"),
        ("HTTP://Evil.Example:80", "http://evil.example"),
        ("https://a.example:443/", "https://a.example"),
        ("https://a.example:80", "https://a.example:80"),
        ("http://127.0.0.1:4171", "http://127.0.0.1:4171"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("http://[::1]:80", "http://[::1]"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
    ],
)
def test_normalize_origin_writes_origins_as_browsers_do(text: str, normalized: str) -> None:
    assert normalize_origin(text) == normalized


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "evil.example",
        "evil.example:80",
        "http:evil.example",
        "http://",
        "http://evil.example/path",
        "http://evil.example?x=1",
        "http://evil.example#x",
        "http://user@evil.example",
        "http://evil.example:99999",
        "http://evil.example:port",
        "http://[::1",
        " http://evil.example",
        "http://evil .example",
    ],
)
def test_normalize_origin_refuses_what_is_not_an_origin(text: str) -> None:
    with pytest.raises(ValueError, match="want scheme://host"):
        normalize_origin(text)


def test_allowed_origin_values() -> None:
    assert parse_allowed_origin("*") == "*"
    assert parse_allowed_origin(" https://Admin.Example:443 ") == "https://admin.example"
    with pytest.raises(ValueError, match="null stands for every sandboxed page"):
        parse_allowed_origin("null")
    with pytest.raises(ValueError, match="no path"):
        parse_allowed_origin("http://a.example/admin")
    assert split_allowed_origins("http://a, https://b:8443,,") == ["http://a", "https://b:8443"]


def guard(*allowed: str, own_origin: bool = False) -> OriginGuard:
    return OriginGuard(allowed, own_origin=own_origin, flag="--http-allowed-origin", log=log)


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_safe_methods_pass_from_any_origin(method: str) -> None:
    headers = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert guard().refused(make_mocked_request(method, "/stats", headers=headers)) is None


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, None),  # a program: curl, a client, nsqadmin asking nsqd
        ({"Sec-Fetch-Site": "none"}, None),  # typed in by the user
        ({"Sec-Fetch-Site": "same-origin"}, None),
        ({"Sec-Fetch-Site": "cross-site"}, "a cross-site page"),
        ({"Sec-Fetch-Site": "Same-Site"}, "a same-site page"),
        ({"Origin": "http://evil.example"}, "http://evil.example"),
        ({"Origin": "null"}, "null"),
        ({"Origin": ""}, '""'),
        ({"Origin": "http://127.0.0.1:4151"}, "http://127.0.0.1:4151"),  # nsqd's own: no pages
        ({"Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}, "http://evil.example"),
    ],
)
def test_state_changing_methods_need_no_origin_or_an_allowed_one(
    method: str, headers: dict[str, str], refused: str | None
) -> None:
    headers = {"Host": "127.0.0.1:4151", **headers}
    req = make_mocked_request(method, "/topic/delete?topic=t", headers=headers)
    assert guard().refused(req) == refused


def test_allowed_origins_match_however_they_are_written() -> None:
    check = guard("HTTP://Friend.Example:80/", "https://ops.example:8443")
    for origin, refused in [
        ("http://friend.example", None),
        ("http://friend.example:80", None),
        ("https://friend.example", "https://friend.example"),
        ("http://friend.example:8080", "http://friend.example:8080"),
        ("https://ops.example:8443", None),
        ("https://ops.example", "https://ops.example"),
        ("http://friend.example.evil.example", "http://friend.example.evil.example"),
    ]:
        req = make_mocked_request("POST", "/pub?topic=t", headers={"Origin": origin})
        assert check.refused(req) == refused, origin


def test_star_allows_everything() -> None:
    check = guard("*")
    assert check.allow_any
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        assert check.refused(make_mocked_request("POST", "/pub?topic=t", headers=headers)) is None


def test_bad_allowed_origin_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="want scheme://host"):
        guard("evil.example")


@pytest.mark.parametrize(
    ("headers", "origin", "allowed"),
    [
        ({"Host": "127.0.0.1:4171"}, "http://127.0.0.1:4171", True),
        ({"Host": "Admin.Example"}, "http://admin.example", True),
        ({"Host": "admin.example:80"}, "http://admin.example", True),
        ({"Host": "127.0.0.1:4171"}, "http://127.0.0.1:4172", False),
        ({"Host": "127.0.0.1:4171"}, "https://127.0.0.1:4171", False),  # the scheme counts
        ({"Host": "127.0.0.1:4171"}, "http://localhost:4171", False),
        ({}, "http://127.0.0.1:4171", False),  # no Host: no own origin to compare with
        # behind a proxy terminating TLS: the forwarded scheme and host are nsqadmin's origin
        (
            {
                "Host": "127.0.0.1:4171",
                "X-Forwarded-Proto": "https",
                "X-Forwarded-Host": "a.example",
            },
            "https://a.example",
            True,
        ),
        ({"Host": "a.example", "X-Forwarded-Proto": "HTTPS, http"}, "https://a.example", True),
        ({"Host": "a.example", "X-Forwarded-Proto": "https"}, "http://a.example", False),
    ],
)
def test_own_origin_is_the_one_the_request_was_addressed_to(
    headers: dict[str, str], origin: str, allowed: bool
) -> None:
    req = make_mocked_request("POST", "/api/topics/t", headers={**headers, "Origin": origin})
    if "Host" not in headers:
        assert addressed_origin(req) is None
    assert (guard(own_origin=True).refused(req) is None) is allowed
    assert guard(own_origin=False).refused(req) == origin  # nsqd has no pages of its own

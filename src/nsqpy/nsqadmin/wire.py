"""Small HTTP details of nsqadmin: response compression, JSON bodies, the /config guard.

* ``compress_middleware``: NSQ's CompressHandler. The first ``Accept-Encoding`` token that is
  exactly ``gzip`` or ``deflate`` (raw DEFLATE, as Go's flate writer produces) compresses every
  response, errors included, with ``Vary: Accept-Encoding``.
* ``decode_body``: Go's ``json.NewDecoder(body).Decode(&struct{...string fields})`` with its
  error texts (``EOF``, ``unexpected EOF``, ``invalid character ...``, ``json: cannot
  unmarshal ...``), which nsqadmin returns as the 400 message; ``decode_action`` reads an
  action body the same way and keeps its other keys (nsqpy's ``config`` action's settings).
* ``remote_ip_allowed``: the ``--allow-config-from-cidr`` test on ``host:port``.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import zlib
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

_JSON_KINDS: Final = {bool: "bool", int: "number", float: "number", dict: "object", list: "array"}


def _encoding(accept: str) -> str | None:
    for token in accept.split(","):
        token = token.strip()
        if token in ("gzip", "deflate"):
            return token
    return None


def _compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    deflater = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw, no zlib header
    return deflater.compress(body) + deflater.flush()


@web.middleware
async def compress_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    response = await handler(request)
    encoding = _encoding(request.headers.get("Accept-Encoding", ""))
    if encoding is None or not isinstance(response, web.Response):
        return response
    body = response.body
    if not isinstance(body, bytes):
        return response
    response.body = _compress(body, encoding)
    response.headers["Content-Encoding"] = encoding
    response.headers.add("Vary", "Accept-Encoding")
    return response


def _go_char(ch: str) -> str:
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    return "'" + json.dumps(ch)[1:-1] + "'"


def _first_value(raw: bytes) -> object:
    """The first JSON value in ``raw``; ValueError with Go's decoder text."""
    text = raw.decode("utf-8", "replace").lstrip(" \t\r\n")
    if not text:
        raise ValueError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as err:
        if err.pos >= len(text):
            raise ValueError("unexpected EOF") from None
        raise ValueError(
            f"invalid character {_go_char(text[err.pos])} looking for beginning of value"
        ) from None
    return value


def _string_fields(value: object, fields: tuple[str, ...]) -> dict[str, str]:
    out = dict.fromkeys(fields, "")
    if value is None:
        return out
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), "string")
        raise ValueError(f"json: cannot unmarshal {kind} into Go value of type struct")
    for name in fields:
        key = name if name in value else next((k for k in value if k.lower() == name), None)
        item = value.get(key) if key is not None else None
        if item is None:
            continue
        if not isinstance(item, str):
            kind = _JSON_KINDS.get(type(item), "string")
            raise ValueError(
                f"json: cannot unmarshal {kind} into Go struct field .{name} of type string"
            )
        out[name] = item
    return out


def decode_body(raw: bytes, fields: tuple[str, ...]) -> dict[str, str]:
    """The string ``fields`` of the first JSON value in ``raw``; ValueError with Go's text.

    Keys match case-insensitively (an exact match wins), unknown keys are ignored, a null
    leaves a field empty, and anything after the first value is not read.
    """
    return _string_fields(_first_value(raw), fields)


def decode_action(raw: bytes) -> tuple[str, dict[str, object]]:
    """An action body: ``action`` as ``decode_body`` reads it, and the body's other keys with
    their JSON values as sent (nsqpy's ``config`` action carries its settings there; a null
    must stay distinguishable from a missing key, so they are not narrowed to strings)."""
    value = _first_value(raw)
    action = _string_fields(value, ("action",))["action"]
    if not isinstance(value, dict):
        return action, {}
    return action, {k: v for k, v in value.items() if k.lower() != "action"}


def remote_ip_allowed(remote: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether ``host:port`` is inside ``network``; ValueError if the host is not an IP."""
    host, sep, port = remote.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(remote)
    ip = ipaddress.ip_address(host.strip("[]").split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # Go's IPNet.Contains compares the IPv4 form
    return ip.version == network.version and ip in network

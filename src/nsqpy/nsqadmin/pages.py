"""The UI's files: ``index.html`` for every page route, and the static assets.

The page routes all answer ``index.html`` with two placeholders filled in: ``__BASE__`` (the
base path with a trailing slash) and ``__NSQADMIN_CONFIG__`` (the UI's settings as JSON, in
Go's HTML-safe encoding so it cannot close the ``<script>`` it sits in). Assets come from the
package's ``static/`` directory, or from ``--dev-static-dir`` when that is set (which also
supplies index.html, unlike NSQ, so a UI can be developed without reinstalling).
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Final

from nsqpy._internal import gojson
from nsqpy._internal.http_api import sniff_content_type
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.protocol.constants import NSQ_VERSION

PACKAGE_STATIC: Final = Path(__file__).resolve().parent / "static"

# Go's mime.TypeByExtension built-ins, then the fallbacks nsqadmin's staticAssetHandler adds.
_CONTENT_TYPES: Final = {
    ".css": "text/css; charset=utf-8",
    ".gif": "image/gif",
    ".htm": "text/html; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".jpeg": "image/jpeg",
    ".jpg": "image/jpeg",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".mjs": "text/javascript; charset=utf-8",
    ".pdf": "application/pdf",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".wasm": "application/wasm",
    ".webp": "image/webp",
    ".xml": "text/xml; charset=utf-8",
    ".map": "application/json",
    ".woff": "application/font-woff",
    ".ttf": "application/font-sfnt",
    ".eot": "application/vnd.ms-fontobject",
    ".woff2": "application/font-woff2",
}


def static_dir(opts: NsqadminOptions) -> Path:
    return Path(opts.dev_static_dir) if opts.dev_static_dir else PACKAGE_STATIC


def read_asset(opts: NsqadminOptions, name: str) -> bytes | None:
    """An asset's bytes, or None when there is no such file (a name is one path segment)."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return None
    try:
        return (static_dir(opts) / name).read_bytes()
    except OSError:
        return None


def content_type(name: str, body: bytes) -> str | None:
    """The Content-Type nsqadmin sends for an asset (None: no body, no type)."""
    ext = os.path.splitext(name)[1].lower()
    known = _CONTENT_TYPES.get(ext) or mimetypes.types_map.get(ext)
    return known or sniff_content_type(body)


def base_prefix(base_path: str) -> str:
    """``/`` or ``/admin/``: the base path with exactly one trailing slash."""
    return base_path.rstrip("/") + "/"


def ui_config(opts: NsqadminOptions, is_admin: bool) -> dict[str, object]:
    """The settings the UI reads from ``__NSQADMIN_CONFIG__``."""
    return {
        "version": NSQ_VERSION,
        "base_path": base_prefix(opts.base_path),
        "nsqlookupd": list(opts.nsqlookupd_http_addresses),
        "is_admin": is_admin,
        "sample_interval": opts.sample_interval / 1e9,
        "history_seconds": opts.history_duration / 1e9,
        # NSQ's graphite settings, for a UI that wants them
        "graph_enabled": bool(opts.graphite_url),
        "graphite_url": opts.graphite_url,
        "proxy_graphite": opts.proxy_graphite,
        "statsd_interval": opts.statsd_interval // 1_000_000_000,
        "statsd_counter_format": opts.statsd_counter_format,
        "statsd_gauge_format": opts.statsd_gauge_format,
        "statsd_prefix": opts.statsd_prefix,
    }


def render_index(template: str, opts: NsqadminOptions, is_admin: bool) -> str:
    """index.html with ``__BASE__`` then ``__NSQADMIN_CONFIG__`` replaced."""
    page = template.replace("__BASE__", base_prefix(opts.base_path))
    config = gojson.dumps(ui_config(opts, is_admin)).decode()  # escapes <, > and & as \u00XX
    return page.replace("__NSQADMIN_CONFIG__", config)

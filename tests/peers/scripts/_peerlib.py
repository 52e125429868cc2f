"""Helpers shared by the Python peer scripts (no NSQ client library imported here).

Every peer is run as ``<script> <scenario> '<json params>'`` and prints exactly one JSON
line on stdout. A hard wall-clock limit (``params["timeout"]``) is enforced with SIGALRM
and its default action, so a wedged event loop cannot keep the process alive.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import urllib.error
import urllib.request
from typing import Any


def parse_argv() -> tuple[str, dict[str, Any]]:
    if len(sys.argv) != 3:
        sys.stderr.write("usage: peer.py SCENARIO JSON_PARAMS\n")
        sys.exit(2)
    params: dict[str, Any] = json.loads(sys.argv[2])
    # Hard backstop: SIGALRM's default action terminates the process.
    signal.alarm(int(params.get("timeout", 20)) + 5)
    return sys.argv[1], params


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result, sort_keys=False) + "\n")
    sys.stdout.flush()


def http_get_json(http_address: str, path: str) -> Any:
    """A plain blocking GET (used only for short /stats look-ups from inside a peer)."""
    with urllib.request.urlopen(f"http://{http_address}{path}", timeout=3) as resp:
        return json.loads(resp.read().decode("utf-8"))


def find_client(stats: Any, topic: str, channel: str) -> Any:
    for t in stats.get("topics") or []:
        if t.get("topic_name") != topic:
            continue
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                return c.get("clients")
    return None


def stats_clients(http_address: str, topic: str, channel: str) -> dict[str, Any]:
    """The channel's client entries from /stats, or the error met while fetching them."""
    try:
        stats = http_get_json(http_address, f"/stats?format=json&topic={topic}")
    except (OSError, ValueError, urllib.error.URLError) as err:
        return {"stats_error": repr(err)}
    return {"stats_clients": find_client(stats, topic, channel)}


def channel_entry(http_address: str, topic: str, channel: str) -> dict[str, Any]:
    """The channel's /stats entry ({} while it does not exist)."""
    stats = http_get_json(http_address, f"/stats?format=json&topic={topic}&channel={channel}")
    for t in stats.get("topics") or []:
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                return dict(c)
    return {}


def topic_depth(http_address: str, topic: str) -> int:
    """The topic's depth in /stats (-1 while it does not exist)."""
    stats = http_get_json(http_address, f"/stats?format=json&topic={topic}")
    for t in stats.get("topics") or []:
        if t.get("topic_name") == topic:
            return int(t["depth"])
    return -1

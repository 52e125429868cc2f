"""Go nsqd v1.3.0 can still open a data directory that carries nsqpy's dead-letter settings.

``tests/gocheck/nsqd_dat.go`` decodes nsqd.dat with Go's encoding/json into structs shaped
like nsqd's own metadata types and applies nsqd's name check, then prints what nsqd would
restore. Skipped where no Go toolchain is installed (``make`` installs Debian's).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory
from test_dead_letter_api import http, make_channel

GO = shutil.which("go")
READER = Path(__file__).resolve().parents[1] / "gocheck" / "nsqd_dat.go"

pytestmark = pytest.mark.skipif(GO is None, reason="no Go toolchain (golang-go)")


def go_restores(nsqd_dat: Path, home: Path) -> dict[str, Any]:
    assert GO is not None
    env = {**os.environ, "GOCACHE": str(home / "cache"), "GOPATH": str(home / "gopath")}
    env.update(GO111MODULE="off", GOFLAGS="", GOTOOLCHAIN="local")
    done = subprocess.run(
        [GO, "run", str(READER), str(nsqd_dat)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=home,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


async def test_go_nsqd_restores_every_topic_and_channel_and_ignores_the_settings(
    nsqd_factory: NsqdFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    nsqd = await nsqd_factory(data_path=str(data))
    async with aiohttp.ClientSession() as session:
        api = http(session, nsqd)
        await make_channel(api, "orders", "billing", max_attempts=3, message_ttl="90s")
        await make_channel(api, "orders", "audit")
        await make_channel(api, "orders.dead", "inspect")
        reply = await api.post("/topic/config?topic=orders", b'{"dead_letter_topic":"orders.dead"}')
        assert reply.status == 200, reply.body
        assert (await api.post("/channel/pause?topic=orders&channel=billing")).status == 200
        await make_channel(api, "plain", "c")
        assert (await api.post("/topic/pause?topic=plain")).status == 200
    await nsqd.stop()
    raw = json.loads((data / "nsqd.dat").read_bytes())
    assert any("max_attempts" in c for t in raw["topics"] for c in t["channels"] or ())

    home = tmp_path / "go"
    home.mkdir()
    restored = await asyncio.to_thread(go_restores, data / "nsqd.dat", home)
    assert restored["skipped"] == []
    assert restored["version"] == raw["version"]
    topics = {t["name"]: t for t in restored["topics"]}
    assert set(topics) == {"orders", "orders.dead", "plain"}
    assert topics["orders"]["paused"] is False and topics["plain"]["paused"] is True
    channels = {c["name"]: c["paused"] for c in topics["orders"]["channels"]}
    assert channels == {"billing": True, "audit": False}
    assert topics["orders.dead"]["channels"] == [{"name": "inspect", "paused": False}]

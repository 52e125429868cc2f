"""The ``cluster`` fixture: daemons on loopback, all killed afterwards (see helpers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from .helpers import Cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        c = Cluster(tmp_path, http)
        try:
            yield c
        finally:
            await c.close()

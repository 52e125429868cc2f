"""Shared fixtures: real daemons on 127.0.0.1 port 0, and a guard on loop errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop
from daemon_process import in_process, with_overrides

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.options import NsqdOptions

POLL_INTERVAL = 0.005

NsqdFactory = Callable[..., Awaitable[NSQD]]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests run on uvloop, the daemons' production loop; ``both_loops`` adds asyncio's."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "uvloop": uvloop.new_event_loop
    }
    if item.get_closest_marker("both_loops") is not None:
        factories["asyncio"] = asyncio.new_event_loop
    return factories


@pytest.fixture
async def nsqd_factory(tmp_path: Path) -> AsyncIterator[NsqdFactory]:
    """Start in-process nsqd instances with option overrides; all are stopped afterwards."""

    def build(n: int, overrides: dict[str, Any]) -> NSQD:
        opts = NsqdOptions()
        opts.tcp_address = "127.0.0.1:0"
        opts.http_address = "127.0.0.1:0"
        opts.data_path = str(tmp_path / f"nsqd{n}")
        return NSQD(with_overrides(opts, overrides))

    async with in_process(build) as start:
        yield start


@pytest.fixture
async def nsqd(nsqd_factory: NsqdFactory) -> NSQD:
    return await nsqd_factory()


@pytest.fixture(autouse=True)
async def _no_loop_errors() -> AsyncIterator[None]:
    """Fail a test whose event loop reported an unhandled error (a crashed callback)."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    yield
    assert not errors, errors


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true, failing after ``timeout`` seconds.

    For state inside the daemon that has no event to wait on (counters, queue depths).
    """
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(POLL_INTERVAL)

"""Fixtures for the third-party peer tests: real nsqd subprocesses and unique names."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .harness import NsqdProcess, valid_name

NsqdProcFactory = Callable[..., NsqdProcess]


@pytest.fixture(scope="module")
def nsqd_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcess]:
    """One default ``python -m nsqpy.nsqd`` per test module (tests use unique topics)."""
    daemon = NsqdProcess(tmp_path_factory.mktemp("nsqd")).start()
    try:
        yield daemon
    finally:
        daemon.assert_clean_exit()


@pytest.fixture
def nsqd_proc_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsqdProcFactory]:
    """Start dedicated daemons with extra flags, e.g. ``factory("--msg-timeout=1s")``."""
    started: list[NsqdProcess] = []

    def start(*flags: str) -> NsqdProcess:
        daemon = NsqdProcess(tmp_path_factory.mktemp("nsqd"), flags).start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.assert_clean_exit()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return valid_name(request.node.name)


@pytest.fixture
def channel() -> str:
    return valid_name("ch")

"""Spark test fixtures: ONE local[2] SparkSession per test run, nsqd processes, NSQ helpers.

pyspark is imported only inside fixtures, so the option and ingest tests here run without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import POLL_INTERVAL

from nsqpy.client import sync

from .daemons import Nsqd

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NsqdFactory = Callable[..., Nsqd]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test run's one SparkSession (starting one costs 10-30 s on this machine)."""
    pytest.importorskip("pyspark")
    from nsqpy.spark import build_session

    session = build_session(
        "local[2]",
        "nsqpy-tests",
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def nsqd_proc(tmp_path: Path) -> Iterator[NsqdFactory]:
    """Start nsqd processes (extra flags as arguments); all are stopped afterwards."""
    started: list[Nsqd] = []

    def start(*flags: str) -> Nsqd:
        daemon = Nsqd(tmp_path / f"nsqd{len(started)}", *flags)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


def publish(address: str, topic: str, bodies: Sequence[bytes], batch: int = 500) -> None:
    with sync.Producer(address) as producer:
        for i in range(0, len(bodies), batch):
            producer.multi_publish(topic, bodies[i : i + batch])


def numbered(count: int, prefix: str = "m", size: int = 0) -> list[bytes]:
    """Distinct bodies ``m000000`` ... (padded to ``size`` bytes when given)."""
    return [f"{prefix}{i:06d}".encode().ljust(size, b".") for i in range(count)]


def read_options(nsqd: Nsqd, topic: str, channel: str = "spark", **extra: Any) -> dict[str, str]:
    opts = {"nsqd": nsqd.tcp_address, "topic": topic, "channel": channel}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts


def consume(address: str, topic: str, channel: str, count: int, timeout: float = 30) -> list[bytes]:
    """FIN and return ``count`` messages of ``channel`` (fails if they do not all come)."""
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    with sync.Consumer(topic, channel, nsqd_tcp_addresses=address, max_in_flight=1000) as c:
        while len(out) < count and time.monotonic() < deadline:
            msg = c.get(timeout=POLL_INTERVAL * 20)
            if msg is not None:
                out.append(msg.body)
                msg.finish()
    assert len(out) == count, f"got {len(out)} of {count} messages from {topic}/{channel}"
    return out

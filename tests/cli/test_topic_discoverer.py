"""nsq_to_file's topic discovery: lookupd ``/topics``, ``--topic-pattern``, router fan-out."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
import pytest
from conftest import wait_for

from cli.recorder import recorder
from nsqpy.tools.topic_discoverer import (
    TopicDiscoverer,
    TopicsError,
    lookupd_topics,
    topic_allowed,
    topics_url,
)


def test_topic_pattern_is_searched_like_go_regexp_match_string() -> None:
    assert topic_allowed("", "anything")
    assert topic_allowed("^app_", "app_clicks")
    assert topic_allowed("clicks", "app_clicks_v2")  # unanchored
    assert not topic_allowed("^app_", "web_app_clicks")
    assert not topic_allowed("(", "x")  # an invalid pattern matches nothing


def test_topics_url() -> None:
    assert topics_url("127.0.0.1:4161") == "http://127.0.0.1:4161/topics"
    assert topics_url("http://lookupd:4161/") == "http://lookupd:4161/topics"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_lookupd_topics_union_sorted_and_errors() -> None:
    async with recorder() as one, recorder() as two, aiohttp.ClientSession() as session:
        one.json = {"topics": ["b", "a"]}
        two.json = {"topics": ["c", "a"]}
        addrs = [f"127.0.0.1:{one.port}", f"127.0.0.1:{two.port}"]
        assert await lookupd_topics(session, addrs) == ["a", "b", "c"]
        assert one.requests[0].path == "/topics"
        assert one.requests[0].headers["accept"] == "application/vnd.nsq; version=1.0"
        down = f"127.0.0.1:{closed_port()}"
        # As NSQ: a partial answer is still an error (the discoverer then changes nothing).
        with pytest.raises(TopicsError) as partial:
            await lookupd_topics(session, [addrs[0], down])
        assert not str(partial.value).startswith("failed to query any")
        assert down in str(partial.value)
        with pytest.raises(TopicsError, match=r"^failed to query any nsqlookupd: "):
            await lookupd_topics(session, [down])


class FakeRouter:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.hups = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        await self.stop.wait()

    def hup(self) -> None:
        self.hups += 1

    def terminate(self) -> None:
        self.stop.set()


async def test_discovery_filters_polls_and_fans_out_signals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    lookupd_lists = [["app_a", "web_b"], ["app_a", "app_bad", "app_c", "web_b"]]
    fetches = 0

    async def fetch() -> list[str]:
        nonlocal fetches
        fetches += 1
        if fetches == 1:
            raise TopicsError("lookupd down")
        return lookupd_lists[min(fetches - 2, 1)]

    async def start_router(topic: str) -> FakeRouter:
        if topic == "app_bad":
            raise ValueError("no good")
        return FakeRouter(topic)

    discoverer = TopicDiscoverer(
        topics=[],
        pattern="^app_",
        refresh=0.01,
        fetch_topics=fetch,
        start_router=start_router,  # type: ignore[arg-type]
        log=logging.getLogger("test.discoverer"),
    )
    run = asyncio.create_task(discoverer.run())
    await wait_for(lambda: set(discoverer.routers) == {"app_a", "app_c"})
    assert "could not retrieve topic list: lookupd down" in caplog.text
    assert "skipping topic web_b (doesn't match pattern ^app_)" in caplog.text
    assert "couldn't create logger for new topic app_bad: no good" in caplog.text
    discoverer.hup()
    assert [r.hups for r in discoverer.routers.values()] == [1, 1]  # type: ignore[attr-defined]
    discoverer.terminate()
    await asyncio.wait_for(run, 5)
    assert all(r.stop.is_set() for r in discoverer.routers.values())  # type: ignore[attr-defined]


async def test_fixed_topics_are_filtered_too_and_never_polled() -> None:
    async def fetch() -> list[str]:
        raise AssertionError("no polling when --topic is given")

    discoverer = TopicDiscoverer(
        topics=["app_x", "other"],
        pattern="^app_",
        refresh=0.001,
        fetch_topics=fetch,
        start_router=lambda topic: _ready(FakeRouter(topic)),  # type: ignore[arg-type,return-value]
        log=logging.getLogger("test.discoverer"),
    )
    run = asyncio.create_task(discoverer.run())
    await wait_for(lambda: bool(discoverer.routers))
    assert list(discoverer.routers) == ["app_x"]
    discoverer.terminate()
    await asyncio.wait_for(run, 5)


async def test_a_router_failure_ends_the_run() -> None:
    class Failing(FakeRouter):
        async def run(self) -> None:
            raise RuntimeError("disk full")

    discoverer = TopicDiscoverer(
        topics=["t"],
        pattern="",
        refresh=60,
        fetch_topics=lambda: _ready([]),
        start_router=lambda topic: _ready(Failing(topic)),  # type: ignore[arg-type,return-value]
        log=logging.getLogger("test.discoverer"),
    )
    with pytest.raises(RuntimeError, match="disk full"):
        await asyncio.wait_for(discoverer.run(), 5)


async def _ready(value: object) -> object:
    return value

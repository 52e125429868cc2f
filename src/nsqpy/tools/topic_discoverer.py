"""nsq_to_file's topics: the ``--topic`` list, or every topic nsqlookupd knows, re-read on a timer.

One FileRouter per topic. ``--topic-pattern`` (a regular expression searched anywhere in the
name, as Go's ``regexp.MatchString``) filters both sources. As in NSQ v1.3.0, the lookupd list is
first read one ``--topic-refresh`` after start-up, a failed or partial read changes nothing, and
topics that disappear from lookupd keep their router.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from nsqpy.tools.file_router import FileRouter

ACCEPT = "application/vnd.nsq; version=1.0"


class TopicsError(Exception):
    """Reading the topic list from nsqlookupd failed (for at least one address)."""


def topics_url(address: str) -> str:
    # NSQ builds http://<addr>/topics; an address that already has a scheme is taken as is.
    base = address if "://" in address else f"http://{address}"
    return base.rstrip("/") + "/topics"


async def _topics_of(session: aiohttp.ClientSession, address: str) -> list[str]:
    url = topics_url(address)
    async with session.get(url, headers={"Accept": ACCEPT}) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise TopicsError(f"got response {resp.status} {resp.reason} {body[:200]!r}")
    doc = json.loads(body)
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # pre-1.0 nsqlookupd wraps its answers
    topics = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(topics, list):
        raise TopicsError(f"GET {url}: no topics list in the response")
    return [t for t in topics if isinstance(t, str)]


async def lookupd_topics(session: aiohttp.ClientSession, addresses: Sequence[str]) -> list[str]:
    """The sorted union of every lookupd's ``/topics``; TopicsError if any of them failed."""
    results = await asyncio.gather(
        *(_topics_of(session, addr) for addr in addresses), return_exceptions=True
    )
    errors: list[str] = []
    topics: set[str] = set()
    for addr, result in zip(addresses, results, strict=True):
        if isinstance(result, BaseException):
            errors.append(f"{topics_url(addr)}: {result}")
        else:
            topics.update(result)
    if errors and len(errors) == len(addresses):
        raise TopicsError("failed to query any nsqlookupd: " + "\n".join(errors))
    if errors:
        raise TopicsError("\n".join(errors))
    return sorted(topics)


def topic_allowed(pattern: str, topic: str) -> bool:
    """No pattern allows everything; a pattern that does not compile allows nothing (as Go)."""
    if not pattern:
        return True
    try:
        return re.search(pattern, topic) is not None
    except re.error:
        return False


class TopicDiscoverer:
    """Owns the routers: starts one per allowed topic, fans SIGHUP/SIGTERM out to them."""

    def __init__(
        self,
        *,
        topics: Sequence[str],
        pattern: str,
        refresh: float,
        fetch_topics: Callable[[], Awaitable[list[str]]],
        start_router: Callable[[str], Awaitable[FileRouter]],
        log: logging.Logger,
    ) -> None:
        self._fixed = list(topics)
        self._pattern = pattern
        self._refresh = refresh
        self._fetch_topics = fetch_topics
        self._start_router = start_router
        self._log = log
        self.routers: dict[str, FileRouter] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._term = asyncio.Event()
        self._failure: BaseException | None = None

    def hup(self) -> None:
        for router in self.routers.values():
            router.hup()

    def terminate(self) -> None:
        self._term.set()

    async def run(self) -> None:
        """Until terminated: then every router drains and closes. A router's fatal error ends
        the run at once (NSQ exits the process) and is raised here."""
        await self.update_topics(self._fixed)
        # Go's time.Tick gives no ticks for a non-positive interval: then nothing is polled.
        polling = not self._fixed and self._refresh > 0
        poller = asyncio.create_task(self._poll()) if polling else None
        try:
            await self._term.wait()
        finally:
            if poller is not None:
                poller.cancel()
        self._raise_failure()
        for router in self.routers.values():
            router.terminate()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._raise_failure()

    async def update_topics(self, topics: Sequence[str]) -> None:
        for topic in topics:
            if topic in self.routers:
                continue
            if not topic_allowed(self._pattern, topic):
                self._log.warning(
                    "skipping topic %s (doesn't match pattern %s)", topic, self._pattern
                )
                continue
            try:
                router = await self._start_router(topic)
            except Exception as err:  # noqa: BLE001 - NSQ logs any failure and carries on
                self._log.error("couldn't create logger for new topic %s: %s", topic, err)
                continue
            self.routers[topic] = router
            task = asyncio.create_task(router.run())
            task.add_done_callback(self._router_done)
            self._tasks.append(task)

    def _router_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        if self._failure is None:
            self._failure = task.exception()
        self._term.set()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            try:
                topics = await self._fetch_topics()
            except (TopicsError, aiohttp.ClientError, TimeoutError, ValueError) as err:
                self._log.error("could not retrieve topic list: %s", err)
                continue
            await self.update_topics(topics)

"""to_nsq's work: publish each record of the input to the topic on every nsqd given.

Fan-out, not load balancing: every address gets every record (one Producer per address).
Records are published in order; up to ``WINDOW`` publishes per address are pipelined on the
connection (NSQ's to_nsq waits for each one, which costs a round trip per record). The first
failed publish stops everything, as NSQ's ``log.Fatal`` does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nsqpy.client import Config, Producer
from nsqpy.tools.records import RateLimiter, RecordSplitter

WINDOW: Final = 64


class PublishFailed(Exception):
    """A publish failed; the message is the error's text (what to_nsq logs fatally)."""


@dataclass(frozen=True, slots=True)
class ToNsqOptions:
    topic: str
    delimiter: bytes
    nsqd_tcp_addresses: Sequence[str]
    config: Config
    rate: int = 0  # messages per second; below 1 means no throttle


class FanOut:
    """Publishes every record to every producer, pipelined up to ``window`` records."""

    def __init__(self, producers: Sequence[Producer], topic: str, window: int = WINDOW) -> None:
        self._producers = producers
        self._topic = topic
        self._slots = asyncio.Semaphore(window)
        self._pending: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None

    async def publish(self, record: bytes) -> None:
        self._raise_if_failed()
        await self._slots.acquire()
        task = asyncio.ensure_future(self._send(record))
        self._pending.add(task)
        task.add_done_callback(self._done)

    async def _send(self, record: bytes) -> None:
        await asyncio.gather(*(p.publish(self._topic, record) for p in self._producers))

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None and self._error is None:
            self._error = task.exception()

    async def drain(self) -> None:
        """Wait for every publish; raise PublishFailed for the first failure."""
        if self._pending:
            await asyncio.wait(set(self._pending))
        self._raise_if_failed()

    def cancel(self) -> None:
        for task in self._pending:
            task.cancel()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise PublishFailed(str(self._error) or type(self._error).__name__)


async def pump(
    chunks: AsyncIterable[bytes],
    splitter: RecordSplitter,
    send: Callable[[bytes], Awaitable[None]],
    limiter: RateLimiter | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Split the input and ``send`` each record, paced by ``limiter`` when given."""

    async def one(record: bytes) -> None:
        if limiter is not None:
            wait = limiter.reserve(clock())
            if wait > 0:
                await asyncio.sleep(wait)
        await send(record)

    async for chunk in chunks:
        for record in splitter.feed(chunk):
            await one(record)
    for record in splitter.finish():
        await one(record)


def make_producers(opts: ToNsqOptions) -> list[Producer]:
    """One Producer per distinct address (NSQ keys its producers by address)."""
    try:
        return [Producer([a], config=opts.config) for a in dict.fromkeys(opts.nsqd_tcp_addresses)]
    except ValueError as err:
        raise PublishFailed(f"failed to create nsq.Producer - {err}") from None


async def to_nsq(
    opts: ToNsqOptions, chunks: AsyncIterable[bytes], log: Callable[[str], None]
) -> None:
    """Publish everything read from ``chunks``; cancel to stop early (producers are closed)."""
    producers = make_producers(opts)
    fan_out = FanOut(producers, opts.topic)
    limiter = None
    if opts.rate >= 1:
        log(f"Throttling messages rate to max:{opts.rate}/second")
        limiter = RateLimiter(opts.rate, time.monotonic())
    try:
        await pump(chunks, RecordSplitter(opts.delimiter), fan_out.publish, limiter)
        await fan_out.drain()
    finally:
        fan_out.cancel()
        await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)

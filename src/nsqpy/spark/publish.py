"""Publishing rows to nsqd from a Spark task: MPUB frames within nsqd's limits, DPUB if deferred.

One connection per task (the asyncio Producer on a LoopThread); the frames of one Arrow batch
are pipelined a window at a time, each waiting for nsqd's OK. nsqd takes an MPUB whole or not at
all, and a task that fails after some frames were acknowledged is retried by Spark from the start,
so the sink is at-least-once, like Kafka's: a consumer that must not see duplicates deduplicates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Final

from nsqpy.client.errors import NotConnectedError
from nsqpy.client.producer import Producer
from nsqpy.client.sync import LoopThread
from nsqpy.spark.options import WriteOptions

#: MPUB frames in flight per task; bounds the memory of frames not yet acknowledged.
WINDOW: Final = 16
#: MPUB body framing: a 4-byte message count, then a 4-byte size before each message.
_COUNT_SIZE: Final = 4
_LENGTH_SIZE: Final = 4


class SinkUnavailableError(ConnectionError):
    """No nsqd accepted a connection: the task fails with this message."""


@dataclass(slots=True)
class Counts:
    published: dict[str, int] = field(default_factory=dict)  # per topic, deferred included
    deferred: int = 0

    def add(self, topic: str, count: int) -> None:
        self.published[topic] = self.published.get(topic, 0) + count


def chunks(bodies: Sequence[bytes], max_count: int, max_bytes: int) -> Iterator[Sequence[bytes]]:
    """Consecutive runs of ``bodies`` that fit one MPUB (a body too big alone goes alone)."""
    start, size = 0, _COUNT_SIZE
    for i, body in enumerate(bodies):
        add = _LENGTH_SIZE + len(body)
        if i > start and (i - start >= max_count or size + add > max_bytes):
            yield bodies[start:i]
            start, size = i, _COUNT_SIZE
        size += add
    if start < len(bodies):
        yield bodies[start:]


class Publisher:
    """A task's connection to nsqd (the first reachable of ``opts.nsqd``, then round robin)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.counts = Counts()
        self._thread = LoopThread()
        try:
            self._producer = self._thread.run(self._connect())
        except BaseException:
            self._thread.stop()
            raise

    async def _connect(self) -> Producer:
        producer = Producer(list(self.opts.nsqd), config=self.opts.client_config())
        try:
            await producer.connect()
        except NotConnectedError as exc:
            await producer.close()
            raise SinkUnavailableError(
                f"nsq sink: cannot connect to any nsqd of {list(self.opts.nsqd)}: {exc}"
            ) from None
        return producer

    def publish(self, topic: str, bodies: Sequence[bytes], defers: Sequence[int] = ()) -> None:
        """Publish ``bodies``; ``defers`` (ms, same length, <= 0 for none) turns rows into DPUB."""
        if defers:
            now = [b for b, d in zip(bodies, defers, strict=True) if d <= 0]
            later = [(b, d) for b, d in zip(bodies, defers, strict=True) if d > 0]
        else:
            now, later = list(bodies), []
        self._thread.run(self._send(topic, now, later))
        self.counts.add(topic, len(bodies))
        self.counts.deferred += len(later)

    async def _send(self, topic: str, now: list[bytes], later: list[tuple[bytes, int]]) -> None:
        p = self._producer
        frames = chunks(now, self.opts.mpub_batch, self.opts.mpub_max_bytes)
        while group := list(islice(frames, WINDOW)):
            await asyncio.gather(*(p.multi_publish(topic, c) for c in group))
        for i in range(0, len(later), WINDOW * 8):
            await asyncio.gather(
                *(p.deferred_publish(topic, b, d / 1000) for b, d in later[i : i + WINDOW * 8])
            )

    def close(self) -> None:
        try:
            self._thread.run(self._producer.close())
        finally:
            self._thread.stop()

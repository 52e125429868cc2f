"""A blocking facade for scripts and Spark executors, over the same asyncio implementation.

One background thread runs an event loop; every call is submitted to it and waited for. No
second copy of the protocol logic exists: ``Producer``, ``Consumer`` and ``NsqdHTTPClient``
here only forward.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Self, TypeVar

from nsqpy.client import consumer as aconsumer
from nsqpy.client import http as ahttp
from nsqpy.client import producer as aproducer
from nsqpy.client.closing import Closing
from nsqpy.client.config import Config
from nsqpy.client.dead_letters import TTL, UNSET, QueueConfig, RedriveResult, Unset
from nsqpy.client.message import Message as AsyncMessage

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop when installed) on a daemon thread."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="nsqpy-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, func: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(func, *args)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    # Many answers in one hop: a per-message call_soon_threadsafe costs a lock and a wake-up
    # each, which dominates when a caller answers thousands of messages at once.

    def finish_many(self, messages: Sequence[AsyncMessage]) -> concurrent.futures.Future[int]:
        """FIN every message with one hop to the loop.

        The future gets how many went out on a live connection; the rest can no longer be
        answered (their connection dropped), so nsqd redelivers them after their timeout.
        """
        return self._answer_many(messages, AsyncMessage.finish)

    def requeue_many(
        self, messages: Sequence[AsyncMessage], delay: float = 0.0
    ) -> concurrent.futures.Future[int]:
        """REQ every message (``delay`` seconds, no backoff) with one hop to the loop."""
        return self._answer_many(messages, lambda msg: msg.requeue(delay, backoff=False))

    def touch_many(self, messages: Sequence[AsyncMessage]) -> concurrent.futures.Future[int]:
        """TOUCH every message not yet answered, with one hop to the loop."""
        return self._answer_many(messages, AsyncMessage.touch)

    def _answer_many(
        self, messages: Sequence[AsyncMessage], action: Callable[[AsyncMessage], None]
    ) -> concurrent.futures.Future[int]:
        done: concurrent.futures.Future[int] = concurrent.futures.Future()

        def run() -> None:
            try:
                sent = _answer_all(messages, action)
            except BaseException as exc:  # handed to the caller as well as to the loop
                done.set_exception(exc)
                raise
            done.set_result(sent)

        self.loop.call_soon_threadsafe(run)
        return done


def _answer_all(messages: Sequence[AsyncMessage], action: Callable[[AsyncMessage], None]) -> int:
    sent = 0
    for msg in messages:
        if not msg.responded and not msg._conn.closed:
            sent += 1
        action(msg)
    return sent


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Producer(Closing):
    """Blocking ``Producer``: same arguments, same methods, no ``await``."""

    def __init__(self, nsqd_tcp_addresses: str | Sequence[str], **kwargs: Any) -> None:
        self._thread = LoopThread()

        async def make() -> aproducer.Producer:
            return aproducer.Producer(nsqd_tcp_addresses, **kwargs)

        self._producer = self._thread.run(make())

    def __enter__(self) -> Self:
        self.connect()
        return self

    def connect(self) -> None:
        self._thread.run(self._producer.connect())

    def publish(self, topic: str, body: bytes) -> None:
        self._thread.run(self._producer.publish(topic, body))

    def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        self._thread.run(self._producer.multi_publish(topic, bodies))

    def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        self._thread.run(self._producer.deferred_publish(topic, body, delay))

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.run(self._producer.close())
            self._thread.stop()


class NsqdHTTPClient(Closing):
    """Blocking ``NsqdHTTPClient``: same arguments, same methods, no ``await``."""

    def __init__(self, address: str, *, timeout: float = 5.0) -> None:
        self._thread = LoopThread()

        async def make() -> ahttp.NsqdHTTPClient:
            # aiohttp's session belongs to the loop it is made on: make it on the thread's
            return ahttp.NsqdHTTPClient(address, timeout=timeout)

        self._http = self._thread.run(make())

    def __enter__(self) -> Self:
        return self

    def publish(self, topic: str, body: bytes, *, defer: float | None = None) -> None:
        self._thread.run(self._http.publish(topic, body, defer=defer))

    def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        self._thread.run(self._http.multi_publish(topic, bodies))

    def stats(self, topic: str = "", channel: str = "") -> dict[str, Any]:
        return self._thread.run(self._http.stats(topic, channel))

    def create_topic(self, topic: str) -> None:
        self._thread.run(self._http.create_topic(topic))

    def create_channel(self, topic: str, channel: str) -> None:
        self._thread.run(self._http.create_channel(topic, channel))

    def topic_config(self, topic: str) -> QueueConfig:
        return self._thread.run(self._http.topic_config(topic))

    def channel_config(self, topic: str, channel: str) -> QueueConfig:
        return self._thread.run(self._http.channel_config(topic, channel))

    def set_topic_config(
        self,
        topic: str,
        *,
        max_attempts: int | Unset | None = UNSET,
        message_ttl: TTL | Unset | None = UNSET,
        dead_letter_topic: str | Unset | None = UNSET,
    ) -> QueueConfig:
        return self._thread.run(self._http.set_topic_config(
            topic, max_attempts=max_attempts, message_ttl=message_ttl,
            dead_letter_topic=dead_letter_topic,
        ))  # fmt: skip

    def set_channel_config(
        self,
        topic: str,
        channel: str,
        *,
        max_attempts: int | Unset | None = UNSET,
        message_ttl: TTL | Unset | None = UNSET,
        dead_letter_topic: str | Unset | None = UNSET,
    ) -> QueueConfig:
        return self._thread.run(self._http.set_channel_config(
            topic, channel, max_attempts=max_attempts, message_ttl=message_ttl,
            dead_letter_topic=dead_letter_topic,
        ))  # fmt: skip

    def redrive(self, topic: str, channel: str | None = None) -> RedriveResult:
        return self._thread.run(self._http.redrive(topic, channel))

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.run(self._http.close())
            self._thread.stop()


class Message:
    """A message whose answers are handed to the loop thread (safe from any thread)."""

    __slots__ = ("_loop", "_msg")

    def __init__(self, msg: AsyncMessage, loop: LoopThread) -> None:
        self._msg = msg
        self._loop = loop

    @property
    def id(self) -> bytes:
        return self._msg.id

    @property
    def body(self) -> bytes:
        return self._msg.body

    @property
    def timestamp(self) -> int:
        return self._msg.timestamp

    @property
    def attempts(self) -> int:
        return self._msg.attempts

    @property
    def nsqd_address(self) -> str:
        return self._msg.nsqd_address

    def finish(self) -> None:
        self._loop.call(self._msg.finish)

    def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        self._loop.call(lambda: self._msg.requeue(delay, backoff=backoff))

    def touch(self) -> None:
        self._loop.call(self._msg.touch)


class Consumer(Closing):
    """Blocking ``Consumer``: iterate it (or call ``get``) and answer each message."""

    def __init__(self, topic: str, channel: str, **kwargs: Any) -> None:
        if "handler" in kwargs:
            raise TypeError("the blocking Consumer is iterated; it takes no handler")
        self._thread = LoopThread()
        self._messages: queue.Queue[AsyncMessage | None] = queue.Queue()

        async def make() -> aconsumer.Consumer:
            return aconsumer.Consumer(topic, channel, **kwargs)

        self._consumer = self._thread.run(make())
        self._pump: asyncio.Future[None] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    @property
    def config(self) -> Config:
        return self._consumer.config

    def start(self) -> None:
        self._thread.run(self._consumer.start())

        async def pump() -> None:
            async for msg in self._consumer:
                self._messages.put(msg)
            self._messages.put(None)

        self._pump = asyncio.run_coroutine_threadsafe(pump(), self._thread.loop)  # type: ignore[assignment]

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, or None on timeout or once the consumer is closed."""
        try:
            msg = self._messages.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg is None:
            self._messages.put(None)
            return None
        return Message(msg, self._thread)

    def __iter__(self) -> Iterator[Message]:
        while (msg := self.get()) is not None:
            yield msg

    def close(self, timeout: float = 30.0) -> None:
        if self._thread.loop.is_closed():
            return
        self._thread.run(self._consumer.close(timeout))
        self._thread.stop()
        self._messages.put(None)

"""Consumer: subscribe to a topic's channel on every nsqd that has it.

Two ways to take messages:

* ``handler=``: called for each message. A sync handler runs inline on the event loop (the
  fastest path: no task per message); an async one runs on ``concurrency`` worker tasks.
  Returning finishes the message, raising requeues it with backoff, unless the handler
  answered it itself or called ``msg.disable_auto_response()``.
* ``async for msg in consumer``: the caller answers each message.

A message delivered more than ``max_attempts`` times is passed to ``on_give_up`` and then
finished, as go-nsq does. ``close()`` sends CLS, waits for in-flight messages to be answered
(bounded), then disconnects.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Self

from nsqpy.client.backoff import Backoff, Step
from nsqpy.client.closing import AsyncClosing
from nsqpy.client.config import Config
from nsqpy.client.connection import NsqdConnection
from nsqpy.client.errors import NSQError
from nsqpy.client.message import Message
from nsqpy.client.pool import ConnectionPool
from nsqpy.client.rdy import is_starved
from nsqpy.protocol.names import is_valid_name

log = logging.getLogger("nsqpy.client")

Handler = Callable[[Message], None] | Callable[[Message], Awaitable[None]]
GiveUp = Callable[[Message], object]

_STOP = object()


@dataclass(slots=True)
class ConsumerStats:
    messages_received: int = 0
    messages_finished: int = 0
    messages_requeued: int = 0
    messages_given_up: int = 0


class Consumer(AsyncClosing):
    def __init__(
        self,
        topic: str,
        channel: str,
        *,
        nsqd_tcp_addresses: str | Sequence[str] = (),
        lookupd_http_addresses: str | Sequence[str] = (),
        config: Config | None = None,
        handler: Handler | None = None,
        concurrency: int = 1,
        on_give_up: GiveUp | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if not is_valid_name(topic):
            raise ValueError(f"invalid topic name {topic!r}")
        if not is_valid_name(channel):
            raise ValueError(f"invalid channel name {channel!r}")
        nsqd = _addresses(nsqd_tcp_addresses)
        lookupd = _addresses(lookupd_http_addresses)
        if not nsqd and not lookupd:
            raise ValueError("nsqd_tcp_addresses or lookupd_http_addresses required")
        self.topic = topic
        self.channel = channel
        self.config = config.copy() if config is not None else Config()
        if max_in_flight is not None:
            self.config.max_in_flight = max_in_flight
        self.handler = handler
        self.on_give_up = on_give_up
        self.concurrency = max(1, concurrency)
        self.stats = ConsumerStats()
        self._async_handler = handler is not None and inspect.iscoroutinefunction(handler)
        self._queue: asyncio.Queue[Message | object] = asyncio.Queue()
        self._backoff = Backoff(self.config.backoff_multiplier, self.config.max_backoff_duration)
        self._pool = ConnectionPool(topic, channel, self.config, self, nsqd, lookupd)
        self._workers: list[asyncio.Task[None]] = []
        self._backoff_timer: asyncio.TimerHandle | None = None
        self._started = False
        self._closing = False
        self._closed = asyncio.Event()

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (and start polling lookupd); returns after the first round of connects."""
        if self._started:
            return
        self._started = True
        if self._async_handler:
            self._workers = [
                asyncio.ensure_future(self._worker()) for _ in range(self.concurrency)
            ]
        await self._pool.start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def close(self, timeout: float = 30.0) -> None:  # noqa: ASYNC109 - a drain bound
        """CLS everywhere, wait (up to ``timeout``) for in-flight messages, then disconnect."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        await self._pool.stop()
        conns = list(self._pool.conns.values())
        await asyncio.gather(*(_cls(c) for c in conns), return_exceptions=True)
        self._requeue_unclaimed()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(c.wait_drained() for c in conns))
        except TimeoutError:
            log.warning("close: in-flight messages still unanswered after %.1fs", timeout)
        self._pool.close_all()
        await asyncio.gather(*(c.wait_closed() for c in conns))
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        for _ in range(max(1, self.concurrency)):
            self._queue.put_nowait(_STOP)
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    # --- state ---------------------------------------------------------------------------------

    @property
    def connections(self) -> dict[str, NsqdConnection]:
        return dict(self._pool.conns)

    def is_starved(self) -> bool:
        """True when a connection is close to its RDY: buffered work should be flushed."""
        return is_starved([(c.in_flight, c.rdy) for c in self._pool.conns.values()])

    def change_max_in_flight(self, max_in_flight: int) -> None:
        """go-nsq's ChangeMaxInFlight: respread RDY now; 0 stops deliveries without closing."""
        self.config.max_in_flight = max(0, max_in_flight)
        if self.config.max_in_flight == 0:
            self._pool.set_all_rdy(0)
        else:
            self._pool.update_rdy()

    @property
    def backoff_level(self) -> int:
        return self._backoff.counter

    # --- iteration -------------------------------------------------------------------------

    def __aiter__(self) -> Self:
        if self.handler is not None:
            raise TypeError("a Consumer with a handler cannot also be iterated")
        return self

    async def __anext__(self) -> Message:
        if not self._started:
            await self.start()
        item = await self._queue.get()
        if item is _STOP:
            self._queue.put_nowait(_STOP)  # let every other iterator stop too
            raise StopAsyncIteration
        assert isinstance(item, Message)
        return item

    # --- connection delegate ---------------------------------------------------------------------

    def on_message(self, conn: NsqdConnection, msg: Message) -> None:
        self.stats.messages_received += 1
        max_attempts = self.config.max_attempts
        if max_attempts and msg.attempts > max_attempts:
            self._give_up(msg)
            return
        if self.config.auto_touch:
            self._arm_touch(conn, msg)
        handler = self.handler
        if handler is None or self._async_handler:
            self._queue.put_nowait(msg)
            return
        try:
            handler(msg)
        except Exception as exc:  # noqa: BLE001 - a failing handler requeues its message only
            _handler_failed(msg, exc)
            return
        if msg._auto_response and not msg.responded:
            msg.finish()

    def on_response(
        self, conn: NsqdConnection, msg: Message, finished: bool, backoff: bool
    ) -> None:
        if msg.touch_handle is not None:
            msg.touch_handle.cancel()  # type: ignore[attr-defined]
        if finished:
            self.stats.messages_finished += 1
        else:
            self.stats.messages_requeued += 1
        if self._closing or (finished and not self._backoff.counter):
            return  # the per-message common case: a success with no backoff to unwind
        step = self._backoff.record(finished, backoff=backoff)
        if step is Step.PAUSE:
            self._enter_backoff()
        elif step is Step.RESUME:
            log.info("backoff over: resuming full RDY")
            self._pool.paused_rdy = False
            self._pool.update_rdy()

    def on_close(self, conn: NsqdConnection, exc: BaseException | None) -> None:
        self._pool.lost(conn, exc)

    # --- internals -------------------------------------------------------------------------------

    async def _worker(self) -> None:
        handler = self.handler
        assert handler is not None
        while True:
            item = await self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, Message)
            try:
                await handler(item)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - see on_message
                _handler_failed(item, exc)
                continue
            if item._auto_response and not item.responded:
                item.finish()

    def _give_up(self, msg: Message) -> None:
        self.stats.messages_given_up += 1
        log.warning(
            "message %s attempted %d > %d times, giving up",
            msg.id.decode(), msg.attempts, self.config.max_attempts,
        )
        if self.on_give_up is not None:
            # the user's hook is a boundary: its failure is logged and must not stop the FIN
            try:
                self.on_give_up(msg)
            except Exception:
                log.exception("on_give_up failed")
        msg.finish()

    def _arm_touch(self, conn: NsqdConnection, msg: Message) -> None:
        # TOUCH at half the negotiated timeout, for as long as the message is held
        interval = max(conn.settings.msg_timeout / 2, 0.05)
        loop = asyncio.get_running_loop()

        def touch() -> None:
            if not msg.responded and not conn.closed:
                msg.touch()
                msg.touch_handle = loop.call_later(interval, touch)

        msg.touch_handle = loop.call_later(interval, touch)

    def _enter_backoff(self) -> None:
        delay = self._backoff.delay
        log.warning("backing off for %.3fs (level %d)", delay, self._backoff.counter)
        self._pool.paused_rdy = True
        self._pool.set_all_rdy(0)
        if self._backoff_timer is not None:
            self._backoff_timer.cancel()
        self._backoff_timer = asyncio.get_running_loop().call_later(delay, self._backoff_over)

    def _backoff_over(self) -> None:
        self._backoff_timer = None
        self._backoff.pause_over()
        if not self._closing:
            self._pool.test_one()

    def _requeue_unclaimed(self) -> None:
        """Messages nobody has taken yet go back to nsqd at once."""
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, Message):
                item.requeue(0, backoff=False)


def _handler_failed(msg: Message, exc: Exception) -> None:
    # one line per failure, as go-nsq logs it; the traceback only at debug level
    log.warning("handler returned error (%r) for msg %s", exc, msg.id.decode())
    log.debug("handler traceback", exc_info=exc)
    msg.requeue()


async def _cls(conn: NsqdConnection) -> None:
    try:
        async with asyncio.timeout(conn.config.read_timeout):
            await conn.start_close()
    except (TimeoutError, NSQError):
        pass


def _addresses(value: str | Sequence[str]) -> list[str]:
    if isinstance(value, str):
        return [a.strip() for a in value.split(",") if a.strip()]
    return list(value)

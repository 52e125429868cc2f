"""nsq_to_file's per-topic loop: messages into the file, FIN only once they are on disk.

Every message is written (body + newline) and held. The held messages are FINished right after
an fsync, which happens on ``--sync-interval``, when ``--max-in-flight`` messages are held (nsqd
would send no more), when the consumer is starved (RDY nearly used up, so waiting longer only
stalls the flow; checked once the messages already delivered are written), when a new file is
opened, on SIGHUP and while shutting down. A crash therefore loses nothing that was
FINished: unsynced messages are still in flight at nsqd and will be redelivered.

All events (messages, ticks, signals, the consumer having stopped) go through one queue and are
handled by one task, so the file is only ever touched by one piece of code at a time, as in NSQ's
single ``router`` goroutine. Blocking file work (fsync, open, close and move) runs in a thread so
other topics' routers and the connections keep going meanwhile.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nsqpy.tools.file_logger import FileLogger


class RoutedMessage(Protocol):
    """What the router needs of a client message."""

    @property
    def body(self) -> bytes: ...

    def disable_auto_response(self) -> None: ...

    def finish(self) -> None: ...


class StarvableConsumer(Protocol):
    """What the router needs of the consumer feeding it."""

    def is_starved(self) -> bool: ...

    def start(self) -> Awaitable[None]: ...

    def close(self) -> Awaitable[None]: ...


Handler = Callable[[RoutedMessage], None]


class Signal(enum.Enum):
    TICK = "tick"
    HUP = "hup"
    TERM = "term"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class RouterOptions:
    max_in_flight: int = 200
    sync_interval: float = 30.0
    skip_empty_files: bool = False


@dataclass(slots=True)
class _Step:
    """What one event asks for, decided before any of it is done (NSQ's flags per loop)."""

    sync: bool = False
    close_file: bool = False
    exit: bool = False


class FileRouter:
    """Routes one topic's consumer into its FileLogger until the consumer has stopped."""

    def __init__(
        self,
        logger: FileLogger,
        make_consumer: Callable[[Handler], StarvableConsumer],
        opts: RouterOptions,
        *,
        log: logging.Logger,
    ) -> None:
        self.logger = logger
        self.opts = opts
        self._log = log
        self._tag = logger.tag
        self._inbox: asyncio.Queue[RoutedMessage | Signal] = asyncio.Queue()
        self._held: list[RoutedMessage] = []
        self._closing = False
        self._stop_task: asyncio.Task[None] | None = None
        #: events fully handled so far: lets a caller know the router has caught up
        self.handled = 0
        self.consumer = make_consumer(self.handle)

    # -- inputs -------------------------------------------------------------------------------

    def handle(self, msg: RoutedMessage) -> None:
        """The consumer's handler (inline, no task): the router answers once it is synced."""
        msg.disable_auto_response()
        self._inbox.put_nowait(msg)

    def tick(self) -> None:
        self._inbox.put_nowait(Signal.TICK)

    def hup(self) -> None:
        self._inbox.put_nowait(Signal.HUP)

    def terminate(self) -> None:
        self._inbox.put_nowait(Signal.TERM)

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Handle events until the consumer has stopped; FileLoggerFatal ends it early."""
        ticker = asyncio.create_task(self._tick_every(self.opts.sync_interval))
        try:
            while True:
                step = await self._on_event(await self._inbox.get())
                if step.sync or self._closing or self._starved():
                    await self._sync()
                if step.close_file:
                    await asyncio.to_thread(self.logger.close)
                self.handled += 1
                if step.exit:
                    return
        finally:
            ticker.cancel()

    async def _on_event(self, event: RoutedMessage | Signal) -> _Step:
        if event is Signal.TICK:
            return await self._on_tick()
        if event is Signal.HUP:
            return _Step(sync=True, close_file=True)
        if event is Signal.TERM:
            self._begin_stop()
            return _Step(sync=True)
        if event is Signal.STOPPED:
            return _Step(sync=True, close_file=True, exit=True)
        return await self._on_message(event)

    async def _on_tick(self) -> _Step:
        if not self.logger.needs_rotation():
            return _Step(sync=True)
        if self.opts.skip_empty_files:
            # Leave opening the next file to the next message, so no file is ever empty.
            return _Step(sync=True, close_file=True)
        await asyncio.to_thread(self.logger.update_file)
        return _Step(sync=True)

    async def _on_message(self, msg: RoutedMessage) -> _Step:
        step = _Step()
        if self.logger.needs_rotation():
            await asyncio.to_thread(self.logger.update_file)
            step.sync = True
        self.logger.write(msg.body)
        self.logger.write(b"\n")
        self._held.append(msg)
        if len(self._held) >= self.opts.max_in_flight:
            step.sync = True  # nsqd sends no more until some are answered
        return step

    def _starved(self) -> bool:
        """Whether waiting for more would stall the flow: nsqd has (nearly) used up RDY and
        every message it sent is written. NSQ asks the consumer after each message, which
        under load, with the rest of the window already delivered and queued, means one fsync
        per message (nsq#880 reports many tiny syncs); writing the queued ones first gives
        one fsync per window with the same guarantee."""
        return self._inbox.empty() and self.consumer.is_starved()

    async def _sync(self) -> None:
        if not self._held:
            return
        self._log.info("%s syncing %d records to disk", self._tag, len(self._held))
        await asyncio.to_thread(self.logger.sync)
        held, self._held = self._held, []
        for msg in held:
            msg.finish()

    # -- stopping -----------------------------------------------------------------------------

    def _begin_stop(self) -> None:
        """Close the consumer in the background; messages still arriving are synced at once."""
        if self._stop_task is not None:
            return
        self._closing = True
        self._stop_task = asyncio.create_task(self._stop_consumer())

    async def _stop_consumer(self) -> None:
        try:
            await self.consumer.close()
        except Exception:  # noqa: BLE001 - the file must still be closed and moved
            self._log.exception("%s error while stopping the consumer", self._tag)
        finally:
            self._inbox.put_nowait(Signal.STOPPED)

    async def _tick_every(self, interval: float) -> None:
        while not self._closing:
            await asyncio.sleep(interval)
            self.tick()

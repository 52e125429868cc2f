"""nsq_tail's work: consume topics and print each message body (one line per message).

Bodies go to stdout as raw bytes followed by ``\\n`` (``topic | `` first with
``print_topic``); the output is flushed once per event-loop pass, not once per message. With
``total`` set, each topic's printer stops after that many messages, as NSQ's per-topic
handlers do, and the whole tail ends (NSQ exits on the spot; we FIN what we printed and close).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from nsqpy.client import Config, Consumer, Message, NSQError


def random_channel(rng: random.Random | None = None) -> str:
    """An ephemeral channel of one's own, named as NSQ names it: ``tail%06d#ephemeral``."""
    number = (rng or random.Random()).randrange(999999)  # Go: rand.Int() % 999999
    return f"tail{number:06d}#ephemeral"


class TailError(Exception):
    """Writing to the output failed (NSQ: ``ERROR: failed to write to os.Stdout - ...``)."""


class Printer:
    """One topic's handler: prints bodies until ``total`` (0 = no limit) have been shown."""

    def __init__(
        self,
        topic: str,
        out: BinaryIO,
        *,
        total: int = 0,
        print_topic: bool = False,
        on_done: Callable[[], None],
        on_error: Callable[[str], None],
    ) -> None:
        self.prefix = f"{topic} | ".encode() if print_topic else b""
        self.out = out
        self.total = total
        self.shown = 0
        self._on_done = on_done
        self._on_error = on_error
        self._flush_pending = False

    def done(self) -> bool:
        return self.total > 0 and self.shown >= self.total

    def handle(self, msg: Message) -> None:
        if self.done():
            # Past the limit (in flight before we stopped): hand it back unprinted.
            msg.requeue(0, backoff=False)
            return
        try:
            self.out.write(self.prefix + msg.body + b"\n")
        except (OSError, ValueError) as err:
            self._fail(err)
            return
        self.shown += 1
        self._schedule_flush()
        if self.done():
            self._on_done()

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_pending = False
        try:
            self.out.flush()
        except (OSError, ValueError) as err:
            self._fail(err)

    def _fail(self, err: Exception) -> None:
        self._on_error(f"ERROR: failed to write to os.Stdout - {err}")


@dataclass(frozen=True, slots=True)
class TailOptions:
    topics: Sequence[str]
    channel: str
    config: Config
    nsqd_tcp_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()
    total: int = 0
    print_topic: bool = False


async def tail(opts: TailOptions, out: BinaryIO, log: Callable[[str], None]) -> None:
    """Print until ``total`` messages of some topic were shown; cancel to stop sooner.

    Raises TailError if the output cannot be written.
    """
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done() -> None:
        # RDY 0 first: a REQ of a message past the limit must not bring it straight back
        # (each round trip would cost an attempt until max_attempts FINs it unprinted)
        for consumer in consumers:
            consumer.change_max_in_flight(0)
        if not finished.done():
            finished.set_result(None)

    def failed(message: str) -> None:
        if not finished.done():
            finished.set_exception(TailError(message))

    consumers: list[Consumer] = []
    printers: list[Printer] = []
    try:
        for topic in opts.topics:
            log(f"Adding consumer for topic: {topic}")
            printer = Printer(
                topic, out, total=opts.total, print_topic=opts.print_topic,
                on_done=done, on_error=failed,
            )  # fmt: skip
            printers.append(printer)
            consumers.append(_consumer(opts, topic, printer))
            await consumers[-1].start()
        await finished
    finally:
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
        for printer in printers:
            printer.flush()


def _consumer(opts: TailOptions, topic: str, printer: Printer) -> Consumer:
    try:
        return Consumer(
            topic, opts.channel, config=opts.config, handler=printer.handle,
            nsqd_tcp_addresses=opts.nsqd_tcp_addresses,
            lookupd_http_addresses=opts.lookupd_http_addresses,
        )  # fmt: skip
    except (ValueError, NSQError) as err:  # NSQ: log.Fatal(err) from nsq.NewConsumer
        raise TailError(str(err)) from None

"""nsq_to_nsq's work: consume topics and re-publish each message to destination nsqd.

Per message (NSQ's PublishHandler): optionally decode the body as JSON and filter it (see
:mod:`nsqpy.tools.json_filter`), pick a destination by ``--mode`` (see
:mod:`nsqpy.tools.hostpool`), publish without waiting, and answer the message when nsqd
answers the publish: FIN on success, REQ with the consumer's default delay and backoff on
failure. Publish latencies are logged every ``status_every`` per destination and in aggregate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nsqpy.client import Config, Consumer, Message, NSQError, Producer
from nsqpy.tools.epsilon_greedy import EpsilonGreedyPool
from nsqpy.tools.hostpool import HostPool, RoundRobin
from nsqpy.tools.json_filter import JSONFilter, NotJSONObject, Verdict, decode_object
from nsqpy.tools.timer_metrics import TimerMetrics

Log = Callable[[str], None]
Selector = RoundRobin | HostPool


def selector_for_mode(mode: str, addresses: Sequence[str]) -> Selector:
    """NSQ's ``--mode``: ``hostpool``, ``epsilon-greedy``, and — for ``round-robin`` or any
    unknown mode, as NSQ's switch falls through — round robin."""
    if mode == "hostpool":
        return HostPool(addresses)
    if mode == "epsilon-greedy":
        return EpsilonGreedyPool(addresses)
    return RoundRobin(addresses)


class RelayError(Exception):
    """The relay could not be set up (NSQ: ``log.Fatal``)."""


@dataclass(frozen=True, slots=True)
class RelayOptions:
    topics: Sequence[str]
    channel: str
    destination_nsqd_tcp_addresses: Sequence[str]
    consumer_config: Config
    producer_config: Config
    destination_topic: str = ""  # "" keeps each consumed topic's name
    nsqd_tcp_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()
    mode: str = "hostpool"
    status_every: int = 250
    json_filter: JSONFilter = field(default_factory=JSONFilter)


def _metrics(opts: RelayOptions, log: Log) -> dict[str, TimerMetrics]:
    addresses = opts.destination_nsqd_tcp_addresses
    if len(addresses) == 1:  # one destination: the aggregate says it all
        return {addresses[0]: TimerMetrics(0, "", log)}
    return {a: TimerMetrics(opts.status_every, f"[{a}]:", log) for a in addresses}


class Publisher:
    """Filters, routes and publishes messages; answers each when its publish completes."""

    def __init__(
        self,
        producers: Mapping[str, Producer],
        selector: Selector,
        json_filter: JSONFilter,
        per_address: Mapping[str, TimerMetrics],
        aggregate: TimerMetrics,
        log: Log,
    ) -> None:
        self._producers = producers
        self._selector = selector
        self._filter = json_filter
        self._per_address = per_address
        self._aggregate = aggregate
        self._log = log
        self._pending: set[asyncio.Task[None]] = set()

    def handler_for(self, destination_topic: str) -> Callable[[Message], None]:
        def handle(msg: Message) -> None:
            self.handle(msg, destination_topic)

        return handle

    def handle(self, msg: Message, destination_topic: str) -> None:
        body = self._body(msg)
        if body is None or msg.responded:
            return  # filtered out (FIN without publishing) or already requeued
        address = self._selector.get()
        msg.disable_auto_response()
        task = asyncio.ensure_future(self._publish(msg, destination_topic, body, address))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _body(self, msg: Message) -> bytes | None:
        """The body to publish, or None to drop it (or after requeueing it)."""
        if not self._filter.active:
            return msg.body
        try:
            obj = decode_object(msg.body)
        except NotJSONObject:
            self._log("ERROR: Unable to decode json: " + msg.body.decode("utf-8", "replace"))
            return None
        verdict = self._filter.verdict(obj)
        if verdict is Verdict.BACKOFF:
            self._log("ERROR: missing field to check required value")
            # NSQ returns an error here; requeueing ourselves has the same effect (REQ with
            # the default delay and backoff) without the client logging a traceback.
            msg.requeue()
            return None
        if verdict is Verdict.DROP:
            return None
        return self._filter.filtered(obj, msg.body)

    async def _publish(self, msg: Message, topic: str, body: bytes, address: str) -> None:
        started = time.monotonic_ns()
        try:
            await self._producers[address].publish(topic, body)
        except (NSQError, OSError):
            ok = False
            msg.requeue()  # the consumer's default delay, with backoff (NSQ: Requeue(-1))
        else:
            ok = True
            msg.finish()
        elapsed = time.monotonic_ns() - started
        if isinstance(self._selector, EpsilonGreedyPool):
            self._selector.mark_timed(address, ok, elapsed / 1e9)
        else:
            self._selector.mark(address, ok)
        self._per_address[address].record(elapsed)
        self._aggregate.record(elapsed)

    async def drain(self) -> None:
        if self._pending:
            await asyncio.wait(set(self._pending))


async def relay(opts: RelayOptions, log: Log) -> None:
    """Relay until cancelled; consumers are drained and closed, then the producers."""
    addresses = list(opts.destination_nsqd_tcp_addresses)
    try:
        producers = {
            a: Producer([a], config=opts.producer_config) for a in dict.fromkeys(addresses)
        }
    except ValueError as err:
        raise RelayError(f"failed creating producer {err}") from None
    publisher = Publisher(
        producers,
        selector_for_mode(opts.mode, addresses),
        opts.json_filter,
        _metrics(opts, log),
        TimerMetrics(opts.status_every, "[aggregate]:", log),
        log,
    )
    consumers: list[Consumer] = []
    try:
        consumers.extend(_consumer(opts, t, publisher, len(addresses)) for t in opts.topics)
        for consumer in consumers:
            await consumer.start()
        await asyncio.Event().wait()  # runs until cancelled
    finally:
        # Closing a consumer waits for its in-flight messages, which our publishes answer.
        await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
        await publisher.drain()
        await asyncio.gather(*(p.close() for p in producers.values()), return_exceptions=True)


def _consumer(opts: RelayOptions, topic: str, publisher: Publisher, concurrency: int) -> Consumer:
    try:
        return Consumer(
            topic,
            opts.channel,
            nsqd_tcp_addresses=opts.nsqd_tcp_addresses,
            lookupd_http_addresses=opts.lookupd_http_addresses,
            config=opts.consumer_config,
            handler=publisher.handler_for(opts.destination_topic or topic),
            concurrency=concurrency,
        )
    except (ValueError, NSQError) as err:
        raise RelayError(str(err)) from None

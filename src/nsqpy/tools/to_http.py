"""nsq_to_http as a library: consume one topic/channel into HTTP requests until told to stop."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

import aiohttp

from nsqpy.client import Config, Consumer
from nsqpy.tools.http_sink import HttpSink, SinkOptions
from nsqpy.tools.timer_metrics import Log


@dataclass(frozen=True, slots=True)
class ToHttpOptions:
    topic: str
    channel: str
    sink: SinkOptions
    nsqd_tcp_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()
    concurrency: int = 100
    connect_timeout: float = 2.0
    request_timeout: float = 20.0


async def serve(opts: ToHttpOptions, cfg: Config, *, stop: Awaitable[None], log: Log) -> int:
    """Publish until ``stop`` completes, then drain in-flight requests and close (returns 0)."""
    # Go's http.Client reads a zero timeout as "none"; so does aiohttp for None.
    timeout = aiohttp.ClientTimeout(
        total=opts.request_timeout or None, sock_connect=opts.connect_timeout or None
    )
    # --n bounds the requests in progress; the pool must not bound them lower.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        sink = HttpSink(opts.sink, session, log=log)
        consumer = Consumer(
            opts.topic,
            opts.channel,
            nsqd_tcp_addresses=list(opts.nsqd_tcp_addresses),
            lookupd_http_addresses=list(opts.lookupd_http_addresses),
            config=cfg,
            handler=sink.handle,
            concurrency=max(1, opts.concurrency),
        )
        await consumer.start()
        try:
            await stop
        finally:
            await consumer.close()
    return 0

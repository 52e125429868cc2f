"""nsq_to_file as a library: consume topics into files until told to stop.

``serve`` wires the pieces: a TopicDiscoverer whose routers each own a Consumer and a FileLogger.
SIGHUP makes every router sync and close its file (the next message opens a new one); the
``stop`` awaitable (SIGINT/SIGTERM in the command) makes every router drain its consumer, sync,
close and move its file, after which ``serve`` returns 0. A file error is NSQ's FATAL: logged,
and ``serve`` returns 1 at once, leaving unsynced messages to be redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

import aiohttp

from nsqpy.client import Config, Consumer
from nsqpy.tools.file_logger import FileLogger, FileLoggerFatal
from nsqpy.tools.file_names import FileOptions
from nsqpy.tools.file_router import FileRouter, Handler, RouterOptions
from nsqpy.tools.topic_discoverer import TopicDiscoverer, lookupd_topics


@dataclass(frozen=True, slots=True)
class ToFileOptions:
    """Everything nsq_to_file's flags decide, durations in seconds."""

    channel: str = "nsq_to_file"
    topics: Sequence[str] = ()
    topic_pattern: str = ""
    topic_refresh: float = 60.0
    nsqd_tcp_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()
    http_connect_timeout: float = 2.0
    http_request_timeout: float = 5.0
    file: FileOptions = field(default_factory=FileOptions)
    router: RouterOptions = field(default_factory=RouterOptions)


class _App:
    def __init__(self, opts: ToFileOptions, cfg: Config, log: logging.Logger) -> None:
        self.opts = opts
        self.cfg = cfg
        self.log = log

    async def start_router(self, topic: str) -> FileRouter:
        opts = self.opts
        logger = FileLogger(opts.file, topic, opts.channel, log=self.log)

        def consumer(handler: Handler) -> Consumer:
            return Consumer(
                topic,
                opts.channel,
                nsqd_tcp_addresses=list(opts.nsqd_tcp_addresses),
                lookupd_http_addresses=list(opts.lookupd_http_addresses),
                config=self.cfg,
                handler=handler,
            )

        router = FileRouter(logger, consumer, opts.router, log=self.log)
        await router.consumer.start()
        return router


async def serve(
    opts: ToFileOptions, cfg: Config, *, stop: Awaitable[None], log: logging.Logger
) -> int:
    """Run until ``stop`` completes (0) or a file operation fails (1, logged as FATAL)."""
    app = _App(opts, cfg, log)
    timeout = aiohttp.ClientTimeout(
        total=opts.http_request_timeout, sock_connect=opts.http_connect_timeout
    )
    async with aiohttp.ClientSession(timeout=timeout) as session:
        discoverer = TopicDiscoverer(
            topics=opts.topics,
            pattern=opts.topic_pattern,
            refresh=opts.topic_refresh,
            fetch_topics=lambda: lookupd_topics(session, opts.lookupd_http_addresses),
            start_router=app.start_router,
            log=log,
        )
        stopper = asyncio.ensure_future(stop)
        stopper.add_done_callback(lambda _: discoverer.terminate())
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, discoverer.hup)
        try:
            await discoverer.run()
        except FileLoggerFatal as err:
            log.critical("%s", err)
            return 1
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopper
    return 0

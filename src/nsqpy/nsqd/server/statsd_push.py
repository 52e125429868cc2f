"""The adapter that sends nsqd's statsd output: ``statsd`` builds the packets, this sends them.

nsqd's statsdLoop: every ``--statsd-interval`` one push over a fresh UDP socket, its packets
spread evenly over ``interval - 1s`` so a large cluster does not burst into the statsd daemon.
On shutdown the packets still waiting go out at once and the loop ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nsqpy.nsqd.observe import stats, statsd
from nsqpy.nsqd.options import NsqdOptions

log = logging.getLogger("nsqd")


class StatsdPusher:
    """One task pushing ``collect()``'s snapshot to ``hostport`` (None: not a host:port)."""

    def __init__(
        self,
        opts: NsqdOptions,
        hostport: tuple[str, int] | None,
        http_port: int,
        collect: Callable[[], stats.Stats],
    ) -> None:
        self._opts = opts
        self._hostport = hostport
        self._collect = collect
        self._report = statsd.Report(
            statsd.prefix_for(
                opts.statsd_prefix, opts.broadcast_address, opts.broadcast_http_port or http_port
            ),
            opts.statsd_exclude_ephemeral,
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._opts.statsd_mem_stats:
            stats.install_gc_pause_recorder()
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None:
            await asyncio.wait([task])  # never raises: a failed push must not stop shutdown
            if not task.cancelled() and (err := task.exception()) is not None:
                log.error("STATSD: stopped by an error - %r", err)

    async def _wait(self, seconds: float) -> bool:
        """Sleep, cut short by shutdown; True once shutting down."""
        if seconds > 0 and not self._stop.is_set():
            try:
                async with asyncio.timeout(seconds):
                    await self._stop.wait()
            except TimeoutError:
                pass
        return self._stop.is_set()

    async def _run(self) -> None:
        # Ticks missed while a push was still spreading its packets are skipped, as a Go
        # ticker's are.
        loop = asyncio.get_running_loop()
        interval = self._opts.statsd_interval / 1e9
        due = loop.time() + interval
        while not await self._wait(due - loop.time()):
            await self._push(interval)
            now = loop.time()
            while due <= now:
                due += interval
        log.info("STATSD: closing")

    async def _push(self, interval: float) -> None:
        opts = self._opts
        address = opts.statsd_address
        try:
            if self._hostport is None:
                raise OSError("not a host:port")
            transport, _ = await asyncio.wait_for(
                asyncio.get_running_loop().create_datagram_endpoint(
                    asyncio.DatagramProtocol, remote_addr=self._hostport
                ),
                timeout=1.0,
            )
        except (OSError, TimeoutError):
            log.error("failed to create UDP socket to statsd(%s)", address)
            return
        try:
            log.info("STATSD: pushing stats to %s", address)
            memory = stats.memory_stats() if opts.statsd_mem_stats else None
            lines = self._report.lines(self._collect(), memory)
            packets = statsd.pack(lines, opts.statsd_udp_packet_size)
            spread = interval - 1.0
            if not packets:
                await self._wait(spread)
            for packet in packets:
                transport.sendto(packet)
                await self._wait(spread / len(packets))
        finally:
            transport.close()

"""What a ``/metrics`` scrape and a backlog-alert check cost, by number of topics and channels.

Builds a broker in memory (``--topics`` x ``--channels``, ``--messages`` queued in each channel)
and times, with ``timeit``:

- ``render``: ``stats.collect`` plus ``metrics.metrics_text`` (the work of one scrape);
- ``scrape``: ``GET /metrics`` on a real in-process nsqd over HTTP (render + aiohttp + socket);
- ``alert check``: ``alerts.probe`` plus ``AlertMonitor.check`` with a depth and an age rule on
  every queue (what nsqd does every ``--alert-check-interval``).

Run twice with different ``--messages`` to see that neither depends on how many are queued.

    python -m benchmarks.bench_metrics --topics 100 --channels 10 --messages 0
    python -m benchmarks.bench_metrics --topics 100 --channels 10 --messages 1000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import timeit

import aiohttp

from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.core.broker import Broker
from nsqpy.nsqd.observe import alerts, metrics, stats
from nsqpy.nsqd.options import NsqdOptions


def fill(broker: Broker, topics: int, channels: int, messages: int) -> None:
    for t in range(topics):
        topic = broker.get_topic(f"topic-{t:03d}")
        for c in range(channels):
            broker.get_channel(topic, f"channel-{c:02d}", 0.0)
        for start in range(0, messages, 1000):
            n = min(1000, messages - start)
            now_ns = time.time_ns()
            topic.put([b"x" * 100] * n, broker.guid.new_ids(n, now_ns), now_ns, 0.0)


def per_call_ms(func: object, number: int, repeat: int = 5) -> float:
    """The best of ``repeat`` timings of ``number`` calls, per call, in ms."""
    timer = timeit.Timer(func)  # type: ignore[arg-type]
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e3


def bench_render(nsqd: NSQD, number: int) -> tuple[float, int]:
    state = metrics.DaemonState("1.3.0", "OK", nsqd.start_time, 0, 0)

    def render() -> str:
        snapshot = stats.collect(nsqd.broker.topics, nsqd.clients, include_clients=False)
        return metrics.metrics_text(snapshot, state, nsqd.alerts)

    return per_call_ms(render, number), len(render())


def bench_alert_check(nsqd: NSQD, number: int) -> float:
    monitor = alerts.AlertMonitor(alerts.AlertRules.parse(["1000000"], ["1h"]))

    def check() -> None:
        monitor.check(time.time_ns(), alerts.probe(nsqd.broker.topics, monitor.rules))

    return per_call_ms(check, number)


async def bench_scrape(nsqd: NSQD, number: int) -> float:
    url = f"http://127.0.0.1:{nsqd.http_port}/metrics"
    timings = []
    async with aiohttp.ClientSession() as session:
        for _ in range(number):
            start = time.perf_counter()
            async with session.get(url) as resp:
                await resp.read()
            timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e3


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--messages", type=int, default=0, help="queued per channel")
    parser.add_argument("--number", type=int, default=20, help="calls per timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_path:
        opts = NsqdOptions(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0")
        opts.data_path = data_path
        opts.mem_queue_size = max(args.messages, 1)
        opts.alert_depths = ["1000000"]  # so the scrape includes the alert families too
        nsqd = NSQD(opts)
        await nsqd.start()
        try:
            fill(nsqd.broker, args.topics, args.channels, args.messages)
            render_ms, size = bench_render(nsqd, args.number)
            check_ms = bench_alert_check(nsqd, args.number)
            scrape_ms = await bench_scrape(nsqd, args.number)
        finally:
            await nsqd.stop()
    queues = args.topics * (args.channels + 1)
    print(
        f"{args.topics} topics x {args.channels} channels, {args.messages} messages queued "
        f"per channel ({queues} queues, /metrics body {size / 1024:.0f} KiB):\n"
        f"  render {render_ms:.1f} ms, scrape over HTTP {scrape_ms:.1f} ms (median), "
        f"alert check {check_ms:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())

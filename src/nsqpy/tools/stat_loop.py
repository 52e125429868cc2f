"""nsq_stat's polling loop: find the nodes with the topic, sum the channel, print a row.

Every poll asks afresh which nsqd have the topic (lookupd ``/lookup``, or each given nsqd's
``/stats``), then reads ``/stats`` for the topic/channel from each. Like NSQ, any failure —
even one node out of several — ends the program with a fatal error (:class:`StatError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp

from nsqpy.tools.clusterinfo import (
    ClusterError,
    Node,
    lookupd_topic_nodes,
    nsqd_stats,
    nsqd_topic_nodes,
)
from nsqpy.tools.stat import ChannelTotals, StatReport, aggregate_channel


class StatError(Exception):
    """A poll failed; the message is nsq_stat's fatal log text."""


@dataclass(frozen=True, slots=True)
class StatOptions:
    topic: str
    channel: str
    interval: float  # seconds
    connect_timeout: float
    request_timeout: float
    count: int | None  # None: until stopped
    nsqd_http_addresses: Sequence[str] = ()
    lookupd_http_addresses: Sequence[str] = ()


async def _topic_nodes(session: aiohttp.ClientSession, opts: StatOptions) -> list[Node]:
    try:
        if opts.lookupd_http_addresses:
            found = await lookupd_topic_nodes(session, opts.topic, opts.lookupd_http_addresses)
        else:
            found = await nsqd_topic_nodes(session, opts.topic, opts.nsqd_http_addresses)
    except ClusterError as err:
        raise StatError(f"ERROR: failed to get topic producers - {err}") from None
    if found.errors:
        # clusterinfo returns partial results with an error list; nsq_stat treats that
        # error like any other: fatal.
        raise StatError("ERROR: failed to get topic producers - " + found.error_text())
    return found.items


async def poll(session: aiohttp.ClientSession, opts: StatOptions) -> ChannelTotals:
    """One poll: the channel's totals across the cluster, or StatError."""
    nodes = await _topic_nodes(session, opts)
    try:
        found = await nsqd_stats(session, nodes, opts.topic, opts.channel)
    except ClusterError as err:
        raise StatError(f"ERROR: failed to get nsqd stats - {err}") from None
    if found.errors:
        raise StatError("ERROR: failed to get nsqd stats - " + found.error_text())
    totals = aggregate_channel(found.items, opts.topic, opts.channel)
    if totals is None:
        raise StatError(
            f"ERROR: failed to find channel({opts.channel}) in stats metadata"
            f" for topic({opts.topic})"
        )
    return totals


async def stat_loop(
    opts: StatOptions,
    write: Callable[[str], None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Poll ``count + 1`` times (the first poll is the baseline), or until cancelled."""
    timeout = aiohttp.ClientTimeout(total=opts.request_timeout, sock_connect=opts.connect_timeout)
    report = StatReport(opts.interval)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        polls = 0
        while opts.count is None or polls <= opts.count:
            write(report.add(await poll(session, opts)))
            polls += 1
            if opts.count is None or polls <= opts.count:
                await sleep(opts.interval)

"""The sampler behind the built-in charts: every interval, each nsqd's ``/stats`` into History.

One task. Each round finds the nodes (lookupd ``/nodes``, or the ``--nsqd-http-address`` list,
named by their ``/info`` as the API names them), GETs every node's
``/stats?format=json&include_clients=false&include_mem=false`` concurrently, records the round
in ``History`` and keeps each node's ``"alerts"`` list (issue 10's backlog alerts; absent key:
none) and the dead-letter topics its channels name (nsqpy's ``dead_letter_topic`` field: what
``/api/dead_letter_topics`` lists, so the UI knows a dead-letter topic by more than its name).
A round's failures become the ``WARNING: ...`` of ``/api/history`` and ``/api/alerts``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from nsqpy.nsqadmin.cluster import ClusterError, ClusterInfo, Errors
from nsqpy.nsqadmin.history import History
from nsqpy.nsqadmin.options import NsqadminOptions
from nsqpy.nsqadmin.producers import Producer
from nsqpy.nsqadmin.upstream import UpstreamError

log = logging.getLogger("nsqpy.nsqadmin")

_NS: Final = 1_000_000_000
#: What the sampler asks each nsqd for (nsqpy-cluster recognises these requests in logs).
STATS_QUERY: Final = "format=json&include_clients=false&include_mem=false"
_ALERT_KINDS: Final = frozenset({"depth", "age"})


def history_capacity(opts: NsqadminOptions) -> int:
    """Points per series: history_duration / sample_interval, at least one."""
    return max(1, -(-opts.history_duration // opts.sample_interval))


def _text(doc: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        value = doc.get(key)
        if isinstance(value, str):
            return value
    return ""


def _number(doc: Mapping[str, Any], key: str) -> int | float:
    value = doc.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def parse_alerts(node: str, stats: Mapping[str, Any]) -> list[dict[str, object]]:
    """The ``alerts`` of one node's /stats in ``/api/alerts``' shape (unknown kinds skipped).

    nsqd writes an age alert's value and threshold in nanoseconds (Go's JSON unit for
    durations); ``/api/alerts`` gives them in seconds.
    """
    raw = stats.get("alerts")
    alerts: list[dict[str, object]] = []
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, Mapping) or item.get("kind") not in _ALERT_KINDS:
            continue
        kind = item["kind"]
        value, threshold = _number(item, "value"), _number(item, "threshold")
        if kind == "age":
            value, threshold = value / _NS, threshold / _NS
        alerts.append(
            {
                "node": node,
                "topic": _text(item, "topic", "topic_name"),
                "channel": _text(item, "channel", "channel_name"),
                "kind": kind,
                "value": value,
                "threshold": threshold,
                "since": _number(item, "since"),
            }
        )
    return alerts


def _channels(stats: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(topic name, channel) for every channel of one node's /stats."""
    topics = stats.get("topics")
    for topic in topics if isinstance(topics, list) else ():
        channels = topic.get("channels") if isinstance(topic, Mapping) else None
        for channel in channels if isinstance(channels, list) else ():
            if isinstance(channel, Mapping):
                yield _text(topic, "topic_name"), channel


def dead_letter_origins(
    rounds: Mapping[str, Mapping[str, Any] | None],
) -> dict[str, list[dict[str, str]]]:
    """Every dead-letter topic a channel names in one round, with the channels naming it
    (sorted). A node that did not answer this round contributes nothing."""
    found: dict[str, set[tuple[str, str]]] = {}
    for stats in rounds.values():
        for topic, channel in _channels(stats or {}):
            if target := _text(channel, "dead_letter_topic"):
                found.setdefault(target, set()).add((topic, _text(channel, "channel_name")))
    return {
        name: [{"topic": t, "channel": c} for t, c in sorted(found[name])] for name in sorted(found)
    }


def warning(errors: Errors) -> str:
    """nsqadmin's maybeWarnMsg for one list of errors."""
    return f"WARNING: {errors.text()}" if errors else ""


class Sampler:
    """Samples the cluster into ``history``; ``alerts`` and ``message`` describe the last
    round. ``clock`` gives wall-clock seconds (the points' ``ts``)."""

    def __init__(self, opts: NsqadminOptions, ci: ClusterInfo, clock: Callable[[], float]) -> None:
        self.opts = opts
        self.ci = ci
        self.clock = clock
        self.history = History(history_capacity(opts))
        self.alerts: dict[str, list[dict[str, object]]] = {}
        self.dead_letters: dict[str, list[dict[str, str]]] = {}
        self.message = ""
        self.rounds = 0  # completed rounds, failed ones included
        self._names: dict[str, str] = {}  # --nsqd-http-address -> node name from /info
        self._task: asyncio.Task[None] | None = None
        self._round = asyncio.Lock()

    @property
    def interval(self) -> float:
        return self.opts.sample_interval / _NS

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="nsqadmin-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while True:
            await self.sample_once()
            next_round = max(next_round + self.interval, loop.time())
            await asyncio.sleep(next_round - loop.time())

    async def sample_once(self) -> None:
        """One round (also the tests' way to sample without waiting). Rounds never overlap:
        a late round would record stale stats after a newer one."""
        async with self._round:
            await self._sample()

    async def _sample(self) -> None:
        ts = self.clock()
        errors = Errors()
        try:
            targets = await self._targets(errors)
        except ClusterError as err:
            self.message = f"WARNING: {err}"
            self.rounds += 1
            return
        results = await asyncio.gather(*(self._stats(url) for url in targets.values()))
        rounds: dict[str, Mapping[str, Any] | None] = {}
        for node, result in zip(targets, results, strict=True):
            if isinstance(result, UpstreamError):
                errors.items.append(str(result))
                rounds[node] = None
            else:
                rounds[node] = result
        self.history.record(ts, rounds)
        self.alerts = {
            node: parse_alerts(node, stats) for node, stats in rounds.items() if stats is not None
        }
        self.dead_letters = dead_letter_origins(rounds)
        self.message = warning(errors)
        self.rounds += 1

    async def _stats(self, url: str) -> Mapping[str, Any] | UpstreamError:
        try:
            doc = await self.ci.upstream.get_v1(url)
        except UpstreamError as err:
            return err
        return doc if isinstance(doc, Mapping) else {}

    async def _targets(self, errors: Errors) -> dict[str, str]:
        """node name -> its /stats URL for this round."""
        if self.opts.nsqlookupd_http_addresses:
            producers, found_errors = await self.ci.lookupd_producers(
                self.opts.nsqlookupd_http_addresses
            )
            errors.add(found_errors)
        else:
            producers = await self._named_nsqds(errors)
        return {p.http_address: f"http://{p.http_address}/stats?{STATS_QUERY}" for p in producers}

    async def _named_nsqds(self, errors: Errors) -> list[Producer]:
        """The configured nsqd, named as the API names them (learnt once from /info, so a node
        that goes down keeps its name and its series)."""
        producers = []
        for address in self.opts.nsqd_http_addresses:
            name = self._names.get(address)
            if name is None:
                try:
                    info = await self.ci.upstream.get_v1(f"http://{address}/info")
                except UpstreamError as err:
                    errors.items.append(str(err))
                    continue
                producer = Producer.from_nsqd(info if isinstance(info, dict) else {}, [], address)
                name = self._names[address] = producer.http_address
            host, _, port = name.rpartition(":")
            producers.append(Producer(host.strip("[]"), int(port)))
        return producers

    def all_alerts(self) -> list[dict[str, object]]:
        alerts = [a for node in sorted(self.alerts) for a in self.alerts[node]]
        alerts.sort(key=lambda a: (str(a["node"]), str(a["topic"]), str(a["channel"])))
        return alerts

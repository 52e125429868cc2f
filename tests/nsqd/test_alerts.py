"""Backlog alerts: rule parsing and matching, the evaluator on an injected clock, the cheap look
at queue heads (memory and disk), and a real nsqd raising and clearing an alert."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import TEXT_CT, HttpApi
from prometheus_client.parser import text_string_to_metric_families
from v2client import RawV2

from nsqpy._internal.duration import MILLISECOND, SECOND
from nsqpy.nsqd.app import NSQD, StartupError
from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.broker import Broker, BrokerConfig
from nsqpy.nsqd.core.message import Message
from nsqpy.nsqd.observe import alerts
from nsqpy.nsqd.observe.alerts import (
    AGE,
    DEPTH,
    AlertMonitor,
    AlertRules,
    QueueView,
    parse_rule,
)
from nsqpy.nsqd.observe.stats import rfc3339
from nsqpy.nsqd.storage.diskqueue import DiskQueue

T0 = 1_700_000_000 * SECOND
LOG = logging.getLogger("test.alerts")


def monitor(depths: Sequence[str] = (), ages: Sequence[str] = ()) -> AlertMonitor:
    return AlertMonitor(AlertRules.parse(depths, ages), LOG)


def alert_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if "backlog alert" in r.message]


# -- rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "topic", "channel", "threshold", "bare"),
    [
        ("1000", DEPTH, "*", None, 1000, True),
        ("orders=5", DEPTH, "orders", None, 5, False),
        ("orders:archive=-1", DEPTH, "orders", "archive", -1, False),
        ("*:*#ephemeral=0", DEPTH, "*", "*#ephemeral", 0, False),
        ("1m30s", AGE, "*", None, 90 * SECOND, True),
        ("o.*:c=250ms", AGE, "o.*", "c", 250 * MILLISECOND, False),
    ],
)
def test_parse_rule(
    text: str, kind: Any, topic: str, channel: str | None, threshold: int, bare: bool
) -> None:
    rule = parse_rule(text, kind)
    assert (rule.kind, rule.topic, rule.channel, rule.threshold, rule.bare) == (
        kind,
        topic,
        channel,
        threshold,
        bare,
    )


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("", DEPTH, "invalid syntax"),
        ("t=", DEPTH, "invalid syntax"),
        ("t=ten", DEPTH, "invalid syntax"),
        ("0x10", DEPTH, "invalid syntax"),  # base 10 only
        ("=5", DEPTH, "invalid topic or channel name"),
        ("t:=5", DEPTH, "invalid topic or channel name"),
        ("bad name=5", DEPTH, "invalid topic or channel name"),
        ("t:c:d=5", DEPTH, "invalid topic or channel name"),
        ("t=5s", DEPTH, "invalid syntax"),
        ("t=5", AGE, "missing unit"),
        ("t=soon", AGE, "invalid duration"),
    ],
)
def test_parse_rule_errors(text: str, kind: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rule(text, kind)


def test_bare_value_covers_topics_and_channels() -> None:
    rules = AlertRules.parse(["10"], ["1m"])
    assert rules.thresholds("t") == (10, 60 * SECOND)
    assert rules.thresholds("t", "c") == (10, 60 * SECOND)
    assert rules.thresholds("x#ephemeral", "y#ephemeral") == (10, 60 * SECOND)


def test_topic_rules_and_channel_rules_are_separate() -> None:
    rules = AlertRules.parse(["orders=5", "*:archive=7"])
    assert rules.thresholds("orders") == (5, 0)
    assert rules.thresholds("orders", "c") == (0, 0)
    assert rules.thresholds("orders", "archive") == (7, 0)
    assert rules.thresholds("archive") == (0, 0)


def test_most_specific_rule_wins_whatever_the_order() -> None:
    given = ["100", "orders:*=50", "orders:archive=20", "*:archive=30", "ord*:arch*=40"]
    for texts in (given, list(reversed(given))):
        rules = AlertRules.parse(texts)
        assert rules.thresholds("orders", "archive") == (20, 0)  # both names exact
        assert rules.thresholds("orders", "tail") == (50, 0)  # one exact name
        assert rules.thresholds("users", "archive") == (30, 0)
        assert rules.thresholds("order-x", "archive-2") == (40, 0)  # globs beat the bare value
        assert rules.thresholds("users", "tail") == (100, 0)
        assert rules.thresholds("users") == (100, 0)


def test_more_literal_glob_wins_and_ties_go_to_the_last_given() -> None:
    rules = AlertRules.parse(["o*=1", "ord*=2", "*s=3"])
    assert rules.thresholds("orders") == (2, 0)  # "ord*" has 3 literal characters
    assert rules.thresholds("os") == (3, 0)  # "o*" and "*s" tie: the last one given
    assert AlertRules.parse(["*s=3", "o*=1"]).thresholds("os") == (1, 0)


def test_zero_or_less_disables_and_globs_match_ephemeral_names() -> None:
    rules = AlertRules.parse(["1000", "*#ephemeral=0", "*:*#ephemeral=-1"], ["1m", "t:c=0s"])
    assert rules.thresholds("t#ephemeral") == (0, 60 * SECOND)
    assert rules.thresholds("t", "c#ephemeral") == (0, 60 * SECOND)
    assert rules.thresholds("t", "c") == (1000, 0)
    assert rules.thresholds("t", "c2") == (1000, 60 * SECOND)


def test_no_rules() -> None:
    assert not AlertRules()
    assert AlertRules().thresholds("t", "c") == (0, 0)
    assert not monitor().enabled
    assert monitor().check(T0, [QueueView("t", "c", 10**9, 0)]) == []


# -- the evaluator --------------------------------------------------------------------------------


def test_depth_alert_raises_then_clears_and_logs_each_crossing_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    mon = monitor(["orders:archive=1000"])
    assert mon.check(T0, [QueueView("orders", "archive", 999)]) == []
    [raised] = mon.check(T0 + SECOND, [QueueView("orders", "archive", 1234)])
    assert raised.raised
    alert = raised.alert
    assert (alert.topic, alert.channel, alert.kind, alert.value, alert.threshold) == (
        "orders",
        "archive",
        "depth",
        1234,
        1000,
    )
    assert alert.since == T0 // SECOND + 1
    for step in range(2, 5):  # still over: no new transition, the value follows
        assert mon.check(T0 + step * SECOND, [QueueView("orders", "archive", 1000 + step)]) == []
    assert mon.alerts()[0].value == 1004
    assert mon.alerts()[0].since == T0 // SECOND + 1
    assert mon.ping_text() == "WARNING - backlog: orders/archive depth 1004 >= 1000"
    [cleared] = mon.check(T0 + 5 * SECOND, [QueueView("orders", "archive", 999)])
    assert not cleared.raised and cleared.alert.value == 999
    assert mon.check(T0 + 6 * SECOND, [QueueView("orders", "archive", 0)]) == []
    assert mon.ping_text() is None
    assert alert_lines(caplog) == [
        ("WARNING", "backlog alert raised: orders/archive depth 1234 >= 1000"),
        ("INFO", "backlog alert cleared: orders/archive depth 999 < 1000"),
    ]


def test_age_alert_raises_then_clears(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    mon = monitor(ages=["1m"])
    published = T0 - 30 * SECOND
    assert mon.check(T0, [QueueView("t", "", 1, published)]) == []
    [raised] = mon.check(T0 + 31 * SECOND, [QueueView("t", "", 1, published)])
    assert (raised.raised, raised.alert.kind, raised.alert.value) == (True, "age", 61 * SECOND)
    assert raised.alert.to_json() == {
        "topic": "t",
        "channel": "",
        "kind": "age",
        "value": 61 * SECOND,
        "threshold": 60 * SECOND,
        "since": T0 // SECOND + 31,
    }
    assert mon.ping_text() == "WARNING - backlog: t age 1m1s >= 1m0s"
    # the old message was delivered: the head is a fresh one
    [cleared] = mon.check(T0 + 32 * SECOND, [QueueView("t", "", 1, T0 + 31 * SECOND)])
    assert not cleared.raised
    # an empty queue has no age; a clock behind the timestamp is no age either
    assert mon.check(T0 + 99 * SECOND, [QueueView("t", "", 0, None)]) == []
    assert mon.check(T0, [QueueView("t", "", 1, T0 + 5 * SECOND)]) == []
    assert alert_lines(caplog) == [
        ("WARNING", "backlog alert raised: t age 1m1s >= 1m0s"),
        ("INFO", "backlog alert cleared: t age 1s < 1m0s"),
    ]


def test_both_kinds_at_once_and_the_ping_text_lists_them_sorted() -> None:
    mon = monitor(["5"], ["10s"])
    old = T0 - 20 * SECOND
    views = [QueueView("b", "c", 6, old), QueueView("a", "", 9, T0), QueueView("b", "", 0, None)]
    assert [t.alert.describe() for t in mon.check(T0, views)] == [
        "b/c depth 6 >= 5",
        "b/c age 20s >= 10s",
        "a depth 9 >= 5",
    ]
    assert mon.ping_text() == (
        "WARNING - backlog: a depth 9 >= 5; b/c age 20s >= 10s; b/c depth 6 >= 5"
    )


def test_an_alert_of_a_deleted_queue_clears(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    mon = monitor(["5"])
    mon.check(T0, [QueueView("t", "gone", 10)])
    [cleared] = mon.check(T0 + SECOND, [])
    assert not cleared.raised and not mon.active
    assert alert_lines(caplog)[-1] == ("INFO", "backlog alert cleared: t/gone depth is gone")


# -- looking at queue heads -----------------------------------------------------------------------


def disk_queue(tmp_path: Path, name: str = "q") -> DiskQueue:
    return DiskQueue(
        name,
        str(tmp_path),
        max_bytes_per_file=200,
        max_record_size=1024,
        sync_every=1000,
        log=LOG,
    )


def test_peek_reads_the_head_without_consuming_it(tmp_path: Path) -> None:
    q = disk_queue(tmp_path)
    assert q.peek(8) is None
    payloads = [records.encode(T0 + i, 0, b"%016d" % i, b"body-%d" % i) for i in range(6)]
    q.put(payloads)  # 200-byte segments: a few records each, so reads cross segments
    for i, payload in enumerate(payloads):
        assert q.peek(8) == payload[:8]
        assert q.peek(4096) == payload  # never more than the record
        assert q.depth == 6 - i
        item = q.read()
        assert item is not None and item[0] == payload
    assert q.peek(8) is None
    q.close()


def test_peek_follows_a_consumed_segment_into_the_next(tmp_path: Path) -> None:
    q = disk_queue(tmp_path)
    first = [records.encode(T0, 0, b"%016d" % i, b"x" * 40) for i in range(2)]
    q.put(first)
    while q.read() is not None:
        pass
    later = records.encode(T0 + 7, 0, b"%016d" % 9, b"y" * 150)
    q.put([later])  # rolls: the reader sits at the end of a completed segment
    assert q.peek(8) == later[:8]
    q.close()


def test_head_timestamp_reads_plain_deferred_and_dead_letter_records() -> None:
    plain = records.encode(T0 + 1, 3, b"%016d" % 1, b"b")
    deferred = records.encode(T0 + 2, 0, b"%016d" % 2, b"b", due_ns=T0 + SECOND)
    dead = records.encode(T0 + 3, 0, b"%016d" % 3, b"b", origin="orders:billing")
    assert records.head_timestamp(plain) == T0 + 1
    assert records.head_timestamp(deferred[:24]) == T0 + 2
    assert records.head_timestamp(deferred[:20]) is None
    assert records.head_timestamp(dead[: records.HEAD_SIZE]) == T0 + 3
    assert records.head_timestamp(dead[:30]) is None


def test_oldest_timestamp_takes_the_older_head(tmp_path: Path) -> None:
    q = disk_queue(tmp_path)
    assert alerts.oldest_timestamp([], q) is None
    q.put([records.encode(T0 + 5, 0, b"%016d" % 1, b"disk")])
    assert alerts.oldest_timestamp([], q) == T0 + 5
    requeued = Message(b"%016d" % 2, b"m", T0 + 3)
    assert alerts.oldest_timestamp([requeued, (b"%016d" % 3, b"m", T0 + 1)], q) == T0 + 3
    assert alerts.oldest_timestamp([(b"%016d" % 3, b"m", T0 + 9)], q) == T0 + 5
    assert alerts.oldest_timestamp([(b"%016d" % 3, b"m", T0 + 9)], None) == T0 + 9
    q.close()


def test_probe_reads_depths_and_ages_only_where_an_age_rule_applies() -> None:
    broker = Broker(BrokerConfig(node_id=1, mem_queue_size=100))
    topic = broker.get_topic("t")
    broker.get_channel(topic, "aged", 0.0)
    broker.get_channel(topic, "plain", 0.0)
    ids = broker.guid.new_ids(2, T0)
    topic.put([b"a", b"b"], ids, T0, 0.0)
    held = broker.get_topic("held")
    held.put([b"c"], broker.guid.new_ids(1, T0 + 1), T0 + 1, 0.0)
    views = alerts.probe(broker.topics, AlertRules.parse(["1"], ["t:aged=1s", "held=1s"]))
    assert views == [
        QueueView("t", "", 0, None),
        QueueView("t", "aged", 2, T0),
        QueueView("t", "plain", 2, None),
        QueueView("held", "", 1, T0 + 1),
    ]


# -- a real nsqd ----------------------------------------------------------------------------------


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def alert_samples(text: str) -> dict[str, dict[tuple[str, ...], float]]:
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("nsq_alert_"):
            for sample in family.samples:
                labels = tuple(sample.labels[k] for k in sorted(sample.labels))
                out.setdefault(sample.name, {})[labels] = sample.value
    return out


async def test_an_nsqd_raises_and_clears_a_depth_alert(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nsqpy.nsqd")
    nsqd = await nsqd_factory(alert_depths=["3"], alert_check_interval=50 * MILLISECOND)
    api = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    checks = count_checks(nsqd)
    assert (await api.post("/channel/create?topic=t&channel=c")).status == 404
    assert (await api.post("/topic/create?topic=t")).status == 200
    assert (await api.post("/channel/create?topic=t&channel=c")).status == 200
    assert (await api.post("/mpub?topic=t", b"1\n2\n3\n4\n5")).status == 200
    await wait_for(lambda: bool(nsqd.alerts.active))

    ping = await api.get("/ping")
    assert (ping.status, ping.body) == (200, b"WARNING - backlog: t/c depth 5 >= 3")
    assert ping.headers["Content-Type"] == TEXT_CT
    stats = (await api.get("/stats?format=json")).json
    assert list(stats)[-1] == "alerts"
    [alert] = stats["alerts"]
    assert alert == {
        "topic": "t",
        "channel": "c",
        "kind": "depth",
        "value": 5,
        "threshold": 3,
        "since": alert["since"],
    }
    assert abs(alert["since"] - time.time()) < 60
    text = (await api.get("/stats")).body.decode()
    assert text.endswith(f"\nAlerts:\n   [t/c] depth: 5 >= 3 since {rfc3339(alert['since'])}\n")
    metrics = alert_samples((await api.get("/metrics")).body.decode())
    assert metrics["nsq_alert_active"] == {("c", "depth", "t"): 1, ("", "depth", "t"): 0}
    assert metrics["nsq_alert_depth_threshold"] == {("c", "t"): 3, ("", "t"): 3}
    assert metrics.get("nsq_alert_age_threshold_seconds", {}) == {}

    seen = checks[0]
    await wait_for(lambda: checks[0] >= seen + 3)  # a few more checks, still over
    reader = await RawV2.connect(nsqd.tcp_port)
    await reader.sub("t", "c", rdy=10)
    for _ in range(5):
        msg = await reader.message()
        reader.cmd(f"FIN {msg.id.decode()}")
    await wait_for(lambda: not nsqd.alerts.active)

    assert (await api.get("/ping")).body == b"OK"
    assert (await api.get("/stats?format=json")).json["alerts"] == []
    assert (await api.get("/stats")).body.decode().endswith("\nAlerts: None\n")
    metrics = alert_samples((await api.get("/metrics")).body.decode())
    assert metrics["nsq_alert_active"] == {("c", "depth", "t"): 0, ("", "depth", "t"): 0}
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if "backlog" in r.message]
    assert logged == [
        ("WARNING", "backlog alert raised: t/c depth 5 >= 3"),
        ("INFO", "backlog alert cleared: t/c depth 0 < 3"),
    ]
    await reader.close()


def count_checks(nsqd: NSQD) -> list[int]:
    """Count the daemon's alert checks (the timer calls ``nsqd.alerts.check``)."""
    calls = [0]
    check = nsqd.alerts.check

    def counted(now_ns: int, views: Any) -> Any:
        calls[0] += 1
        return check(now_ns, views)

    nsqd.alerts.check = counted  # type: ignore[method-assign]
    return calls


async def test_an_age_alert_on_a_disk_backlog(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(
        mem_queue_size=0, alert_ages=["t=1ms"], alert_check_interval=20 * MILLISECOND
    )
    api = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    assert (await api.post("/pub?topic=t", b"held on disk")).status == 200
    topic = nsqd.broker.topics["t"]
    assert (topic.depth, topic.backend_depth) == (1, 1)
    await wait_for(lambda: bool(nsqd.alerts.active))
    [alert] = (await api.get("/stats?format=json")).json["alerts"]
    assert (alert["topic"], alert["channel"], alert["kind"]) == ("t", "", "age")
    assert alert["value"] >= alert["threshold"] == 1_000_000
    metrics = alert_samples((await api.get("/metrics")).body.decode())
    assert metrics["nsq_alert_active"] == {("", "age", "t"): 1}
    assert metrics["nsq_alert_age_threshold_seconds"] == {("", "t"): 0.001}
    assert (await api.post("/topic/empty?topic=t")).status == 200
    await wait_for(lambda: not nsqd.alerts.active)


async def test_disk_failure_wins_over_alerts(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(alert_depths=["t=1"], alert_check_interval=20 * MILLISECOND)
    api = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    assert (await api.post("/pub?topic=t", b"x")).status == 200
    await wait_for(lambda: bool(nsqd.alerts.active))
    assert (await api.get("/ping")).body == b"WARNING - backlog: t depth 1 >= 1"
    nsqd.health = "NOK - failed to write to disk"
    reply = await api.get("/ping")
    assert (reply.status, reply.body) == (500, b"NOK - failed to write to disk")


async def test_without_rules_stats_is_nsqds_and_nothing_checks(
    nsqd: NSQD, session: aiohttp.ClientSession
) -> None:
    api = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    assert (await api.post("/pub?topic=t", b"x")).status == 200
    stats = (await api.get("/stats?format=json")).json
    assert list(stats) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert "Alerts" not in (await api.get("/stats")).body.decode()
    assert nsqd._alert_timer is None


async def test_stats_filters_show_the_alerts_of_what_they_show(
    nsqd_factory: NsqdFactory, session: aiohttp.ClientSession
) -> None:
    nsqd = await nsqd_factory(alert_depths=["1"], alert_check_interval=20 * MILLISECOND)
    api = HttpApi(session, f"http://127.0.0.1:{nsqd.http_port}")
    for topic in ("a", "b"):
        assert (await api.post(f"/topic/create?topic={topic}")).status == 200
        assert (await api.post(f"/channel/create?topic={topic}&channel=c")).status == 200
        assert (await api.post(f"/pub?topic={topic}", b"x")).status == 200
    await wait_for(lambda: len(nsqd.alerts.active) == 2)

    async def shown(query: str) -> list[tuple[str, str]]:
        doc = (await api.get("/stats?format=json" + query)).json
        return [(a["topic"], a["channel"]) for a in doc["alerts"]]

    assert await shown("") == [("a", "c"), ("b", "c")]
    assert await shown("&topic=b") == [("b", "c")]
    assert await shown("&topic=b&channel=nope") == []
    assert await shown("&topic=nope") == []


async def test_a_bad_rule_stops_startup(nsqd_factory: NsqdFactory) -> None:
    with pytest.raises(StartupError, match="invalid alert rule"):
        await nsqd_factory(alert_depths=["t=lots"])

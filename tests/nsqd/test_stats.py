"""``nsqpy.nsqd.observe.stats`` without a daemon: snapshots of a broker, JSON quirks, exact text."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from nsqpy._internal import gojson
from nsqpy.nsqd.core.broker import Broker, BrokerConfig
from nsqpy.nsqd.core.client import STATE_SUBSCRIBED, ClientState
from nsqpy.nsqd.core.message import Message
from nsqpy.nsqd.observe import stats
from nsqpy.protocol.identify import ClientSettings

NOW_NS = 1_700_000_100 * 1_000_000_000
START = 1_700_000_000


@dataclass
class FakeConn:
    """The attributes of a V2Connection that stats read."""

    state: ClientState
    settings: ClientSettings = field(default_factory=ClientSettings)
    remote_address: str = "10.0.0.1:5000"
    pub_counts: dict[str, int] = field(default_factory=dict)
    tls: bool = False
    ssl_object: None = None
    auth_state: None = None


def conn(number: int, **settings: object) -> FakeConn:
    state = ClientState(number, lambda msg: None, connect_ts=START + 40)
    return FakeConn(state, ClientSettings(**settings))  # type: ignore[arg-type]


def publish(broker: Broker, topic: str, *bodies: bytes) -> None:
    ids = broker.guid.new_ids(len(bodies), time.time_ns())
    broker.get_topic(topic).put(list(bodies), ids, time.time_ns(), 0.0)


@pytest.fixture
def broker() -> Broker:
    return Broker(BrokerConfig(node_id=1, mem_queue_size=100))


@pytest.fixture
def utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def subscribed(broker: Broker, topic: str, channel: str, client: FakeConn, rdy: int) -> None:
    chan = broker.get_channel(broker.get_topic(topic), channel, 0.0)
    chan.add_client(client.state)
    client.state.state = STATE_SUBSCRIBED
    chan.set_rdy(client.state, rdy, 0.0)


def test_counters_come_from_the_domain(broker: Broker) -> None:
    consumer = conn(1, client_id="cid", hostname="h", user_agent="ua", sample_rate=5)
    subscribed(broker, "t", "c", consumer, rdy=1)
    publish(broker, "t", b"abc", b"de", b"f")
    chan = broker.topics["t"].channels["c"]
    chan.put_deferred(Message(b"%016x" % 99, b"later", 0), 1e9, 0.0)
    snapshot = stats.collect(broker.topics, {1: consumer})
    assert snapshot.topics is not None
    [topic] = snapshot.topics
    assert (topic.topic_name, topic.message_count, topic.message_bytes) == ("t", 3, 6)
    [channel] = topic.channels
    assert (channel.depth, channel.in_flight_count, channel.deferred_count) == (2, 1, 1)
    assert (channel.message_count, channel.client_count, channel.backend_depth) == (4, 1, 0)
    assert channel.clients is not None
    [client] = channel.clients
    assert (client.client_id, client.hostname, client.user_agent) == ("cid", "h", "ua")
    assert (client.state, client.ready_count, client.in_flight_count) == (3, 1, 1)
    assert (client.message_count, client.sample_rate, client.connect_ts) == (1, 5, START + 40)
    assert snapshot.producers is None  # nobody published over TCP


def test_filters_and_nil_slices(broker: Broker) -> None:
    for name in ("b", "a"):
        broker.get_topic(name)
    for name in ("y", "x"):
        broker.get_channel(broker.topics["a"], name, 0.0)
    everything = stats.collect(broker.topics, {})
    assert everything.topics is not None
    assert [t.topic_name for t in everything.topics] == ["a", "b"]
    assert [c.channel_name for c in everything.topics[0].channels] == ["x", "y"]
    assert stats.collect(broker.topics, {}, "nope").topics is None
    assert stats.collect(broker.topics, {}, "a", "nope").topics == []
    only_y = stats.collect(broker.topics, {}, "", "y").topics
    assert only_y is not None and [t.topic_name for t in only_y] == ["a"]
    hidden = stats.collect(broker.topics, {}, include_clients=False)
    assert hidden.topics is not None and hidden.topics[0].channels[0].clients is None


def test_producers_and_the_one_entry_pub_counts(broker: Broker) -> None:
    producer, idle = conn(1), conn(2)
    producer.pub_counts.update({"t1": 3, "t2": 4})
    snapshot = stats.collect(broker.topics, {1: producer, 2: idle})
    assert snapshot.producers is not None
    [entry] = snapshot.producers
    assert entry.pub_counts == [("t1", 3)]
    assert entry.to_json()["pub_counts"] == [{"topic": "t1", "count": 3}]
    broker.get_topic("t2")
    filtered = stats.collect(broker.topics, {1: producer}, "t2").producers
    assert filtered is not None and filtered[0].pub_counts == [("t2", 4)]
    # a filter that names no topic returns before producers are looked at
    assert stats.collect(broker.topics, {1: producer}, "nope").producers is None
    # a producer of other topics is still a producer, just without pub_counts
    broker.get_topic("t3")
    other = stats.collect(broker.topics, {1: producer}, "t3").producers
    assert other is not None and "pub_counts" not in other[0].to_json()


def test_json_document(broker: Broker) -> None:
    broker.get_topic("t")
    snapshot = stats.collect(broker.topics, {})
    doc = stats.stats_json(
        snapshot, version="1.3.0", health="OK", start_time=START, memory=stats.MemoryStats()
    )
    assert gojson.dumps(doc) == (
        b'{"version":"1.3.0","health":"OK","start_time":1700000000,"topics":[{"topic_name":'
        b'"t","channels":[],"depth":0,"backend_depth":0,"message_count":0,"message_bytes":0,'
        b'"paused":false,"e2e_processing_latency":{"count":0,"percentiles":null}}],"memory":'
        b'{"heap_objects":0,"heap_idle_bytes":0,"heap_in_use_bytes":0,"heap_released_bytes":0,'
        b'"gc_pause_usec_100":0,"gc_pause_usec_99":0,"gc_pause_usec_95":0,"next_gc_bytes":0,'
        b'"gc_total_runs":0},"producers":null}'
    )
    without_memory = stats.stats_json(
        snapshot, version="1.3.0", health="OK", start_time=START, memory=None
    )
    assert list(without_memory) == ["version", "health", "start_time", "topics", "producers"]


def test_client_json(broker: Broker) -> None:
    client = conn(1, client_id="c", hostname="h", user_agent="<ua>", snappy=True)
    client.pub_counts["t"] = 2
    encoded = gojson.dumps(stats.client_stats(client).to_json())
    assert encoded == (
        b'{"client_id":"c","hostname":"h","version":"V2","remote_address":"10.0.0.1:5000",'
        b'"state":0,"ready_count":0,"in_flight_count":0,"message_count":0,"finish_count":0,'
        b'"requeue_count":0,"connect_ts":1700000040,"sample_rate":0,"deflate":false,'
        b'"snappy":true,"user_agent":"\\u003cua\\u003e","pub_counts":[{"topic":"t","count":2}],'
        b'"tls":false,"tls_cipher_suite":"","tls_version":"","tls_negotiated_protocol":"",'
        b'"tls_negotiated_protocol_is_mutual":false}'
    )


def test_text_format(broker: Broker, utc: None) -> None:
    consumer = conn(1, hostname="consumer.host", user_agent="go-nsq/1.1.0")
    subscribed(broker, "orders", "archive", consumer, rdy=1)
    broker.get_channel(broker.topics["orders"], "slow", 0.0).pause()
    publish(broker, "orders", b"one", b"two")
    broker.get_topic("audit").pause()
    producer = conn(2, hostname="pub.host", user_agent="")
    producer.remote_address = "10.0.0.2:6000"
    producer.pub_counts["orders"] = 2
    snapshot = stats.collect(broker.topics, {1: consumer, 2: producer})
    text = stats.stats_text(
        snapshot,
        version_line="nsqd v1.3.0 (built w/nsqpy-0.1.0)",
        health="OK",
        start_time=START,
        now_ns=NOW_NS + 3_723_500_000_000,
        memory=stats.MemoryStats(heap_objects=123, gc_total_runs=7),
    )
    assert text == (
        "nsqd v1.3.0 (built w/nsqpy-0.1.0)\n"
        "start_time 2023-11-14T22:13:20Z\n"
        "uptime 1h3m43.5s\n"
        "\n"
        "Health: OK\n"
        "\n"
        "Memory:\n"
        "   heap_objects             \t123\n"
        "   heap_idle_bytes          \t0\n"
        "   heap_in_use_bytes        \t0\n"
        "   heap_released_bytes      \t0\n"
        "   gc_pause_usec_100        \t0\n"
        "   gc_pause_usec_99         \t0\n"
        "   gc_pause_usec_95         \t0\n"
        "   next_gc_bytes            \t0\n"
        "   gc_total_runs            \t7\n"
        "\n"
        "Topics:\n"
        "*P [audit          ] depth: 0     be-depth: 0     msgs: 0        e2e%: \n"
        "\n"
        "   [orders         ] depth: 0     be-depth: 0     msgs: 2        e2e%: \n"
        "      [archive                  ] depth: 1     be-depth: 0     inflt: 1    def: 0    "
        "re-q: 0     timeout: 0     msgs: 2        e2e%: \n"
        "        [V2 consumer.host:5000 go-nsq/1.1.0] state: 3 inflt: 1    rdy: 1    "
        "fin: 0        re-q: 0        msgs: 1        connected: 1h3m3s\n"
        "   *P [slow                     ] depth: 2     be-depth: 0     inflt: 0    def: 0    "
        "re-q: 0     timeout: 0     msgs: 2        e2e%: \n"
        "\n"
        "Producers:\n"
        "   [V2 pub.host:6000        ] msgs: 2        topics: orders=2 connected: 1h3m3s\n"
    )


def test_text_format_when_empty(utc: None) -> None:
    text = stats.stats_text(
        stats.Stats(topics=None, producers=None),
        version_line="v",
        health="NOK - disk",
        start_time=START,
        now_ns=START * 1_000_000_000 + 250_000_000,
        memory=None,
    )
    assert text == (
        "v\nstart_time 2023-11-14T22:13:20Z\nuptime 250ms\n\nHealth: NOK - disk\n"
        "\nTopics: None\n\nProducers: None\n"
    )


def test_rfc3339_uses_the_local_zone() -> None:
    old = os.environ.get("TZ")
    try:
        os.environ["TZ"] = "Asia/Kolkata"
        time.tzset()
        assert stats.rfc3339(START) == "2023-11-15T03:43:20+05:30"
        os.environ["TZ"] = "America/New_York"
        time.tzset()
        assert stats.rfc3339(START) == "2023-11-14T17:13:20-05:00"
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_e2e_text_and_human_durations() -> None:
    assert stats.nanoseconds_to_human(999) == "999.0ns"
    assert stats.nanoseconds_to_human(1500) == "1.5us"
    assert stats.nanoseconds_to_human(2_500_000) == "2.5ms"
    assert stats.nanoseconds_to_human(3_000_000_001) == "3.0s"
    assert stats.nanoseconds_to_human(1_000_000_000) == "1000.0ms"  # strictly greater than


def test_memory_stats_come_from_the_interpreter() -> None:
    stats.install_gc_pause_recorder()
    stats.install_gc_pause_recorder()  # idempotent
    assert sum(1 for cb in gc.callbacks if cb is stats._GC_PAUSES) == 1
    gc.collect()
    memory = stats.memory_stats()
    assert memory.heap_objects > 0 and memory.heap_in_use_bytes > 0
    assert memory.gc_total_runs >= 1
    assert memory.gc_pause_usec_100 >= memory.gc_pause_usec_99 >= memory.gc_pause_usec_95 >= 0
    assert (memory.heap_idle_bytes, memory.heap_released_bytes, memory.next_gc_bytes) == (0, 0, 0)


def test_percentile_matches_nsqd() -> None:
    values = list(range(1, 11))
    assert stats._percentile(100.0, values) == 10  # clamped to the last one
    assert stats._percentile(95.0, values) == 10  # floor(9.5 + 0.5) = 10 -> clamped
    assert stats._percentile(50.0, values) == 6  # floor(5.5) = index 5
    assert stats._percentile(99.0, []) == 0

"""nsqd's HTTP API over real sockets: every route, every error code in nsqd's order, headers.

Also unit tests of the pieces it is built from: Go-exact JSON (``gojson``) and the shared
router/envelope/query helpers (``nsqpy._internal.http_api``).
"""

from __future__ import annotations

import gc
import logging
import re
import struct
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conftest import NsqdFactory, wait_for
from http_reply import JSON_CT, TEXT_CT, V1, HttpApi
from v2client import RawV2

from nsqpy._internal import gojson
from nsqpy._internal.http_api import QueryParams, clean_path, sniff_content_type
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqd.storage.diskqueue import DiskQueueError


class Api(HttpApi):
    """Raw HTTP calls to one nsqd."""

    def __init__(self, session: aiohttp.ClientSession, nsqd: NSQD) -> None:
        super().__init__(session, f"http://127.0.0.1:{nsqd.http_port}")
        self.nsqd = nsqd

    async def stats(self, query: str = "") -> Any:
        reply = await self.get("/stats?format=json" + query)
        assert reply.status == 200
        return reply.json


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def api(session: aiohttp.ClientSession, nsqd: NSQD) -> Api:
    return Api(session, nsqd)


@pytest.fixture
def new_api(session: aiohttp.ClientSession, nsqd_factory: NsqdFactory) -> Any:
    """``await new_api(**options)``: an Api on a fresh nsqd with those options."""

    async def make(**overrides: Any) -> Api:
        return Api(session, await nsqd_factory(**overrides))

    return make


@pytest.fixture
def restore_log_level() -> Any:
    logger = logging.getLogger("nsqpy.nsqd")
    level = logger.level
    yield logger
    logger.setLevel(level)


async def chunked(data: bytes) -> AsyncIterator[bytes]:
    """A body sent with Transfer-Encoding: chunked (no Content-Length)."""
    for start in range(0, len(data), 7):
        yield data[start : start + 7]


def mpub_binary(*bodies: bytes) -> bytes:
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)


async def consumer(nsqd: NSQD, topic: str, channel: str, rdy: int, **identify: Any) -> RawV2:
    conn = await RawV2.connect(nsqd.tcp_port)
    if identify:
        assert await conn.identify(**identify) == b"OK"
    await conn.sub(topic, channel, rdy=rdy)
    chan = nsqd.broker.topics[topic].channels[channel]
    await wait_for(lambda: any(c.rdy == rdy for c in chan.clients.values()))
    return conn


# -- /ping and /info ------------------------------------------------------------------------------


async def test_ping_is_plain_text_ok(api: Api) -> None:
    reply = await api.get("/ping")
    assert (reply.status, reply.body) == (200, b"OK")
    assert reply.headers["Content-Type"] == TEXT_CT
    assert "X-NSQ-Content-Type" not in reply.headers


async def test_ping_reports_unhealthy_as_500_text(api: Api, nsqd: NSQD) -> None:
    nsqd.health = "NOK - failed to write to disk"
    reply = await api.get("/ping")
    assert (reply.status, reply.body) == (500, b"NOK - failed to write to disk")
    assert reply.headers["Content-Type"] == TEXT_CT
    assert "X-NSQ-Content-Type" not in reply.headers


async def test_info(api: Api, nsqd: NSQD) -> None:
    reply = await api.get("/info")
    assert reply.status == 200
    assert reply.headers["Content-Type"] == JSON_CT
    assert reply.headers["X-NSQ-Content-Type"] == V1
    info = reply.json
    assert list(info) == [
        "version", "broadcast_address", "hostname", "http_port", "tcp_port", "start_time",
        "max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout",
        "max_deflate_level",
    ]  # fmt: skip
    assert info["version"] == "1.3.0"
    assert info["broadcast_address"] == nsqd.opts.broadcast_address
    assert (info["http_port"], info["tcp_port"]) == (nsqd.http_port, nsqd.tcp_port)
    assert info["start_time"] == nsqd.start_time
    assert info["max_heartbeat_interval"] == 60_000_000_000  # ns, a Go time.Duration
    assert info["max_output_buffer_timeout"] == 30_000_000_000
    assert (info["max_output_buffer_size"], info["max_deflate_level"]) == (65536, 6)


# -- /pub -----------------------------------------------------------------------------------------


async def test_pub_publishes_and_creates_the_topic(api: Api, nsqd: NSQD) -> None:
    reply = await api.post("/pub?topic=t", b"hello")
    assert (reply.status, reply.body) == (200, b"OK")
    assert reply.headers["X-NSQ-Content-Type"] == V1
    assert reply.headers["Content-Type"] == TEXT_CT
    topic = nsqd.broker.topics["t"]
    assert (topic.message_count, topic.message_bytes, topic.depth) == (1, 5, 1)


async def test_pub_reaches_a_consumer(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=1)
    assert (await api.post("/pub?topic=t", b"\x00binary\xff")).status == 200
    assert (await sub.message()).body == b"\x00binary\xff"


@pytest.mark.parametrize(
    ("query", "body", "status", "code"),
    [
        # the body is checked before anything else, even a missing topic
        ("", b"", 400, "MSG_EMPTY"),
        ("?topic=bad!", b"", 400, "MSG_EMPTY"),
        ("?topic=%zz", b"x", 400, "INVALID_REQUEST"),
        ("?topic=t;x", b"x", 400, "INVALID_REQUEST"),
        ("", b"x", 400, "MISSING_ARG_TOPIC"),
        ("?channel=t", b"x", 400, "MISSING_ARG_TOPIC"),
        ("?topic=bad!", b"x", 400, "INVALID_TOPIC"),
        ("?topic=" + "a" * 65, b"x", 400, "INVALID_TOPIC"),
        ("?topic=t&defer=x", b"x", 400, "INVALID_DEFER"),
        ("?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("?topic=t&defer=3600001", b"x", 400, "INVALID_DEFER"),
        ("?topic=t&defer=", b"x", 400, "INVALID_DEFER"),
        # ms * 1e6 wraps around in Go's int64 before the range check: this one goes negative
        ("?topic=t&defer=9223372036854775807", b"x", 400, "INVALID_DEFER"),
        ("?topic=t&defer=99999999999999999999", b"x", 400, "INVALID_DEFER"),
    ],
)
async def test_pub_errors(api: Api, query: str, body: bytes, status: int, code: str) -> None:
    reply = await api.post("/pub" + query, body)
    assert (reply.status, reply.message) == (status, code)


async def test_pub_creates_the_topic_before_checking_defer(api: Api, nsqd: NSQD) -> None:
    assert (await api.post("/pub?topic=t&defer=x", b"x")).message == "INVALID_DEFER"
    assert "t" in nsqd.broker.topics and nsqd.broker.topics["t"].message_count == 0


async def test_pub_size_limits(new_api: Any) -> None:
    api = await new_api(max_msg_size=10)
    assert (await api.post("/pub?topic=t", b"x" * 10)).status == 200
    # by Content-Length, before the topic is even looked at
    reply = await api.post("/pub", b"x" * 11)
    assert (reply.status, reply.message) == (413, "MSG_TOO_BIG")
    # without a Content-Length: the bounded read finds it
    reply = await api.post("/pub?topic=t", chunked(b"x" * 11))
    assert (reply.status, reply.message) == (413, "MSG_TOO_BIG")
    assert (await api.post("/pub?topic=t", chunked(b"x" * 10))).status == 200


async def test_pub_defer_holds_the_message(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    assert (await api.post("/pub?topic=t&defer=3600000", b"later")).status == 200
    channel = nsqd.broker.topics["t"].channels["c"]
    assert (channel.deferred_count, channel.depth, channel.message_count) == (1, 0, 1)


async def test_pub_params_come_only_from_the_query_string(api: Api) -> None:
    reply = await api.call(
        "POST",
        "/pub",
        b"topic=t",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (reply.status, reply.message) == (400, "MISSING_ARG_TOPIC")


async def test_pub_to_an_exiting_topic_is_503(api: Api, nsqd: NSQD) -> None:
    nsqd.broker.get_topic("t").exiting = True
    reply = await api.post("/pub?topic=t", b"x")
    assert (reply.status, reply.message) == (503, "EXITING")
    reply = await api.post("/mpub?topic=t", b"x\ny")
    assert (reply.status, reply.message) == (503, "EXITING")


async def test_full_memory_queue_spills_to_disk(new_api: Any) -> None:
    api = await new_api(mem_queue_size=1)
    assert (await api.post("/pub?topic=t", b"1")).status == 200
    assert (await api.post("/pub?topic=t", b"2")).status == 200
    assert (await api.post("/mpub?topic=t", b"3\n4")).status == 200
    topic = api.nsqd.broker.topics["t"]
    assert (topic.depth, topic.backend_depth) == (4, 3)


async def test_disk_write_failure_is_503_and_unhealthy(new_api: Any) -> None:
    """nsqd answers any failed put with 503 EXITING and reports the error as its health."""
    api = await new_api(mem_queue_size=0)
    assert (await api.post("/pub?topic=t", b"1")).status == 200
    backend = api.nsqd.broker.topics["t"].backend
    real_put = backend.put

    def failing_put(records: list[bytes]) -> None:
        raise DiskQueueError("disk on fire")

    backend.put = failing_put
    reply = await api.post("/pub?topic=t", b"2")
    assert (reply.status, reply.message) == (503, "EXITING")
    ping = await api.get("/ping")
    assert (ping.status, ping.body) == (500, b"NOK - disk on fire")
    backend.put = real_put
    assert (await api.post("/pub?topic=t", b"3")).status == 200
    assert (await api.get("/ping")).body == b"OK"  # nsqd's health follows the last write


async def test_pub_and_mpub_are_post_only(api: Api) -> None:
    for path in ("/pub?topic=t", "/mpub?topic=t"):
        reply = await api.get(path)
        assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
        assert reply.headers["Allow"] == "OPTIONS, POST"


async def test_access_log_skips_publishes(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nsqpy.nsqd")
    await api.post("/pub?topic=t", b"x")
    await api.post("/mpub?topic=t", b"x")
    await api.get("/stats?format=json")
    await api.get("/nope")
    lines = [r.getMessage() for r in caplog.records if r.name == "nsqpy.nsqd"]
    assert not any("/pub" in line or "/mpub" in line for line in lines)
    pattern = r"^{} GET {} \(127\.0\.0\.1:\d+\) \S+$"
    assert any(re.match(pattern.format(200, r"/stats\?format=json"), line) for line in lines)
    assert any(re.match(pattern.format(404, "/nope"), line) for line in lines)


# -- /mpub ----------------------------------------------------------------------------------------


async def test_mpub_text_skips_empty_lines_and_keeps_cr(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=10)
    reply = await api.post("/mpub?topic=t", b"a\nb\r\n\n\n c \nlast")
    assert (reply.status, reply.body) == (200, b"OK")
    got = sorted([(await sub.message()).body for _ in range(4)])
    assert got == [b" c ", b"a", b"b\r", b"last"]
    assert nsqd.broker.topics["t"].message_count == 4


async def test_mpub_of_only_empty_lines_is_ok(api: Api, nsqd: NSQD) -> None:
    for body in (b"", b"\n\n\n"):
        reply = await api.post("/mpub?topic=empty", body)
        assert (reply.status, reply.body) == (200, b"OK")
    assert nsqd.broker.topics["empty"].message_count == 0


@pytest.mark.parametrize("binary", ["true", "1", "yes", "TRUE"])
async def test_mpub_binary(api: Api, nsqd: NSQD, binary: str) -> None:
    body = mpub_binary(b"one", b"two\nlines")
    reply = await api.post(f"/mpub?topic=t&binary={binary}", body)
    assert (reply.status, reply.body) == (200, b"OK")
    assert nsqd.broker.topics["t"].message_count == 2
    assert nsqd.broker.topics["t"].message_bytes == 3 + 9


@pytest.mark.parametrize("binary", ["false", "0"])
async def test_mpub_binary_false_is_text(api: Api, nsqd: NSQD, binary: str) -> None:
    reply = await api.post(f"/mpub?topic=t&binary={binary}", b"a\nb")
    assert reply.status == 200
    assert nsqd.broker.topics["t"].message_count == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"\x00\x00", "BAD_BODY"),  # cannot read the count
        (struct.pack(">i", 0), "BAD_BODY"),
        (struct.pack(">i", -1), "BAD_BODY"),
        (struct.pack(">i", 1), "BAD_MESSAGE"),  # no size
        (struct.pack(">ii", 1, 0), "BAD_MESSAGE"),
        (struct.pack(">ii", 1, 5) + b"abc", "BAD_MESSAGE"),  # short body
        (struct.pack(">ii", 1, 101) + b"x" * 101, "BAD_MESSAGE"),  # over max-msg-size
        (struct.pack(">ii", 2, 2) + b"ok", "BAD_MESSAGE"),  # the second one is missing
    ],
)
async def test_mpub_binary_errors(new_api: Any, body: bytes, code: str) -> None:
    api = await new_api(max_msg_size=100)
    reply = await api.post("/mpub?topic=t&binary=true", body)
    assert (reply.status, reply.message) == (413, code)


async def test_mpub_binary_ignores_bytes_after_the_declared_messages(api: Api) -> None:
    reply = await api.post("/mpub?topic=t&binary=true", mpub_binary(b"ok") + b"\x00\x00\x00")
    assert (reply.status, reply.body) == (200, b"OK")


async def test_mpub_size_limits(new_api: Any) -> None:
    api = await new_api(max_body_size=50, max_msg_size=10)
    # Content-Length over the body limit wins over every other check
    reply = await api.post("/mpub", b"x\n" * 26)
    assert (reply.status, reply.message) == (413, "BODY_TOO_BIG")
    reply = await api.post("/mpub?topic=t", chunked(b"123456789\n" * 6))
    assert (reply.status, reply.message) == (413, "BODY_TOO_BIG")
    assert (await api.post("/mpub?topic=t", chunked(b"123456789\n" * 5))).status == 200
    reply = await api.post("/mpub?topic=t", b"ok\n12345678901\nok")
    assert (reply.status, reply.message) == (413, "MSG_TOO_BIG")
    # an over-long line seen before the body limit is reached is MSG_TOO_BIG
    reply = await api.post("/mpub?topic=t", chunked(b"12345678901\n" * 6))
    assert (reply.status, reply.message) == (413, "MSG_TOO_BIG")


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("?topic=%", 400, "INVALID_REQUEST"),
        ("?topic=b@d", 400, "INVALID_TOPIC"),
    ],
)
async def test_mpub_topic_errors(api: Api, query: str, status: int, code: str) -> None:
    reply = await api.post("/mpub" + query, b"a\nb")
    assert (reply.status, reply.message) == (status, code)


# -- /topic/* -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/topic/create", 400, "MISSING_ARG_TOPIC"),
        ("/topic/create?topic=%zz", 400, "INVALID_REQUEST"),
        ("/topic/create?topic=bad!", 400, "INVALID_TOPIC"),
        ("/topic/delete", 400, "MISSING_ARG_TOPIC"),
        ("/topic/delete?topic=%zz", 400, "INVALID_REQUEST"),
        ("/topic/delete?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/topic/delete?topic=bad!", 404, "TOPIC_NOT_FOUND"),  # the name is not validated
        ("/topic/empty", 400, "MISSING_ARG_TOPIC"),
        ("/topic/empty?topic=%zz", 400, "INVALID_REQUEST"),
        ("/topic/empty?topic=bad!", 400, "INVALID_TOPIC"),
        ("/topic/empty?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause", 400, "MISSING_ARG_TOPIC"),
        ("/topic/pause?topic=%zz", 400, "INVALID_REQUEST"),
        ("/topic/pause?topic=bad!", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/topic/unpause", 400, "MISSING_ARG_TOPIC"),
        ("/topic/unpause?topic=nope", 404, "TOPIC_NOT_FOUND"),
    ],
)
async def test_topic_errors(api: Api, path: str, status: int, code: str) -> None:
    reply = await api.post(path)
    assert (reply.status, reply.message) == (status, code)


async def test_topic_create_delete(api: Api, nsqd: NSQD) -> None:
    reply = await api.post("/topic/create?topic=t")
    assert reply.is_empty_v1_ok()
    assert "t" in nsqd.broker.topics
    assert (await api.post("/topic/create?topic=t")).is_empty_v1_ok()  # idempotent
    assert (await api.post("/topic/delete?topic=t")).is_empty_v1_ok()
    assert "t" not in nsqd.broker.topics


async def test_topic_delete_disconnects_consumers(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=1)
    assert (await api.post("/topic/delete?topic=t")).is_empty_v1_ok()
    assert await sub.closed()
    assert "t" not in nsqd.broker.topics


async def test_topic_empty_drops_held_messages_only(api: Api, nsqd: NSQD) -> None:
    for body in (b"1", b"2", b"3"):
        await api.post("/pub?topic=t", body)
    topic = nsqd.broker.topics["t"]
    assert topic.depth == 3
    assert (await api.post("/topic/empty?topic=t")).is_empty_v1_ok()
    assert topic.depth == 0 and topic.message_count == 3


async def test_topic_pause_holds_messages_until_unpause(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    assert (await api.post("/topic/pause?topic=t")).is_empty_v1_ok()
    topic = nsqd.broker.topics["t"]
    assert topic.paused
    await api.post("/pub?topic=t", b"x")
    assert (topic.depth, topic.channels["c"].depth) == (1, 0)
    stats = await api.stats()
    assert stats["topics"][0]["paused"] is True
    assert (await api.post("/topic/unpause?topic=t")).is_empty_v1_ok()
    assert not topic.paused
    assert (topic.depth, topic.channels["c"].depth) == (0, 1)


# -- /channel/* -----------------------------------------------------------------------------------

CHANNEL_ACTIONS = ("create", "delete", "empty", "pause", "unpause")


@pytest.mark.parametrize("action", CHANNEL_ACTIONS)
@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("?topic=%zz&channel=c", 400, "INVALID_REQUEST"),
        ("?channel=c", 400, "MISSING_ARG_TOPIC"),
        ("?topic=bad!", 400, "INVALID_ARG_TOPIC"),
        ("?topic=nope", 400, "MISSING_ARG_CHANNEL"),
        ("?topic=nope&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
    ],
)
async def test_channel_argument_errors(
    api: Api, action: str, query: str, status: int, code: str
) -> None:
    reply = await api.post(f"/channel/{action}{query}")
    assert (reply.status, reply.message) == (status, code)


@pytest.mark.parametrize("action", ["delete", "empty", "pause", "unpause"])
async def test_channel_not_found(api: Api, action: str) -> None:
    await api.post("/topic/create?topic=t")
    reply = await api.post(f"/channel/{action}?topic=t&channel=c")
    assert (reply.status, reply.message) == (404, "CHANNEL_NOT_FOUND")


async def test_channel_create_needs_the_topic(api: Api, nsqd: NSQD) -> None:
    reply = await api.post("/channel/create?topic=t&channel=c")
    assert (reply.status, reply.message) == (404, "TOPIC_NOT_FOUND")
    assert "t" not in nsqd.broker.topics
    await api.post("/topic/create?topic=t")
    assert (await api.post("/channel/create?topic=t&channel=c")).is_empty_v1_ok()
    assert "c" in nsqd.broker.topics["t"].channels


async def test_channel_delete_disconnects_its_consumers(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=1)
    assert (await api.post("/channel/delete?topic=t&channel=c")).is_empty_v1_ok()
    assert await sub.closed()
    assert "c" not in nsqd.broker.topics["t"].channels


async def test_channel_empty_discards_in_flight_and_deferred(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=2)
    await api.post("/mpub?topic=t", b"1\n2\n3")
    await api.post("/pub?topic=t&defer=60000", b"later")
    await sub.message()
    await sub.message()
    channel = nsqd.broker.topics["t"].channels["c"]
    assert (channel.in_flight_count, channel.depth, channel.deferred_count) == (2, 1, 1)
    assert (await api.post("/channel/empty?topic=t&channel=c")).is_empty_v1_ok()
    assert (channel.in_flight_count, channel.depth, channel.deferred_count) == (0, 0, 0)
    assert all(not c.in_flight for c in channel.clients.values())


async def test_channel_pause_stops_delivery_until_unpause(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=1)
    assert (await api.post("/channel/pause?topic=t&channel=c")).is_empty_v1_ok()
    channel = nsqd.broker.topics["t"].channels["c"]
    assert channel.paused
    await api.post("/pub?topic=t", b"held")
    assert (channel.depth, channel.in_flight_count) == (1, 0)
    stats = await api.stats()
    assert stats["topics"][0]["channels"][0]["paused"] is True
    assert (await api.post("/channel/unpause?topic=t&channel=c")).is_empty_v1_ok()
    assert (await sub.message()).body == b"held"


# -- /stats ---------------------------------------------------------------------------------------

CLIENT_KEYS = [
    "client_id", "hostname", "version", "remote_address", "state", "ready_count",
    "in_flight_count", "message_count", "finish_count", "requeue_count", "connect_ts",
    "sample_rate", "deflate", "snappy", "user_agent", "tls", "tls_cipher_suite", "tls_version",
    "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual",
]  # fmt: skip
CHANNEL_KEYS = [
    "channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
    "message_count", "requeue_count", "timeout_count", "client_count", "clients", "paused",
    "e2e_processing_latency",
]  # fmt: skip
TOPIC_KEYS = [
    "topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
    "paused", "e2e_processing_latency",
]  # fmt: skip
MEMORY_KEYS = [
    "heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
    "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes",
    "gc_total_runs",
]  # fmt: skip
NO_E2E = {"count": 0, "percentiles": None}


def local_address(conn: RawV2) -> str:
    host, port = conn.writer.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def test_stats_json_of_an_idle_nsqd(api: Api, nsqd: NSQD) -> None:
    reply = await api.get("/stats?format=json")
    assert reply.headers["Content-Type"] == JSON_CT
    assert reply.headers["X-NSQ-Content-Type"] == V1
    stats = reply.json
    assert list(stats) == ["version", "health", "start_time", "topics", "memory", "producers"]
    assert stats["version"] == "1.3.0" and stats["health"] == "OK"
    assert stats["start_time"] == nsqd.start_time
    assert stats["topics"] == [] and stats["producers"] is None
    assert list(stats["memory"]) == MEMORY_KEYS
    assert all(isinstance(v, int) and v >= 0 for v in stats["memory"].values())
    assert stats["memory"]["heap_objects"] > 0 and stats["memory"]["heap_in_use_bytes"] > 0


async def test_stats_json_with_a_consumer_and_a_producer(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(
        nsqd, "t", "c", rdy=5, client_id="cid", hostname="h.example", user_agent="test/1.0"
    )
    pub = await RawV2.connect(nsqd.tcp_port)
    await pub.pub("t", b"hello")
    await pub.pub("other", b"x")
    await sub.message()
    await api.post("/pub?topic=t&defer=60000", b"later")
    stats = await api.stats()

    [topic] = [t for t in stats["topics"] if t["topic_name"] == "t"]
    assert list(topic) == TOPIC_KEYS
    assert topic["e2e_processing_latency"] == NO_E2E
    assert (topic["message_count"], topic["message_bytes"], topic["depth"]) == (2, 10, 0)
    [channel] = topic["channels"]
    assert list(channel) == CHANNEL_KEYS
    assert channel["e2e_processing_latency"] == NO_E2E
    assert (channel["in_flight_count"], channel["deferred_count"]) == (1, 1)
    assert (channel["message_count"], channel["depth"], channel["client_count"]) == (2, 0, 1)
    [client] = channel["clients"]
    assert list(client) == CLIENT_KEYS
    assert client["client_id"] == "cid" and client["hostname"] == "h.example"
    assert client["user_agent"] == "test/1.0" and client["version"] == "V2"
    assert client["remote_address"] == local_address(sub)
    assert (client["state"], client["ready_count"], client["in_flight_count"]) == (3, 5, 1)
    assert client["message_count"] == 1
    assert abs(client["connect_ts"] - nsqd.start_time) < 60

    [producer] = stats["producers"]
    assert list(producer) == [*CLIENT_KEYS[:15], "pub_counts", *CLIENT_KEYS[15:]]
    assert producer["remote_address"] == local_address(pub)
    assert producer["state"] == 0 and producer["ready_count"] == 0
    # nsqd's loop breaks after the first topic: one entry even after two topics
    assert producer["pub_counts"] == [{"topic": "t", "count": 1}]
    filtered = await api.stats("&topic=other")
    assert filtered["producers"][0]["pub_counts"] == [{"topic": "other", "count": 1}]
    assert [t["topic_name"] for t in filtered["topics"]] == ["other"]


async def test_stats_filters_and_switches(api: Api) -> None:
    for topic in ("b", "a", "c"):
        await api.post(f"/topic/create?topic={topic}")
    for channel in ("z", "x", "y"):
        await api.post(f"/channel/create?topic=a&channel={channel}")
    stats = await api.stats()
    assert [t["topic_name"] for t in stats["topics"]] == ["a", "b", "c"]  # sorted
    assert [c["channel_name"] for c in stats["topics"][0]["channels"]] == ["x", "y", "z"]
    assert (await api.stats("&topic=nope"))["topics"] is None
    assert (await api.stats("&topic=a&channel=nope"))["topics"] == []
    assert (await api.stats("&channel=y"))["topics"][0]["channels"][0]["channel_name"] == "y"
    assert [t["topic_name"] for t in (await api.stats("&channel=y"))["topics"]] == ["a"]
    assert (await api.stats("&topic="))["topics"] != []  # empty means no filter
    no_clients = await api.stats("&include_clients=false")
    channel = no_clients["topics"][0]["channels"][0]
    assert channel["clients"] is None and channel["client_count"] == 0
    assert no_clients["producers"] is None
    assert (await api.stats("&include_clients=0"))["topics"][0]["channels"][0]["clients"] is None
    assert (await api.stats("&include_clients=nah"))["topics"][0]["channels"][0]["clients"] == []
    assert "memory" not in await api.stats("&include_mem=false")
    assert "memory" not in await api.stats("&include_mem=0")
    assert "memory" in await api.stats("&include_mem=other")


async def test_stats_text(api: Api, nsqd: NSQD) -> None:
    await api.post("/topic/create?topic=t")
    await api.post("/channel/create?topic=t&channel=c")
    sub = await consumer(nsqd, "t", "c", rdy=5, hostname="h", user_agent="ua")
    await api.post("/pub?topic=t", b"hello")
    await sub.message()
    pub = await RawV2.connect(nsqd.tcp_port)
    await pub.pub("t", b"x")
    for query in ("", "?format=text", "?format=JSON"):
        reply = await api.get("/stats" + query)
        assert reply.status == 200
        assert reply.headers["Content-Type"] == TEXT_CT
        assert reply.headers["X-NSQ-Content-Type"] == V1
    lines = reply.body.decode().split("\n")
    assert lines[0] == "nsqd v1.3.0 (built w/nsqpy-0.1.0)"
    assert re.fullmatch(r"start_time \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)", lines[1])
    assert re.fullmatch(r"uptime [0-9.]+(ns|µs|ms|s)|uptime [0-9hm.]+s", lines[2])
    assert lines[3:7] == ["", "Health: OK", "", "Memory:"]
    assert re.fullmatch(r"   heap_objects {13}\t\d+", lines[7])
    topics_at = lines.index("Topics:")
    assert lines[topics_at + 1] == (
        "   [t              ] depth: 0     be-depth: 0     msgs: 2        e2e%: "
    )
    assert lines[topics_at + 2] == (
        "      [c                        ] depth: 0     be-depth: 0     inflt: 2    def: 0    "
        "re-q: 0     timeout: 0     msgs: 2        e2e%: "
    )
    sub_port = local_address(sub).rsplit(":", 1)[1]
    assert re.fullmatch(
        rf"        \[V2 h:{sub_port} ua *\] state: 3 inflt: 2    rdy: 5    fin: 0        "
        r"re-q: 0        msgs: 2        connected: \d+s",
        lines[topics_at + 3],
    )
    pub_port = local_address(pub).rsplit(":", 1)[1]
    assert lines[topics_at + 4 : topics_at + 6] == ["", "Producers:"]
    assert re.fullmatch(
        rf"   \[V2 127\.0\.0\.1:{pub_port} *\] msgs: 1        topics: t=1 connected: \d+s",
        lines[topics_at + 6],
    )
    assert lines[-1] == ""


async def test_stats_text_when_empty(api: Api) -> None:
    reply = await api.get("/stats?include_mem=false")
    lines = reply.body.decode().split("\n")
    assert lines[3:] == ["", "Health: OK", "", "Topics: None", "", "Producers: None", ""]


async def test_stats_bad_query_is_invalid_request(api: Api) -> None:
    reply = await api.get("/stats?format=json&topic=%g0")
    assert (reply.status, reply.message) == (400, "INVALID_REQUEST")


# -- /config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "body", "content_type"),
    [
        ("tcp_address", b"127.0.0.1:0", TEXT_CT),  # strings are raw text
        ("max_msg_size", b"1048576", JSON_CT),
        ("msg_timeout", b"60000000000", JSON_CT),  # durations in ns
        ("snappy", b"true", JSON_CT),
        ("statsd_mem_stats", b"true", JSON_CT),
        ("nsqlookupd_tcp_addresses", b"[]", JSON_CT),
        ("e2e_processing_latency_percentiles", b"null", JSON_CT),  # Go's nil slice
        ("log_level", b"2", JSON_CT),  # info
        ("tls_min_version", b"769", JSON_CT),
        ("statsd_address", b"", None),  # an empty string is an empty body
    ],
)
async def test_config_get_types(api: Api, name: str, body: bytes, content_type: str | None) -> None:
    reply = await api.get(f"/config/{name}")
    assert (reply.status, reply.body) == (200, body)
    assert reply.headers.get("Content-Type") == content_type
    assert reply.headers["X-NSQ-Content-Type"] == V1


async def test_config_get_node_id_uses_the_cfg_name(api: Api, nsqd: NSQD) -> None:
    assert (await api.get("/config/id")).json == nsqd.opts.node_id
    for name in ("node_id", "nope", "queue_scan_interval", "version", "config"):
        reply = await api.get(f"/config/{name}")
        assert (reply.status, reply.message) == (400, "INVALID_OPTION")


async def test_config_put_log_level(api: Api, restore_log_level: logging.Logger) -> None:
    reply = await api.put("/config/log_level", b"debug")
    assert (reply.status, reply.body) == (200, b"1")
    assert reply.headers["Content-Type"] == JSON_CT
    assert restore_log_level.level == logging.DEBUG
    assert (await api.put("/config/log_level", b"ERROR")).body == b"4"
    assert restore_log_level.level == logging.ERROR
    assert (await api.get("/config/log_level")).body == b"4"


async def test_config_put_lookupd_addresses(api: Api, nsqd: NSQD) -> None:
    reply = await api.put("/config/nsqlookupd_tcp_addresses", b'["a:4160", "b:4160"]')
    assert (reply.status, reply.json) == (200, ["a:4160", "b:4160"])
    assert nsqd.opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert (await api.get("/config/nsqlookupd_tcp_addresses")).json == ["a:4160", "b:4160"]


@pytest.mark.parametrize(
    ("name", "body", "status", "code"),
    [
        ("log_level", b"", 413, "INVALID_VALUE"),
        ("nope", b"", 413, "INVALID_VALUE"),  # the body is checked first
        ("log_level", b"x" * 101, 413, "INVALID_VALUE"),
        ("log_level", b"loud", 400, "INVALID_VALUE"),
        ("log_level", b"debug\n", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b"a:4160", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b"[1]", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b'{"a": 1}', 400, "INVALID_VALUE"),
        ("max_msg_size", b"5", 400, "INVALID_OPTION"),
        ("nope", b"5", 400, "INVALID_OPTION"),
    ],
)
async def test_config_put_errors(
    new_api: Any,
    restore_log_level: logging.Logger,
    name: str,
    body: bytes,
    status: int,
    code: str,
) -> None:
    api = await new_api(max_msg_size=100)
    reply = await api.put(f"/config/{name}", body)
    assert (reply.status, reply.message) == (status, code)


async def test_config_methods(api: Api) -> None:
    reply = await api.post("/config/log_level")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
    assert reply.headers["Allow"] == "GET, OPTIONS, PUT"


# -- routing --------------------------------------------------------------------------------------


async def test_unknown_path_is_404_json(api: Api) -> None:
    for method in ("GET", "POST", "PUT", "DELETE"):
        reply = await api.call(method, "/nope")
        assert (reply.status, reply.message) == (404, "NOT_FOUND")
    reply = await api.get("/config/")  # a param cannot be empty
    assert (reply.status, reply.message) == (404, "NOT_FOUND")


async def test_wrong_method_is_405_with_allow(api: Api) -> None:
    reply = await api.post("/stats")
    assert (reply.status, reply.message) == (405, "METHOD_NOT_ALLOWED")
    assert reply.headers["Allow"] == "GET, OPTIONS"
    reply = await api.call("HEAD", "/ping")
    assert (reply.status, reply.headers["Allow"]) == (405, "GET, OPTIONS")
    reply = await api.call("DELETE", "/debug/pprof/symbol")
    assert (reply.status, reply.headers["Allow"]) == (405, "GET, OPTIONS, POST")


async def test_automatic_options(api: Api) -> None:
    reply = await api.call("OPTIONS", "/config/log_level")
    assert (reply.status, reply.body) == (200, b"")
    assert reply.headers["Allow"] == "GET, OPTIONS, PUT"
    assert "X-NSQ-Content-Type" not in reply.headers
    reply = await api.call("OPTIONS", "/nope")
    assert (reply.status, reply.message) == (404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path", "status", "location"),
    [
        ("GET", "/stats/", 301, "/stats"),
        ("GET", "/stats/?format=json", 301, "/stats?format=json"),
        ("GET", "/debug/pprof", 301, "/debug/pprof/"),
        ("GET", "/config/log_level/", 301, "/config/log_level"),
        ("POST", "/pub/?topic=t", 307, "/pub?topic=t"),
        ("GET", "/STATS", 301, "/stats"),
        ("GET", "//ping", 301, "/ping"),
        ("GET", "/x/../Info/", 301, "/info"),
        ("GET", "/CONFIG/Log_Level", 301, "/config/Log_Level"),
        ("POST", "/Topic/Create?topic=t", 307, "/topic/create?topic=t"),
    ],
)
async def test_redirects(api: Api, method: str, path: str, status: int, location: str) -> None:
    reply = await api.call(method, path)
    assert (reply.status, reply.headers["Location"]) == (status, location)
    assert "X-NSQ-Content-Type" not in reply.headers
    if method == "GET":
        reason = "Moved Permanently"
        assert reply.body == f'<a href="{location}">{reason}</a>.\n\n'.encode()
        assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
    else:
        assert reply.body == b""


async def test_redirect_only_within_the_method(api: Api) -> None:
    reply = await api.post("/stats/")  # /stats is GET only: no redirect, no 405
    assert (reply.status, reply.message) == (404, "NOT_FOUND")


async def test_handler_failure_is_500_internal_error(
    api: Api, nsqd: NSQD, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(name: str) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(nsqd.broker, "get_topic", broken)
    reply = await api.post("/topic/create?topic=t")
    assert (reply.status, reply.message) == (500, "INTERNAL_ERROR")
    assert (await api.get("/ping")).status == 200  # the server carries on


# -- /debug ---------------------------------------------------------------------------------------


async def test_pprof_placeholders(api: Api) -> None:
    index = await api.get("/debug/pprof/")
    assert index.status == 200 and index.headers["Content-Type"] == TEXT_CT
    assert b"not available" in index.body and b"heap" in index.body
    for name in ("heap", "goroutine", "block", "threadcreate", "profile", "symbol"):
        reply = await api.get(f"/debug/pprof/{name}")
        assert reply.status == 501 and b"py-spy" in reply.body
    assert (await api.post("/debug/pprof/symbol")).status == 501
    cmdline = await api.get("/debug/pprof/cmdline")
    assert cmdline.status == 200 and cmdline.body


@pytest.mark.parametrize(
    ("query", "text"),
    [
        ("?rate=x", 'invalid block rate : strconv.Atoi: parsing "x": invalid syntax'),
        ("", 'invalid block rate : strconv.Atoi: parsing "": invalid syntax'),
        (
            "?rate=99999999999999999999",
            'invalid block rate : strconv.Atoi: parsing "99999999999999999999": value out of range',
        ),
    ],
)
async def test_setblockrate_errors_are_plain_text(api: Api, query: str, text: str) -> None:
    reply = await api.put("/debug/setblockrate" + query)
    assert (reply.status, reply.body.decode()) == (400, text)
    assert reply.headers["Content-Type"] == TEXT_CT
    assert "X-NSQ-Content-Type" not in reply.headers


async def test_setblockrate_reads_a_form_body(api: Api) -> None:
    reply = await api.call(
        "PUT",
        "/debug/setblockrate?rate=1",
        b"rate=bad",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert reply.status == 400 and b'"bad"' in reply.body


async def test_debug_actions_answer_500_like_nsqd(api: Api) -> None:
    # nsqd v1.3.0's PlainText decorator panics on the nil these handlers return, so the
    # action happens and the router's panic handler answers 500 INTERNAL_ERROR.
    reply = await api.put("/debug/setblockrate?rate=1")
    assert (reply.status, reply.message) == (500, "INTERNAL_ERROR")
    runs = sum(g["collections"] for g in gc.get_stats())
    reply = await api.post("/debug/freememory")
    assert (reply.status, reply.message) == (500, "INTERNAL_ERROR")
    assert sum(g["collections"] for g in gc.get_stats()) > runs


# -- unit: Go JSON, query strings, paths ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ({"b": 1, "a": [True, None, "x"]}, b'{"b":1,"a":[true,null,"x"]}'),
        ("<a href='x'>&amp;</a>", b"\"\\u003ca href='x'\\u003e\\u0026amp;\\u003c/a\\u003e\""),
        ("é\u2028\u2029", b'"\xc3\xa9\\u2028\\u2029"'),
        ('\x00\x08\x0c\n\r\t"\\\x7f', b'"\\u0000\\u0008\\u000c\\n\\r\\t\\"\\\\\x7f"'),
        ("bad\udcff", b'"bad\\ufffd"'),
        ([1.0, 0.99, 1e20, 1e21, 1e-6, 1e-7, 1.5e-10, -0.0, 123456789.5], None),
    ],
)
def test_gojson(value: object, encoded: bytes | None) -> None:
    if encoded is None:
        encoded = b"[1,0.99,100000000000000000000,1e+21,0.000001,1e-7,1.5e-10,-0,123456789.5]"
    assert gojson.dumps(value) == encoded


def test_gojson_refuses_nan_and_unknown_types() -> None:
    with pytest.raises(ValueError):
        gojson.dumps(float("nan"))
    with pytest.raises(TypeError):
        gojson.dumps(object())


def test_query_params_follow_go() -> None:
    q = QueryParams("topic=a+b&topic=second&x=%41%2f&empty=&flag&&")
    assert q.error is None
    assert (q.get("topic"), q.get("x"), q.get("empty"), q.get("flag")) == ("a b", "A/", "", "")
    assert q.get("missing") is None
    bad = QueryParams("a=1&b=%zz&c=3;d=4&e=5")
    assert bad.error == 'invalid URL escape "%zz"'
    assert (bad.get("a"), bad.get("b"), bad.get("c"), bad.get("e")) == ("1", None, None, "5")
    assert QueryParams("a=%").error == 'invalid URL escape "%"'
    assert QueryParams("t=%ff").get("t") == "\udcff"  # invalid UTF-8 is kept, and invalid


def test_clean_path() -> None:
    assert clean_path("") == "/"
    assert clean_path("//a/./b/../c/") == "/a/c/"
    assert clean_path("/..") == "/"
    assert clean_path("a/b") == "/a/b"


def test_sniff_content_type() -> None:
    assert sniff_content_type(b"") is None
    assert sniff_content_type(b"OK\n") == TEXT_CT
    assert sniff_content_type(b"\x00\x01") == "application/octet-stream"

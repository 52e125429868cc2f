"""nsq_to_http's handler: URLs, headers, status rules, modes, sampling, status lines."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote_plus

import aiohttp
import pytest

from cli.recorder import recorder
from nsqpy.tools.epsilon_greedy import BUCKETS, INITIAL_EPSILON, EpsilonGreedyPool
from nsqpy.tools.http_sink import (
    USER_AGENT,
    HttpSink,
    PublishFailed,
    SinkOptions,
    canonical_header_key,
    get_url,
    parse_headers,
)


@dataclass
class Msg:
    body: bytes


# -- pure pieces ------------------------------------------------------------------------------


def test_get_url_is_go_query_escape() -> None:
    assert get_url("http://h/p?d=%s", b"a b&c=d/e~f.g-h_i") == (
        "http://h/p?d=a+b%26c%3Dd%2Fe~f.g-h_i"
    )
    # Bytes, not text: UTF-8 and invalid UTF-8 are escaped byte by byte, hex in upper case.
    assert get_url("%s", "é".encode() + b"\xff\n") == "%C3%A9%FF%0A"
    assert get_url("http://h/%%7E?x=%s&y=%d", b"+") == "http://h/%7E?x=%2B&y=%d"


def test_header_parsing_like_nsq() -> None:
    assert parse_headers(["header1: value1", "header2:value2", "X-A: b:c"]) == {
        "header1": "value1",
        "header2": "value2",
        "X-A": "b:c",
    }
    for bad in (["header1:"], [": value2"], [":"], ["novalue"]):
        with pytest.raises(ValueError, match="invalid header"):
            parse_headers(bad)
    assert canonical_header_key("x-custom-thing") == "X-Custom-Thing"
    assert canonical_header_key("CONTENT-TYPE") == "Content-Type"
    assert canonical_header_key("bad key") == "bad key"  # not a token: left alone


# -- epsilon-greedy ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def draws(*values: float) -> Callable[[], float]:
    it = iter(values)
    return lambda: next(it)


def test_epsilon_greedy_explores_then_exploits_the_faster_host() -> None:
    clock = Clock()
    rand = draws(0.0, 0.0, 0.99, 0.2, 0.99, 0.5, 0.99, 0.9)
    pool = EpsilonGreedyPool(["slow", "fast"], clock, rand=rand)
    # Exploration (draw < epsilon) is round robin, and epsilon decays each time.
    assert [pool.get(), pool.get()] == ["slow", "fast"]
    assert pool.epsilon == pytest.approx(INITIAL_EPSILON * 0.9 * 0.9)
    pool.mark_timed("slow", True, 0.300)
    pool.mark_timed("fast", True, 0.100)
    # Exploiting: scores 1/300 and 1/100, so "slow" owns picks <= 0.25, "fast" the rest.
    assert pool.get() == "slow"  # pick 0.2
    assert pool.get() == "fast"  # pick 0.5
    pool.mark("fast", ok=False)  # a dead host is not a candidate until its retry is due
    assert pool.get() == "slow"  # pick 0.9 would have been "fast"


def test_epsilon_greedy_forgets_timings_after_the_decay_duration() -> None:
    clock = Clock()
    rand = draws(0.99, 0.9, 0.99)
    pool = EpsilonGreedyPool(["a", "b"], clock, rand=rand, decay_duration=120.0)
    pool.mark_timed("a", True, 0.050)
    pool.mark_timed("b", True, 0.050)
    assert pool.get() == "b"  # equal scores: pick 0.9 lands on the second host
    clock.now += BUCKETS * 1.0  # every bucket has rotated out
    # No timings left: exploitation has no candidates and falls back to round robin.
    assert pool.get() == "a"
    # Responses under 1 ms count as 0 ms, as in go-hostpool: still no candidates.
    pool.mark_timed("b", True, 0.0005)
    assert pool._weighted_choice() is None


# -- the handler against a real endpoint ---------------------------------------------------


def opts(addresses: list[str], **kw: object) -> SinkOptions:
    return SinkOptions(addresses=addresses, **kw)  # type: ignore[arg-type]


async def test_get_and_post_requests_headers_and_status_rules() -> None:
    status = {"code": 200}
    async with recorder(lambda _r: status["code"]) as rec, aiohttp.ClientSession() as session:
        headers = {"x-trace": "abc", "user-agent": "custom/1"}
        get_opts = opts(
            [rec.base + "/get?m=%s"], post=False, mode="round-robin", headers={"x-trace": "abc"}
        )
        get = HttpSink(get_opts, session, log=lambda _line: None)
        await get.handle(Msg(b"hello world/\xe2\x9c\x93"))
        req = rec.requests[-1]
        assert (req.method, req.path, req.raw_query) == ("GET", "/get", "m=hello+world%2F%E2%9C%93")
        assert unquote_plus(req.raw_query[2:]) == "hello world/\u2713"
        assert req.headers["user-agent"] == USER_AGENT == "nsq_to_http v1.3.0"
        assert req.headers["x-trace"] == "abc"
        status["code"] = 201  # GET accepts exactly 200
        with pytest.raises(PublishFailed, match=r"^got status code 201$"):
            await get.handle(Msg(b"x"))

        post = HttpSink(
            opts([rec.base + "/post"], post=True, content_type="text/plain", headers=headers),
            session,
            log=lambda _line: None,
        )
        await post.handle(Msg(b"\x00binary body"))  # POST accepts any 2xx
        req = rec.requests[-1]
        assert (req.method, req.path, req.body) == ("POST", "/post", b"\x00binary body")
        assert req.headers["content-type"] == "text/plain"
        assert req.headers["user-agent"] == "custom/1"  # --header can override it, as in Go
        status["code"] = 503
        with pytest.raises(PublishFailed, match=r"^got status code 503$"):
            await post.handle(Msg(b"y"))


async def test_modes_pick_addresses() -> None:
    async with recorder() as a, recorder() as b, aiohttp.ClientSession() as session:
        addresses = [a.base + "/", b.base + "/"]
        rr = HttpSink(opts(addresses, post=True, mode="round-robin"), session, log=print)
        for i in range(3):
            await rr.handle(Msg(b"%d" % i))
        # NSQ's counter is incremented first: the first message goes to the second address.
        assert [r.body for r in b.requests] == [b"0", b"2"]
        assert [r.body for r in a.requests] == [b"1"]
        # An unknown mode is NSQ's "every address in turn".
        everyone = HttpSink(opts(addresses, post=True, mode="all-of-them"), session, log=print)
        await everyone.handle(Msg(b"both"))
        assert a.requests[-1].body == b.requests[-1].body == b"both"


async def test_hostpool_mode_avoids_a_failing_host() -> None:
    async with (
        recorder(lambda _r: 500) as bad,
        recorder() as good,
        aiohttp.ClientSession() as session,
    ):
        sink = HttpSink(opts([bad.base, good.base], post=True), session, log=print)
        with pytest.raises(PublishFailed):
            await sink.handle(Msg(b"1"))  # the pool starts with the first host
        for i in range(4):
            await sink.handle(Msg(b"%d" % i))
        assert len(bad.requests) == 1  # marked dead: not retried for 30 s
        assert len(good.requests) == 4


async def test_sample_publishes_a_fraction() -> None:
    async with recorder() as rec, aiohttp.ClientSession() as session:
        rand = draws(0.1, 0.5, 0.51, 0.9)
        sink = HttpSink(opts([rec.base], post=True, sample=0.5), session, log=print, rand=rand)
        for body in (b"a", b"b", b"c", b"d"):
            await sink.handle(Msg(body))  # skipped ones return normally: FIN, as in NSQ
        assert [r.body for r in rec.requests] == [b"a", b"b"]


async def test_status_lines_every_n_requests() -> None:
    lines: list[str] = []
    async with recorder() as a, recorder() as b, aiohttp.ClientSession() as session:
        sink = HttpSink(
            opts([a.base, b.base], post=True, mode="round-robin", status_every=2),
            session,
            log=lines.append,
        )
        warning = "Warning: use more than 100 status values for accurate percentiles"
        assert lines == [f"{warning} (configured with 2)"] * 3  # two addresses + aggregate
        lines.clear()
        for i in range(5):
            await sink.handle(Msg(b"%d" % i))
    # timer_metrics reports when its window wraps: on the 3rd and 5th of 2-sample windows.
    aggregate = [line for line in lines if line.startswith("[aggregate]:")]
    assert len(aggregate) == 2
    for line in aggregate:
        assert_status_line(line, "[aggregate]:", 2)
    per_address = [line for line in lines if not line.startswith("[aggregate]:")]
    assert len(per_address) == 1  # address b got requests 1, 3, 5 -> wrapped once
    assert_status_line(per_address[0], f"[{b.base}]:", 2)


def assert_status_line(line: str, prefix: str, count: int) -> None:
    ms = r"\d+\.\d\dms"
    pattern = re.escape(prefix) + rf" finished {count} - 99th: {ms} - 95th: {ms} - avg: {ms}"
    assert re.fullmatch(pattern, line), line


def test_single_address_has_no_per_address_status() -> None:
    sink = HttpSink(opts(["http://x/"], post=True, status_every=250), None, log=print)  # type: ignore[arg-type]
    assert sink.per_address["http://x/"].status_every == 0
    assert sink.aggregate.status_every == 250

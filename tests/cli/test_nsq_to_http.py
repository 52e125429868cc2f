"""nsq_to_http as a process: real nsqd in, a local aiohttp endpoint out."""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from cli.conftest import (
    GO_LOG_PREFIX,
    channel_stats,
    eventually,
    fatal_line,
    publish,
    run_tool,
    tcp,
)
from cli.recorder import Recorder, Request, recorder
from nsqpy.nsqd.app import NSQD

Start = Callable[..., Any]
CHANNEL = "nsq_to_http"
#: Requeue quickly: go-nsq's default requeue delay (90 s per attempt) is too slow for a test.
FAST_RETRY = ("--consumer-opt=default_requeue_delay,10ms", "--consumer-opt=backoff_multiplier,10ms")


async def settled(nsqd: NSQD, topic: str, count: int) -> dict[str, Any]:
    """All ``count`` messages delivered and FINished on the channel."""
    return await eventually(
        lambda: channel_stats(nsqd, topic, CHANNEL),
        lambda s: (
            s is not None
            and s["message_count"] == count
            and s["depth"] == 0
            and s["in_flight_count"] == 0
            and s["deferred_count"] == 0
        ),
    )


async def requests(rec: Recorder, count: int) -> list[Request]:
    async def probe() -> int:
        return len(rec.requests)

    await eventually(probe, lambda n: n >= count)
    return rec.requests


def query_body(req: Request) -> bytes:
    """The body a GET carried in ``?d=``, decoded as Go's QueryUnescape would."""
    value = req.raw_query.removeprefix("d=")
    return unquote_to_bytes(value.replace("+", " "))


async def test_get_escapes_the_body_and_sends_headers(nsqd: NSQD, tools: Start) -> None:
    bodies = [b"plain", b"two words & more", b"100% / \xe2\x9c\x93", b"~-_."]
    await publish(nsqd, "hits", *bodies)
    async with recorder() as rec:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=hits",
            f"--get={rec.base}/track?d=%s", "--header=X-Trace: abc", "--header", "x-team:ops",
        )  # fmt: skip
        got = await requests(rec, len(bodies))
        await settled(nsqd, "hits", len(bodies))
        assert await tool.stop() == 0, tool.stderr
    assert sorted(query_body(r) for r in got) == sorted(bodies)
    by_body = {query_body(r): r for r in got}
    assert by_body[b"two words & more"].raw_query == "d=two+words+%26+more"  # QueryEscape
    assert by_body[b"~-_."].raw_query == "d=~-_."
    for req in got:
        assert (req.method, req.path, req.body) == ("GET", "/track", b"")
        assert req.headers["user-agent"] == "nsq_to_http v1.3.0"
        assert req.headers["x-trace"] == "abc"
        assert req.headers["x-team"] == "ops"


async def test_post_sends_the_body_with_content_type(nsqd: NSQD, tools: Start) -> None:
    bodies = [b'{"n": %d}' % i for i in range(50)] + [b"\x00\xff raw"]
    await publish(nsqd, "events", *bodies)
    async with recorder() as rec:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=events",
            f"--post={rec.base}/ingest", "--content-type=application/json", "--n=4",
        )  # fmt: skip
        got = await requests(rec, len(bodies))
        await settled(nsqd, "events", len(bodies))
        assert await tool.stop(signal.SIGINT) == 0, tool.stderr
    assert sorted(r.body for r in got) == sorted(bodies)
    assert {(r.method, r.path, r.headers["content-type"]) for r in got} == {
        ("POST", "/ingest", "application/json")
    }


async def test_non_2xx_is_requeued_and_redelivered(nsqd: NSQD, tools: Start) -> None:
    seen: Counter[bytes] = Counter()

    def flaky(req: Request) -> int:
        seen[req.body] += 1
        return 503 if seen[req.body] == 1 else 200  # every message fails once

    bodies = [b"a", b"b", b"c"]
    await publish(nsqd, "flaky", *bodies)
    async with recorder(flaky) as rec:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=flaky",
            f"--post={rec.base}/", *FAST_RETRY,
        )  # fmt: skip
        stats = await settled(nsqd, "flaky", 3)
        assert await tool.stop() == 0
    assert seen == {b"a": 2, b"b": 2, b"c": 2}
    assert stats["requeue_count"] == 3
    assert "got status code 503" in tool.stderr


async def test_get_requires_exactly_200(nsqd: NSQD, tools: Start) -> None:
    codes = iter([204, 200])
    await publish(nsqd, "strict", b"x")
    async with recorder(lambda _r: next(codes)) as rec:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=strict",
            f"--get={rec.base}/?d=%s", *FAST_RETRY,
        )  # fmt: skip
        stats = await settled(nsqd, "strict", 1)
        assert await tool.stop() == 0
    assert len(rec.requests) == 2  # 204 counted as a failure for GET, as in NSQ
    assert stats["requeue_count"] == 1


async def test_sample_zero_finishes_without_publishing(nsqd: NSQD, tools: Start) -> None:
    await publish(nsqd, "sampled", *[b"%d" % i for i in range(20)])
    async with recorder() as rec:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=sampled",
            f"--post={rec.base}/", "--sample=0",
        )  # fmt: skip
        await settled(nsqd, "sampled", 20)
        assert await tool.stop() == 0
    assert rec.requests == []


async def test_round_robin_and_status_lines(nsqd: NSQD, tools: Start) -> None:
    await publish(nsqd, "rr", *[b"%d" % i for i in range(10)])
    async with recorder() as one, recorder() as two:
        tool = await tools(
            "nsq_to_http", f"--nsqd-tcp-address={tcp(nsqd)}", "--topic=rr",
            f"--post={one.base}/", f"--post={two.base}/", "--mode=round-robin",
            "--status-every=3", "--n=1",
        )  # fmt: skip
        await settled(nsqd, "rr", 10)
        assert await tool.stop() == 0
    assert (len(one.requests), len(two.requests)) == (5, 5)
    warning = (
        "Warning: use more than 100 status values for accurate percentiles (configured with 3)"
    )
    assert tool.stderr.count(warning) == 3  # two addresses and the aggregate
    ms = r"\d+\.\d\dms"
    status = rf"{GO_LOG_PREFIX}\[aggregate\]: finished 3 - 99th: {ms} - 95th: {ms} - avg: {ms}\n"
    # 10 requests in windows of 3: the window wraps on requests 4, 7 and 10.
    assert len(re.findall(status, tool.stderr)) == 3, tool.stderr
    per_address = r"\[http://127\.0\.0\.1:\d+/\]: finished 3 - 99th"
    assert len(re.findall(per_address, tool.stderr)) == 2  # 5 requests each: one wrap


async def check_fatal(message: str, *argv: str) -> None:
    result = await run_tool("nsq_to_http", *argv)
    assert result.code == 1, result.err
    assert fatal_line(message).fullmatch(result.err), result.err


async def test_checks_in_nsqs_order() -> None:
    src = "--nsqd-tcp-address=127.0.0.1:1"
    get = "--get=http://127.0.0.1:1/?d=%s"
    post = "--post=http://127.0.0.1:1/"
    checks = [
        ("--header value format should be 'key=value'", ["--header=novalue"]),
        ("--header value format should be 'key=value'", ["--header=k=v"]),  # sic
        ("--topic and --channel are required", [src, post]),
        ("--topic and --channel are required", ["--topic=t", "--channel=", src, post]),
        ("--content-type only used with --post", ["--topic=t", src, get, "--content-type=x"]),
        ("--content-type requires a value when used", ["--topic=t", src, post, "--content-type="]),
        ("--nsqd-tcp-address or --lookupd-http-address required", ["--topic=t", post]),
        (
            "use --nsqd-tcp-address or --lookupd-http-address not both",
            ["--topic=t", src, "--lookupd-http-address=127.0.0.1:2", post],
        ),
        ("--get or --post required", ["--topic=t", src]),
        ("use --get or --post not both", ["--topic=t", src, get, post]),
        ("invalid GET address - must be a printf string", ["--topic=t", src, "--get=http://h/"]),
        ("invalid GET address - must be a printf string", ["--topic=t", src, "--get=/%s/%s"]),
        ("ERROR: --sample must be between 0.0 and 1.0", ["--topic=t", src, post, "--sample=1.5"]),
        ("ERROR: --sample must be between 0.0 and 1.0", ["--topic=t", src, post, "--sample=-1"]),
        ("invalid topic name", ["--topic=no/slash", src, post]),
        ("invalid channel name", ["--topic=t", "--channel=a b", src, post]),
    ]
    for message, argv in checks:
        await check_fatal(message, *argv)


async def test_version_and_usage_errors() -> None:
    version = await run_tool("nsq_to_http", "--version")
    assert (version.code, version.out) == (0, b"nsq_to_http v1.3.0\n")
    bad_opt = await run_tool("nsq_to_http", "--consumer-opt=no_such_option,1")
    assert bad_opt.code == 2  # go-nsq's ConfigFlag checks it while parsing
    assert bad_opt.err.startswith('invalid value "no_such_option,1" for flag -consumer-opt: ')
    help_ = await run_tool("nsq_to_http", "-h")
    assert help_.code == 0
    assert "  -n int\n    \tnumber of concurrent publishers (default 100)\n" in help_.err
    assert (
        "  -http-client-request-timeout duration\n    \ttimeout for HTTP request (default 20s)\n"
        in (help_.err)
    )

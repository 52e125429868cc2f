"""nsq_tail as a process: bodies on stdout, --n, --print-topic, its own ephemeral channel."""

from __future__ import annotations

import asyncio
import re
import signal
from typing import Any

from conftest import NsqdFactory
from v2client import RawV2

from cli.conftest import (
    Tool,
    channel_stats,
    eventually,
    fatal_line,
    get_json,
    http,
    publish,
    run_tool,
    tcp,
    topic_stats,
)
from nsqpy.client import NsqdHTTPClient
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqlookupd.app import NSQLookupd


async def test_prints_bodies_then_stops_after_n(nsqd: NSQD) -> None:
    await publish(nsqd, "t", *(b"m%d" % i for i in range(5)))
    result = await run_tool(
        "nsq_tail", "--topic=t", "--channel=c", f"--nsqd-tcp-address={tcp(nsqd)}", "--n=3"
    )
    assert result.code == 0, result.err
    assert result.out == b"m0\nm1\nm2\n"
    assert re.search(
        r"(^|\n)\d{4}/\d\d/\d\d \d\d:\d\d:\d\d Adding consumer for topic: t\n", result.err
    )
    # the three shown were FINished; the rest wait in the channel for the next reader
    stats = await eventually(
        lambda: channel_stats(nsqd, "t", "c"), lambda s: s["client_count"] == 0
    )
    assert (stats["depth"], stats["in_flight_count"]) == (2, 0)


async def ready_counts(nsqd: NSQD, topic: str) -> list[int]:
    stats = await topic_stats(nsqd, topic)
    channels = (stats or {}).get("channels") or []
    return [c["ready_count"] for ch in channels for c in ch["clients"]]


async def test_n_caps_max_in_flight(nsqd: NSQD, tools: Any) -> None:
    capped = await tools("nsq_tail", "--topic=rdy", f"--nsqd-tcp-address={tcp(nsqd)}", "--n=50")
    assert await eventually(lambda: ready_counts(nsqd, "rdy"), lambda r: r == [50])
    assert await capped.stop() == 0
    wide = await tools(
        "nsq_tail", "--topic=rdy", f"--nsqd-tcp-address={tcp(nsqd)}", "--n=500",
        "--max-in-flight=7",
    )  # fmt: skip
    assert await eventually(lambda: ready_counts(nsqd, "rdy"), lambda r: r == [7])
    assert await wide.stop(signal.SIGINT) == 0


async def test_print_topic_with_several_topics(nsqd: NSQD, tools: Any) -> None:
    tail: Tool = await tools(
        "nsq_tail", "--topic=t1", "-topic", "t2", "--print-topic", "--channel=c",
        f"--nsqd-tcp-address={tcp(nsqd)}",
    )  # fmt: skip
    await publish(nsqd, "t1", b"a")
    await publish(nsqd, "t2", b"b b")
    assert sorted(await tail.lines(2)) == [b"t1 | a\n", b"t2 | b b\n"]
    assert await tail.stop(signal.SIGINT) == 0
    assert tail.pending_lines() == []


async def test_random_ephemeral_channel_goes_away_after_exit(nsqd: NSQD, tools: Any) -> None:
    tail: Tool = await tools("nsq_tail", "--topic=eph", f"--nsqd-tcp-address={tcp(nsqd)}")
    stats = await eventually(
        lambda: topic_stats(nsqd, "eph"), lambda s: s is not None and len(s["channels"]) == 1
    )
    name = stats["channels"][0]["channel_name"]
    assert re.fullmatch(r"tail\d{6}#ephemeral", name)
    await publish(nsqd, "eph", b"\x00binary\xff")
    assert await tail.line() == b"\x00binary\xff\n"
    assert await tail.stop() == 0
    await eventually(lambda: topic_stats(nsqd, "eph"), lambda s: s["channels"] == [])
    # a second tail picks a channel of its own
    other: Tool = await tools("nsq_tail", "--topic=eph", f"--nsqd-tcp-address={tcp(nsqd)}")
    stats = await eventually(lambda: topic_stats(nsqd, "eph"), lambda s: len(s["channels"]) == 1)
    assert stats["channels"][0]["channel_name"] != name
    assert await other.stop() == 0


async def test_finds_nsqd_through_lookupd(nsqd_factory: NsqdFactory, lookupd: NSQLookupd) -> None:
    nsqd = await nsqd_factory(
        broadcast_address="127.0.0.1",
        nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_port}"],
    )
    await publish(nsqd, "found", b"via lookupd")
    lookup = f"http://127.0.0.1:{lookupd.http_port}/lookup?topic=found"

    async def producers() -> list[Any]:
        try:
            return list((await get_json(lookup))["producers"])
        except AssertionError:  # 404 until nsqd has registered the topic
            return []

    await eventually(producers, lambda p: len(p) == 1)
    result = await run_tool(
        "nsq_tail", "--topic=found", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
        "--n=1",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out == b"via lookupd\n"
    stats = await topic_stats(nsqd, "found")
    assert stats is not None and stats["message_count"] == 1


async def test_tails_a_dead_letter_topic(nsqd: NSQD) -> None:
    async with NsqdHTTPClient(http(nsqd)) as client:
        await client.create_channel("jobs", "worker")
        await client.set_channel_config("jobs", "worker", max_attempts=1)
    await publish(nsqd, "jobs", b"poison pill")
    conn = await RawV2.connect(nsqd.tcp_port)
    await conn.sub("jobs", "worker", rdy=1)
    msg = await conn.message()
    conn.cmd(f"REQ {msg.id.decode()} 0")  # its second delivery would exceed max_attempts
    # the letter is moved at the end of a loop iteration: poll for it
    await eventually(
        lambda: topic_stats(nsqd, "jobs.dead"), lambda s: s is not None and s["depth"] == 1
    )
    await conn.close()
    result = await run_tool(
        "nsq_tail", "--topic=jobs.dead", f"--nsqd-tcp-address={tcp(nsqd)}", "--n=1"
    )
    assert result.code == 0, result.err
    assert result.out == b"poison pill\n"
    stats = await channel_stats(nsqd, "jobs", "worker")
    assert stats is not None and stats["dead_letter_count"] == 1 and stats["depth"] == 0


async def check_fatal(message: str, *args: str) -> None:
    result = await run_tool("nsq_tail", *args)
    assert result.code == 1, result.err
    assert fatal_line(message).fullmatch(result.err), result.err
    assert result.out == b""


async def test_checks_in_nsqs_order() -> None:
    await asyncio.gather(
        check_fatal("--nsqd-tcp-address or --lookupd-http-address required"),
        check_fatal("--nsqd-tcp-address or --lookupd-http-address required", "--topic=t"),
        check_fatal(
            "use --nsqd-tcp-address or --lookupd-http-address not both",
            "--nsqd-tcp-address=127.0.0.1:1",
            "--lookupd-http-address=127.0.0.1:2",
        ),
        check_fatal("--topic required", "--nsqd-tcp-address=127.0.0.1:1"),
    )


async def test_invalid_topic_is_fatal(nsqd: NSQD) -> None:
    result = await run_tool("nsq_tail", "--topic=bad!", f"--nsqd-tcp-address={tcp(nsqd)}")
    assert result.code == 1
    assert "invalid topic name" in result.err.splitlines()[-1]


async def test_version_and_usage_errors() -> None:
    version = await run_tool("nsq_tail", "--version")
    assert (version.code, version.out) == (0, b"nsq_tail v1.3.0\n")
    bad_opt = await run_tool("nsq_tail", "--consumer-opt=max_in_flight,lots")
    assert bad_opt.code == 2
    assert bad_opt.err.startswith('invalid value "max_in_flight,lots" for flag -consumer-opt: ')
    assert "\nUsage of nsq_tail:\n" in bad_opt.err
    bad_n = await run_tool("nsq_tail", "--n=x")
    assert bad_n.code == 2
    assert bad_n.err.startswith('invalid value "x" for flag -n: parse error\n')

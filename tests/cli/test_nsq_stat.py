"""nsq_stat as a process: the channel's totals over every nsqd, rows, headers, rates, checks."""

from __future__ import annotations

import asyncio
import re
import signal
from typing import Any

from conftest import NsqdFactory
from v2client import RawV2

from cli.conftest import (
    Tool,
    eventually,
    fatal_line,
    get_json,
    http,
    publish,
    run_tool,
)
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqlookupd.app import NSQLookupd

HEADER = [
    b"------rate------+----------------depth----------------+"
    b"--------------metadata---------------\n",
    b"ingress  egress |   total     mem    disk inflt   def |"
    b"     req     t-o         msgs clients\n",
]
FIELDS = ["ingress", "egress", "total", "mem", "disk", "inflt", "def", "req", "t-o", "msgs"]
FIELDS.append("clients")
ROW = re.compile(
    rb"^([ -]{0,6}\d+) ([ -]{0,6}\d+) \| +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) \|"
    rb" +(\d+) +(\d+) +(\d+) +(\d+)\n$"
)


def parse_row(line: bytes) -> dict[str, int]:
    match = ROW.match(line)
    assert match, line
    # the exact widths: %7d %7d | %7d %7d %7d %5d %5d | %7d %7d %12d %7d
    assert [len(part) for part in line.rstrip(b"\n").split(b" | ")] == [15, 35, 36], line
    return dict(zip(FIELDS, (int(v) for v in match.groups()), strict=True))


async def make_channel(nsqd: NSQD, topic: str, channel: str) -> None:
    await publish(nsqd, topic, b"seed")  # creates the topic...
    conn = await RawV2.connect(nsqd.tcp_port)  # ...and a subscriber creates the channel
    await conn.sub(topic, channel)
    await conn.close()


async def test_rows_report_the_channel(nsqd: NSQD) -> None:
    await make_channel(nsqd, "t", "c")
    await publish(nsqd, "t", *(b"%d" % i for i in range(6)))
    result = await run_tool(
        "nsq_stat", "--topic=t", "--channel=c", f"--nsqd-http-address={http(nsqd)}",
        "--interval=50ms", "--count=2",
    )  # fmt: skip
    assert result.code == 0, result.err
    lines = result.out.splitlines(keepends=True)
    assert lines[:2] == HEADER
    assert len(lines) == 4  # --count rows after the baseline poll
    for line in lines[2:]:
        assert parse_row(line) == {
            "ingress": 0, "egress": 0, "total": 7, "mem": 7, "disk": 0, "inflt": 0, "def": 0,
            "req": 0, "t-o": 0, "msgs": 7, "clients": 0,
        }  # fmt: skip
    assert result.err == ""


async def test_ingress_and_egress_per_interval(nsqd: NSQD, tools: Any) -> None:
    await make_channel(nsqd, "flow", "c")
    stat: Tool = await tools(
        "nsq_stat", "--topic=flow", "--channel=c", f"--nsqd-http-address={http(nsqd)}",
        "--interval=2s", "--count=2",
    )  # fmt: skip
    assert await stat.lines(2) == HEADER  # the baseline poll is done: 2 s until the next
    await publish(nsqd, "flow", *(b"%d" % i for i in range(10)))
    first = parse_row(await stat.line())
    assert (first["ingress"], first["egress"], first["total"], first["msgs"]) == (5, 0, 11, 11)
    conn = await RawV2.connect(nsqd.tcp_port)  # take four out: egress without ingress
    await conn.sub("flow", "c", rdy=4)
    for _ in range(4):
        msg = await conn.message()
        conn.cmd(f"FIN {msg.id.decode()}")
    await conn.close()
    second = parse_row(await stat.line())
    assert (second["ingress"], second["egress"], second["total"]) == (0, 2, 7)
    assert await stat.wait() == 0


async def test_header_repeats_every_25_rows(nsqd: NSQD) -> None:
    await make_channel(nsqd, "h", "c")
    result = await run_tool(
        "nsq_stat", "--topic=h", "--channel=c", f"--nsqd-http-address={http(nsqd)}",
        "--interval=1ms", "--count=30",
    )  # fmt: skip
    assert result.code == 0, result.err
    lines = result.out.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if line == HEADER[0]]
    # header, rows 1-24, header, rows 25-30
    assert headers == [0, 26]
    assert lines[27] == HEADER[1]
    assert len(lines) == 2 + 24 + 2 + 6
    assert all(ROW.match(line) for i, line in enumerate(lines) if i not in (0, 1, 26, 27))


async def test_sums_over_the_nsqd_lookupd_knows(
    nsqd_factory: NsqdFactory, lookupd: NSQLookupd
) -> None:
    registered = {
        "broadcast_address": "127.0.0.1",
        "nsqlookupd_tcp_addresses": [f"127.0.0.1:{lookupd.tcp_port}"],
    }
    one, two = await nsqd_factory(**registered), await nsqd_factory(**registered)
    for nsqd, count in ((one, 2), (two, 3)):
        await make_channel(nsqd, "sum", "c")
        await publish(nsqd, "sum", *([b"x"] * count))
    lookup = f"http://127.0.0.1:{lookupd.http_port}/lookup?topic=sum"
    await eventually(lambda: get_json(lookup), lambda doc: len(doc["producers"]) == 2)
    result = await run_tool(
        "nsq_stat", "--topic=sum", "--channel=c",
        f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", "--interval=10ms", "--count=1",
    )  # fmt: skip
    assert result.code == 0, result.err
    row = parse_row(result.out.splitlines(keepends=True)[2])
    assert (row["total"], row["msgs"]) == (2 + 3 + 2, 2 + 3 + 2)  # seeds included


async def test_stops_cleanly_on_signals(nsqd: NSQD, tools: Any) -> None:
    await make_channel(nsqd, "s", "c")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        stat: Tool = await tools(
            "nsq_stat", "--topic=s", "--channel=c", f"--nsqd-http-address={http(nsqd)}"
        )
        assert await stat.lines(2) == HEADER
        assert await stat.stop(sig) == 0


async def test_missing_channel_or_topic_is_fatal(nsqd: NSQD) -> None:
    await make_channel(nsqd, "t", "c")
    base = ("--interval=10ms", "--count=1", f"--nsqd-http-address={http(nsqd)}")
    no_channel = await run_tool("nsq_stat", "--topic=t", "--channel=nope", *base)
    assert no_channel.code == 1
    assert no_channel.out == b""
    assert fatal_line(
        "ERROR: failed to find channel(nope) in stats metadata for topic(t)"
    ).fullmatch(no_channel.err)
    # no nsqd has the topic: nothing to ask for stats, which NSQ reports as a failure
    no_topic = await run_tool("nsq_stat", "--topic=none", "--channel=c", *base)
    assert no_topic.code == 1
    assert fatal_line("ERROR: failed to get nsqd stats - failed to query any nsqd: ").fullmatch(
        no_topic.err
    )


async def test_unreachable_lookupd_is_fatal() -> None:
    result = await run_tool(
        "nsq_stat", "--topic=t", "--channel=c", "--lookupd-http-address=127.0.0.1:1"
    )
    assert result.code == 1
    assert result.err.startswith("20")
    assert "ERROR: failed to get topic producers - failed to query any nsqlookupd: " in result.err


async def check_fatal(message: str, *args: str) -> None:
    result = await run_tool("nsq_stat", *args)
    assert result.code == 1, result.err
    assert fatal_line(message).fullmatch(result.err), result.err


async def test_checks_in_nsqs_order() -> None:
    tc = ("--topic=t", "--channel=c")
    await asyncio.gather(
        check_fatal("--topic and --channel are required"),
        check_fatal("--topic and --channel are required", "--topic=t"),
        check_fatal("--interval should be positive", *tc, "--interval=0s"),
        check_fatal(
            "--http-client-connect-timeout should be positive",
            *tc,
            "--http-client-connect-timeout=-1s",
        ),
        check_fatal(
            "--http-client-request-timeout should be positive",
            *tc,
            "--http-client-request-timeout=0",
        ),
        check_fatal("--count should be positive", *tc, "--count=0"),
        check_fatal("--nsqd-http-address or --lookupd-http-address required", *tc),
        check_fatal(
            "use --nsqd-http-address or --lookupd-http-address not both",
            *tc,
            "--nsqd-http-address=a:1",
            "--lookupd-http-address=b:2",
        ),
        check_fatal(
            "--nsqd-http-address error - address should not contain scheme",
            *tc,
            "--nsqd-http-address=http://a:1",
        ),
        check_fatal(
            "--lookupd-http-address error - address should not contain scheme",
            *tc,
            "--lookupd-http-address=https://a:1",
        ),
    )


async def test_version_and_usage_errors() -> None:
    version = await run_tool("nsq_stat", "--version")
    assert (version.code, version.out) == (0, b"nsq_stat v1.3.0\n")
    bad_count = await run_tool("nsq_stat", "--count=x")
    assert bad_count.code == 2
    assert bad_count.err.startswith(
        'invalid value "x" for flag -count: strconv.ParseInt: parsing "x": invalid syntax\n'
        "Usage of nsq_stat:\n"
    )
    too_big = await run_tool("nsq_stat", "--count=2147483648")
    assert too_big.code == 2
    assert "value out of range" in too_big.err.splitlines()[0]

"""to_nsq as a process: stdin split into messages, fanned out to every nsqd, paced, checked."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
from typing import Any

from conftest import NsqdFactory

from cli.conftest import (
    GO_LOG_PREFIX,
    eventually,
    fatal_line,
    receive,
    run_tool,
    tcp,
    topic_stats,
)
from nsqpy.nsqd.app import NSQD


async def message_count(nsqd: NSQD, topic: str) -> int:
    stats = await topic_stats(nsqd, topic)
    return 0 if stats is None else int(stats["message_count"])


async def test_each_record_goes_to_every_address_in_order(nsqd_factory: NsqdFactory) -> None:
    one, two = await nsqd_factory(), await nsqd_factory()
    lines = [f"line {i}".encode() for i in range(300)]
    stdin = b"\n".join(lines[:150]) + b"\n\n\n" + b"\n".join(lines[150:])  # no final newline
    result = await run_tool(
        "to_nsq", "--topic=lines", f"--nsqd-tcp-address={tcp(one)}",
        "-nsqd-tcp-address", tcp(two), f"--nsqd-tcp-address={tcp(two)}",  # duplicate: one copy
        stdin=stdin,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out == b""
    for nsqd in (one, two):
        assert await message_count(nsqd, "lines") == 300
        assert [m.body for m in await receive(nsqd, "lines", 300)] == lines


async def test_delimiter(nsqd: NSQD) -> None:
    result = await run_tool(
        "to_nsq", "--topic=csv", "--delimiter=,", f"--nsqd-tcp-address={tcp(nsqd)}",
        stdin=b"a,b b,,c\nd,",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert [m.body for m in await receive(nsqd, "csv", 3)] == [b"a", b"b b", b"c\nd"]
    assert await message_count(nsqd, "csv") == 3


async def test_rate_spreads_messages_over_time(nsqd: NSQD) -> None:
    result = await run_tool(
        "to_nsq", "--topic=slow", "--rate=20", f"--nsqd-tcp-address={tcp(nsqd)}",
        stdin=b"".join(b"%d\n" % i for i in range(21)),
    )  # fmt: skip
    assert result.code == 0, result.err
    assert re.search(r"Throttling messages rate to max:20/second", result.err)
    messages = await receive(nsqd, "slow", 21)
    # nsqd stamps each message on arrival: the first is free, then one per 50 ms
    span = (messages[-1].timestamp - messages[0].timestamp) / 1e9
    assert span >= 0.9, span
    assert [m.body for m in messages] == [b"%d" % i for i in range(21)]


async def test_unthrottled_by_default(nsqd: NSQD) -> None:
    result = await run_tool(
        "to_nsq", "--topic=fast", f"--nsqd-tcp-address={tcp(nsqd)}",
        stdin=b"".join(b"%d\n" % i for i in range(200)),
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "Throttling" not in result.err
    messages = await receive(nsqd, "fast", 200)
    assert (messages[-1].timestamp - messages[0].timestamp) / 1e9 < 0.9


async def test_producer_opts_reach_the_connection(nsqd: NSQD) -> None:
    result = await run_tool(
        "to_nsq", "--topic=opts", f"--nsqd-tcp-address={tcp(nsqd)}",
        "--producer-opt=snappy", "--producer-opt=user_agent,ignored",
        stdin=b"hello\n",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert [m.body for m in await receive(nsqd, "opts", 1)] == [b"hello"]


async def test_sigterm_while_reading_stdin_exits_cleanly(nsqd: NSQD) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nsqpy.cli.to_nsq", "--topic=live", f"--nsqd-tcp-address={tcp(nsqd)}",
        stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(b"first\n")
    await proc.stdin.drain()
    # published means running in the loop with its signal handlers in place
    await eventually(lambda: message_count(nsqd, "live"), lambda n: n == 1)
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        code = await proc.wait()
    assert code == 0, await proc.stderr.read()
    assert await message_count(nsqd, "live") == 1
    proc.stdin.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_failed_publish_is_fatal(nsqd: NSQD) -> None:
    refused = await run_tool(
        "to_nsq", "--topic=t", f"--nsqd-tcp-address=127.0.0.1:{free_port()}", stdin=b"x\n"
    )
    assert refused.code == 1
    # the last line is the fatal one, naming the cause
    assert re.search(r"(^|\n)" + GO_LOG_PREFIX + r".*[Rr]efused\n\Z", refused.err), refused.err
    bad_topic = await run_tool(
        "to_nsq", "--topic=bad!", f"--nsqd-tcp-address={tcp(nsqd)}", stdin=b"x\n"
    )
    assert bad_topic.code == 1
    assert "E_BAD_TOPIC" in bad_topic.err


async def check_fatal(message: str, *args: str, code: int = 1) -> Any:
    result = await run_tool("to_nsq", *args, stdin=b"never read\n")
    assert result.code == code, result.err
    assert fatal_line(message).fullmatch(result.err), result.err
    assert result.out == b""


async def test_checks_in_nsqs_order() -> None:
    await asyncio.gather(
        check_fatal("--topic required"),
        check_fatal("--topic required", "--nsqd-tcp-address=127.0.0.1:1"),
        check_fatal("--delimiter must be a single byte", "--topic=t", "--delimiter=ab"),
        check_fatal("--delimiter must be a single byte", "--topic=t", "--delimiter=é"),
        check_fatal("--delimiter must be a single byte", "--topic=t", "--delimiter="),
        check_fatal("--nsqd-tcp-address required", "--topic=t"),
    )


async def test_usage_errors_exit_2() -> None:
    bad_opt = await run_tool("to_nsq", "--topic=t", "--producer-opt=nope,1")
    assert bad_opt.code == 2
    assert bad_opt.err.startswith(
        'invalid value "nope,1" for flag -producer-opt: invalid option nope\nUsage of to_nsq:\n'
    )
    # to_nsq, unlike the other utilities, has no --version
    no_version = await run_tool("to_nsq", "--version")
    assert no_version.code == 2
    assert no_version.err.startswith("flag provided but not defined: -version\n")
    bad_rate = await run_tool("to_nsq", "--rate=fast")
    assert bad_rate.code == 2
    assert bad_rate.err.startswith('invalid value "fast" for flag -rate: parse error\n')
    help_ = await run_tool("to_nsq", "-h")
    assert help_.code == 0
    assert '  -delimiter string\n    \tcharacter to split input from stdin (default "\\n")\n' in (
        help_.err
    )

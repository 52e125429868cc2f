"""nsq_to_nsq as a process: messages relayed to destination nsqd, JSON filters, modes."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

from conftest import NsqdFactory

from cli.conftest import (
    GO_LOG_PREFIX,
    Tool,
    channel_stats,
    eventually,
    fatal_line,
    publish,
    receive,
    run_tool,
    tcp,
    topic_stats,
)
from nsqpy.nsqd.app import NSQD

STATUS = re.compile(
    GO_LOG_PREFIX + r"(\[\S+\]:) finished (\d+) - 99th: \d+\.\d\dms - 95th: \d+\.\d\dms"
    r" - avg: \d+\.\d\dms$",
    re.MULTILINE,
)


async def count(nsqd: NSQD, topic: str) -> int:
    stats = await topic_stats(nsqd, topic)
    return 0 if stats is None else int(stats["message_count"])


async def drained(nsqd: NSQD, topic: str, channel: str) -> dict[str, Any]:
    """Wait until the source channel has every message answered; its stats."""
    return await eventually(
        lambda: channel_stats(nsqd, topic, channel),
        lambda s: s is not None and s["depth"] == 0 and s["in_flight_count"] == 0,
    )


async def test_relays_every_message_and_finishes_it(nsqd_factory: NsqdFactory, tools: Any) -> None:
    source, dest = await nsqd_factory(), await nsqd_factory()
    relay: Tool = await tools(
        "nsq_to_nsq", "--topic=src", f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(dest)}", "--destination-topic=dst",
        "--status-every=100",
    )  # fmt: skip
    await eventually(lambda: channel_stats(source, "src", "nsq_to_nsq"), lambda s: s is not None)
    bodies = [b"message %d" % i for i in range(201)]
    await publish(source, "src", *bodies)
    await eventually(lambda: count(dest, "dst"), lambda n: n == 201)
    stats = await drained(source, "src", "nsq_to_nsq")
    assert (stats["message_count"], stats["requeue_count"]) == (201, 0)
    assert sorted(m.body for m in await receive(dest, "dst", 201)) == sorted(bodies)
    assert await count(source, "dst") == 0
    # with one destination only the aggregate reports, on the 101st and 201st publish
    await relay.stderr_contains("[aggregate]: finished 100")
    assert await relay.stop(signal.SIGINT) == 0
    assert [m.group(1) for m in STATUS.finditer(relay.stderr)] == ["[aggregate]:"] * 2
    assert "Warning" not in relay.stderr


async def test_json_filters(nsqd_factory: NsqdFactory, tools: Any) -> None:
    source, dest = await nsqd_factory(), await nsqd_factory()
    relay: Tool = await tools(
        "nsq_to_nsq", "--topic=events", f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(dest)}",
        "--require-json-field=kind", "--require-json-value=keep",
        "--whitelist-json-field=b", "--whitelist-json-field=a",
        # a requeued message comes back at once rather than after the default 90 s
        "--consumer-opt=default_requeue_delay,10ms", "--consumer-opt=max_attempts,3",
    )  # fmt: skip
    await eventually(lambda: channel_stats(source, "events", "nsq_to_nsq"), lambda s: s is not None)
    await publish(
        source, "events",
        b'{"kind": "keep", "a": 1.0, "b": "<x>", "c": 3}',
        b'{"kind": "drop", "a": 2}',
        b"not json",
        b'{"kind": "keep", "a": 4.5}',
    )  # fmt: skip
    await eventually(lambda: count(dest, "events"), lambda n: n == 2)
    got = [m.body for m in await receive(dest, "events", 2)]
    assert sorted(got) == [b'{"a":1,"b":"\\u003cx\\u003e"}', b'{"a":4.5}']
    # the missing required field: requeued with backoff until nsqd's attempts run out
    await publish(source, "events", b'{"a": 5}')
    await relay.stderr_contains("ERROR: missing field to check required value")
    stats = await eventually(
        lambda: channel_stats(source, "events", "nsq_to_nsq"), lambda s: s["requeue_count"] >= 1
    )
    assert stats["message_count"] == 5
    assert re.search(GO_LOG_PREFIX + "ERROR: Unable to decode json: not json\n", relay.stderr)
    assert await count(dest, "events") == 2
    assert await relay.stop() == 0


async def test_numeric_required_value(nsqd_factory: NsqdFactory, tools: Any) -> None:
    source, dest = await nsqd_factory(), await nsqd_factory()
    relay: Tool = await tools(
        "nsq_to_nsq", "--topic=n", f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(dest)}",
        "--require-json-field=v", "--require-json-value=5",
    )  # fmt: skip
    await eventually(lambda: channel_stats(source, "n", "nsq_to_nsq"), lambda s: s is not None)
    await publish(source, "n", b'{"v": 5}', b'{"v": 5.0, "w": 1}', b'{"v": "5"}', b'{"v": 6}')
    await drained(source, "n", "nsq_to_nsq")
    assert await count(dest, "n") == 3
    # no whitelist: passing bodies are relayed byte for byte
    got = sorted(m.body for m in await receive(dest, "n", 3))
    assert got == [b'{"v": "5"}', b'{"v": 5.0, "w": 1}', b'{"v": 5}']
    assert await relay.stop() == 0


async def test_round_robin_across_destinations_with_per_address_status(
    nsqd_factory: NsqdFactory, tools: Any
) -> None:
    source, one, two = await nsqd_factory(), await nsqd_factory(), await nsqd_factory()
    relay: Tool = await tools(
        "nsq_to_nsq", "--topic=rr", f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(one)}",
        f"--destination-nsqd-tcp-address={tcp(two)}",
        "--mode=round-robin", "--status-every=2",
    )  # fmt: skip
    await eventually(lambda: channel_stats(source, "rr", "nsq_to_nsq"), lambda s: s is not None)
    await publish(source, "rr", *(json.dumps({"i": i}).encode() for i in range(10)))
    await drained(source, "rr", "nsq_to_nsq")
    assert (await count(one, "rr"), await count(two, "rr")) == (5, 5)
    assert await relay.stop() == 0
    warnings = re.findall(
        r"Warning: use more than 100 status values .*\(configured with 2\)", relay.stderr
    )
    assert len(warnings) == 3  # each destination and the aggregate
    prefixes = {m.group(1) for m in STATUS.finditer(relay.stderr)}
    assert prefixes == {f"[{tcp(one)}]:", f"[{tcp(two)}]:", "[aggregate]:"}


async def test_hostpool_mode_delivers_everything(nsqd_factory: NsqdFactory, tools: Any) -> None:
    source, one, two = await nsqd_factory(), await nsqd_factory(), await nsqd_factory()
    relay: Tool = await tools(
        "nsq_to_nsq", "--topic=hp", f"--nsqd-tcp-address={tcp(source)}",
        f"--destination-nsqd-tcp-address={tcp(one)}",
        f"--destination-nsqd-tcp-address={tcp(two)}",
    )  # fmt: skip
    await eventually(lambda: channel_stats(source, "hp", "nsq_to_nsq"), lambda s: s is not None)
    await publish(source, "hp", *(b"%d" % i for i in range(20)))
    await drained(source, "hp", "nsq_to_nsq")
    one_count, two_count = await count(one, "hp"), await count(two, "hp")
    assert one_count + two_count == 20
    assert one_count == two_count == 10  # healthy hosts take turns
    assert await relay.stop() == 0


async def check_fatal(message: str, *args: str) -> None:
    result = await run_tool("nsq_to_nsq", *args)
    assert result.code == 1, result.err
    assert fatal_line(message).fullmatch(result.err), result.err


async def test_checks_in_nsqs_order() -> None:
    src = "--nsqd-tcp-address=127.0.0.1:1"
    await asyncio.gather(
        check_fatal("--topic and --channel are required"),
        check_fatal("--topic and --channel are required", "--topic=t", "--channel="),
        check_fatal("--topic is invalid", "--topic=t", "--topic=bad!"),
        check_fatal("--destination-topic is invalid", "--topic=t", "--destination-topic=a b"),
        check_fatal("--channel is invalid", "--topic=t", "--channel=" + "c" * 65),
        check_fatal("--nsqd-tcp-address or --lookupd-http-address required", "--topic=t"),
        check_fatal(
            "use --nsqd-tcp-address or --lookupd-http-address not both",
            "--topic=t",
            src,
            "--lookupd-http-address=127.0.0.1:3",
        ),
        check_fatal("--destination-nsqd-tcp-address required", "--topic=t", src),
    )
    ok_names = await run_tool("nsq_to_nsq", "--topic=t#ephemeral", "--channel=c#ephemeral", src)
    # ephemeral names are valid: the check that fails is the next one
    assert fatal_line("--destination-nsqd-tcp-address required").fullmatch(ok_names.err)


async def test_version_and_usage_errors() -> None:
    version = await run_tool("nsq_to_nsq", "--version")
    assert (version.code, version.out) == (0, b"nsq_to_nsq v1.3.0\n")
    bad_opt = await run_tool("nsq_to_nsq", "--producer-opt=nope")
    assert bad_opt.code == 2
    assert bad_opt.err.startswith(
        'invalid value "nope" for flag -producer-opt: invalid option nope\nUsage of nsq_to_nsq:\n'
    )

"""nsq_to_file as a process against real nsqd (and nsqlookupd): files, gzip, FIN after fsync,
rotation, the work dir, topic discovery, signals and NSQ's checks."""

from __future__ import annotations

import gzip
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import NsqdFactory

from cli.conftest import (
    channel_stats,
    eventually,
    fatal_line,
    publish,
    run_tool,
    tcp,
)
from nsqpy.nsqd.app import NSQD
from nsqpy.nsqlookupd.app import NSQLookupd

Start = Callable[..., Any]
CHANNEL = "nsq_to_file"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The output dir (tmp_path also holds nsqd's data)."""
    return tmp_path / "out"


def args(nsqd: NSQD, out: Path, *extra: str) -> list[str]:
    return [
        f"--nsqd-tcp-address={tcp(nsqd)}",
        f"--output-dir={out}",
        "--filename-format=<TOPIC><REV>.log",  # no <DATETIME>: an hour change mid-test is fine
        *extra,
    ]


async def settled(nsqd: NSQD, topic: str, count: int) -> dict[str, Any]:
    """Wait until all ``count`` messages were delivered and FINished on the channel."""
    return await eventually(
        lambda: channel_stats(nsqd, topic, CHANNEL),
        lambda s: (
            s is not None
            and s["message_count"] == count
            and s["depth"] == 0
            and s["in_flight_count"] == 0
        ),
    )


def paths(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.exists() else []


def names(directory: Path) -> list[str]:
    return [p.name for p in paths(directory)]


def lines_of(*paths: Path) -> list[bytes]:
    out: list[bytes] = []
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)  # all concatenated members
        out.extend(data.split(b"\n")[:-1])
    return out


async def test_gzip_output_is_exactly_the_bodies_and_sigterm_is_clean(
    nsqd: NSQD, out: Path, tools: Start
) -> None:
    bodies = [b"first", b"with spaces  and\ttabs", b"\xff\x00binary", b'{"json": true}']
    bodies += [b"message %d" % i for i in range(200)]
    await publish(nsqd, "logs", *bodies[:100])
    tool = await tools(
        "nsq_to_file",
        *args(nsqd, out, "--topic=logs", "--gzip", "--gzip-level=9", "--sync-interval=50ms"),
    )
    await settled(nsqd, "logs", 100)
    await publish(nsqd, "logs", *bodies[100:])
    await settled(nsqd, "logs", len(bodies))
    # Everything FINished is already complete gzip on disk, before any close.
    path = out / "logs-000000.log.gz"
    assert lines_of(path) == bodies
    assert await tool.stop(signal.SIGTERM) == 0, tool.stderr
    assert lines_of(path) == bodies
    assert names(out) == ["logs-000000.log.gz"]
    assert f"[{CHANNEL}] " in tool.stderr
    assert "INFO: [logs/nsq_to_file] opening " + str(path) in tool.stderr
    assert "INFO: [logs/nsq_to_file] syncing " in tool.stderr


async def test_fin_only_after_fsync_and_sighup_reopens(nsqd: NSQD, out: Path, tools: Start) -> None:
    # A sync only on the interval (an hour) or on signals; 100 in flight is far from starving.
    tool = await tools(
        "nsq_to_file",
        *args(nsqd, out, "--topic=t", "--gzip", "--sync-interval=1h", "--max-in-flight=100"),
    )
    await publish(nsqd, "t", b"opener")
    await settled(nsqd, "t", 1)  # opening a file syncs at once
    await publish(nsqd, "t", b"one", b"two", b"three")
    stats = await eventually(
        lambda: channel_stats(nsqd, "t", CHANNEL), lambda s: s["in_flight_count"] == 3
    )
    assert stats["depth"] == 0  # delivered, written, but not FINished: not fsynced yet
    tool.proc.send_signal(signal.SIGHUP)
    await settled(nsqd, "t", 4)
    await tool.stderr_contains("syncing 3 records to disk")
    first = out / "t-000000.log.gz"
    assert lines_of(first) == [b"opener", b"one", b"two", b"three"]
    # SIGHUP closed the file; the next message opens the next revision (gzip never appends).
    await publish(nsqd, "t", b"after hup")
    await settled(nsqd, "t", 5)
    assert await tool.stop() == 0
    assert lines_of(out / "t-000001.log.gz") == [b"after hup"]
    assert lines_of(first) == [b"opener", b"one", b"two", b"three"]


async def test_rotate_size(nsqd: NSQD, out: Path, tools: Start) -> None:
    bodies = [b"msg-%04d" % i for i in range(7)]  # 9 bytes a line
    await publish(nsqd, "sized", *bodies)
    tool = await tools(
        "nsq_to_file", *args(nsqd, out, "--topic=sized", "--rotate-size=20", "--sync-interval=50ms")
    )
    await settled(nsqd, "sized", 7)
    assert await tool.stop() == 0, tool.stderr
    # A file rotates once it is over 20 bytes: 3 lines (27 bytes) each.
    files = [out / f"sized-00000{i}.log" for i in range(3)]
    assert paths(out) == files
    assert [lines_of(f) for f in files] == [bodies[:3], bodies[3:6], bodies[6:]]
    assert "currently 27 bytes (> 20), rotating..." in tool.stderr


async def test_rotate_interval(nsqd: NSQD, out: Path, tools: Start) -> None:
    # Queued before start, so it is the first thing written: into the first file.
    await publish(nsqd, "timed", b"early")
    tool = await tools(
        "nsq_to_file",
        *args(nsqd, out, "--topic=timed", "--rotate-interval=100ms", "--sync-interval=20ms"),
    )
    await settled(nsqd, "timed", 1)
    # Without --skip-empty-files the sync ticks open a new (possibly empty) file per interval.
    await eventually(lambda: _ready(len(names(out))), lambda n: n >= 3)
    await publish(nsqd, "timed", b"late")
    await settled(nsqd, "timed", 2)
    assert await tool.stop() == 0
    files = paths(out)
    assert lines_of(files[0]) == [b"early"]
    assert lines_of(*files[1:]) == [b"late"]
    assert "since last open, rotating..." in tool.stderr


async def _ready(value: Any) -> Any:
    return value


async def test_work_dir_files_move_to_output_dir_when_finished(
    nsqd: NSQD, tmp_path: Path, tools: Start
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    (out / "w-000000.log").write_bytes(b"from an earlier run\n")
    tool = await tools(
        "nsq_to_file", *args(nsqd, out, "--topic=w", f"--work-dir={work}", "--sync-interval=50ms")
    )
    await publish(nsqd, "w", b"a", b"b")
    await settled(nsqd, "w", 2)
    # In progress: the file lives in the work dir, at a revision free in the output dir.
    assert names(work) == ["w-000001.log"]
    assert lines_of(work / "w-000001.log") == [b"a", b"b"]
    assert await tool.stop() == 0
    assert names(work) == []
    assert lines_of(out / "w-000001.log") == [b"a", b"b"]
    assert lines_of(out / "w-000000.log") == [b"from an earlier run"]
    assert f"moving finished file {work}/w-000001.log to {out}/w-000001.log" in tool.stderr


async def test_default_filename_and_host_identifier(nsqd: NSQD, out: Path, tools: Start) -> None:
    tool = await tools(
        "nsq_to_file", f"--nsqd-tcp-address={tcp(nsqd)}", f"--output-dir={out}",
        "--topic=named", "--host-identifier=box-<SHORT_HOST>", "--datetime-format=%Y",
        "--sync-interval=50ms",
    )  # fmt: skip
    await publish(nsqd, "named", b"x")
    await settled(nsqd, "named", 1)
    assert await tool.stop() == 0
    [path] = paths(out)
    # <TOPIC>.<HOST><REV>.<DATETIME>.log with <REV> dropped (no gzip, rotation or work dir)
    topic, host, year, ext = path.name.split(".")
    assert (topic, ext) == ("named", "log")
    assert host.startswith("box-") and len(host) > 4
    assert year.isdigit() and len(year) == 4


async def test_topics_from_lookupd_filtered_by_pattern(
    nsqd_factory: NsqdFactory, lookupd: NSQLookupd, out: Path, tools: Start
) -> None:
    nsqd = await nsqd_factory(
        nsqlookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp_port}"], broadcast_address="127.0.0.1"
    )
    for topic in ("app_one", "app_two", "web"):
        await publish(nsqd, topic, topic.encode())
    tool = await tools(
        "nsq_to_file", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
        f"--output-dir={out}", "--filename-format=<TOPIC><REV>.log",
        "--topic-pattern=^app_", "--topic-refresh=50ms", "--sync-interval=50ms",
    )  # fmt: skip
    await settled(nsqd, "app_one", 1)
    await settled(nsqd, "app_two", 1)
    await tool.stderr_contains("skipping topic web (doesn't match pattern ^app_)")
    assert await tool.stop() == 0
    assert names(out) == ["app_one.log", "app_two.log"]
    assert lines_of(out / "app_two.log") == [b"app_two"]
    assert await channel_stats(nsqd, "web", CHANNEL) is None


async def check_fatal(message: str, *argv: str) -> None:
    result = await run_tool("nsq_to_file", *argv)
    assert result.code == 1, result.err
    assert fatal_line(message).fullmatch(result.err), result.err


async def test_checks_in_nsqs_order(tmp_path: Path) -> None:
    nsqd = "--nsqd-tcp-address=127.0.0.1:1"
    lookupd = "--lookupd-http-address=127.0.0.1:2"
    rev = "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
    checks = [
        ("--channel is required", ["--channel=", nsqd]),
        ("--http-client-connect-timeout should be positive", ["--http-client-connect-timeout=0"]),
        ("--nsqd-tcp-address or --lookupd-http-address required.", ["--topic=t"]),
        ("use --nsqd-tcp-address or --lookupd-http-address not both", [nsqd, lookupd]),
        ("invalid --gzip-level value (10), should be 1-9", [nsqd, "--gzip-level=10"]),
        ("invalid --gzip-level value (0), should be 1-9", [nsqd, "--gzip-level=0"]),
        ("--topic or --topic-pattern required", [nsqd]),
        (
            "--lookupd-http-address must be specified when no --topic specified",
            [nsqd, "--topic-pattern=."],
        ),
        ("unknown arguments: [extra words]", [nsqd, "--topic=t", "extra", "words"]),
        ("--log-level is invalid", ["--log-level=loud"]),
    ]
    checks += [
        (rev, [nsqd, "--topic=t", "--filename-format=<TOPIC>.log", flag])
        for flag in ("--gzip", "--rotate-size=1", "--rotate-interval=1m", f"--work-dir={tmp_path}")
    ]
    for message, argv in checks:
        await check_fatal(message, *argv)


async def test_version_help_and_usage_errors() -> None:
    version = await run_tool("nsq_to_file", "--version")
    assert (version.code, version.out) == (0, b"nsq_to_file v1.3.0\n")
    help_ = await run_tool("nsq_to_file", "-h")
    assert help_.code == 0
    assert help_.err.startswith("Usage of nsqd:\n")  # sic: NSQ's flag set is named "nsqd"
    assert (
        "  -rotate-size rotate-size\n    \trotate the file when it grows bigger than "
        "rotate-size bytes\n"
    ) in help_.err
    assert "  -filename-format string\n    \toutput filename format (<TOPIC>, <HOST>, <PID>, " in (
        help_.err
    )
    bad = await run_tool("nsq_to_file", "--sync-interval=soon")
    assert bad.code == 2
    assert bad.err.startswith('invalid value "soon" for flag -sync-interval: parse error\n')

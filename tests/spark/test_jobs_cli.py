"""The job commands as processes: --help and usage errors (both exit before Spark starts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark")  # the jobs import it at module level

pytestmark = pytest.mark.timeout(120)

COMMANDS = {
    "nsqpy-archive": "nsqpy_archive",
    "nsqpy-replay": "nsqpy_replay",
    "nsqpy-report": "nsqpy_report",
}
ARCHIVE = ["--topic", "t", "--output", "o", "--checkpoint", "c"]
REPLAY = ["--input", "a", "--destination-topic", "t", "--nsqd-tcp-address", "127.0.0.1:4150"]


def run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    module = f"nsqpy.cli.{COMMANDS[command]}"
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        ("nsqpy-archive", ["--available-now", "--trigger", "--checkpoint", "--master"]),
        ("nsqpy-replay", ["--rate", "--from", "--to", "--destination-topic", "--master"]),
        ("nsqpy-report", ["--chart", "--input", "--topic", "--master"]),
    ],
)
def test_help(command: str, mentions: list[str]) -> None:
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {command} ")
    for option in mentions:
        assert option in done.stdout
    assert "local[*]" in done.stdout


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("nsqpy-archive", ["--topic", "t"], "the following arguments are required: --output"),
        ("nsqpy-archive", [*ARCHIVE, "--trigger", "10"], 'missing unit in duration "10"'),
        ("nsqpy-archive", [*ARCHIVE, "--trigger", "1s", "--available-now"], "not allowed with"),
        ("nsqpy-archive", ARCHIVE, "give --nsqd-tcp-address or --lookupd-http-address"),
        (
            "nsqpy-archive",
            [*ARCHIVE, "--nsqd-tcp-address", "h:1", "--lookupd-http-address", "h:2"],
            "(one of them)",
        ),
        ("nsqpy-archive", [*ARCHIVE, "--compression", "brotli"], "invalid choice: 'brotli'"),
        ("nsqpy-archive", [*ARCHIVE, "--source-option", "x"], "wants KEY=VALUE"),
        ("nsqpy-archive", [*ARCHIVE, "--max-in-flight", "0"], "must be at least 1"),
        ("nsqpy-replay", [*REPLAY, "--rate", "0"], "must be a positive number"),
        ("nsqpy-replay", [*REPLAY, "--from", "yesterday"], "expected ISO 8601"),
        ("nsqpy-replay", [*REPLAY, "--from=-1d"], "invalid relative time '-1d'"),
        ("nsqpy-replay", [*REPLAY, "--from", "now-1h", "--to=-2h"], "empty time range"),
        ("nsqpy-report", ["--input", "a", "--to", "now-1x"], "invalid relative time 'now-1x'"),
        ("nsqpy-replay", [*REPLAY, "--from", "2026-11-22T04:00", "--to", "2026-11-22T03:00"],
         "empty time range"),
        ("nsqpy-replay", [*REPLAY, "--topic", "no spaces"], "invalid topic name 'no spaces'"),
        ("nsqpy-replay", ["--input", "a", "--destination-topic", "t"],
         "required: --nsqd-tcp-address"),
        ("nsqpy-report", [], "the following arguments are required: --input"),
    ],
)  # fmt: skip
def test_bad_options_are_usage_errors(command: str, args: list[str], message: str) -> None:
    done = run(command, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert f"usage: {command}" in done.stderr
    assert "Traceback" not in done.stderr

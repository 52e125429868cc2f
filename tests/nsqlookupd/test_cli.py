"""The nsqlookupd command as a process: --version, flags, --config, start-up lines, signals,
exit codes, and the option parsing behind them."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from daemon_process import Started, start_process, stop_process

from nsqpy.nsqlookupd.options import (
    NsqlookupdOptions,
    nsqlookupd_flag_set,
    parse_nsqlookupd_args,
)

from .conftest import SECOND, V1Client

NSQLOOKUPD = [sys.executable, "-m", "nsqpy.nsqlookupd"]
LOG_LINE = re.compile(rb"^\[nsqlookupd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (INFO|FATAL): ")


async def start(*args: str) -> Started:
    return await start_process(
        NSQLOOKUPD, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *args
    )


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> int:
    return await stop_process(proc, sig)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NSQLOOKUPD, *args], capture_output=True, text=True, timeout=30, check=False
    )


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"nsqlookupd v1\.3\.0 \(built w/nsqpy-[\w.+-]+\)\n", result.stdout)


def test_usage_errors() -> None:
    result = run("--nope")
    assert result.returncode == 2
    assert result.stderr.startswith("flag provided but not defined: -nope\nUsage of nsqlookupd:\n")
    result = run("-h")
    assert result.returncode == 0
    assert "  -tombstone-lifetime duration" in result.stderr
    assert "(default 45s)" in result.stderr
    result = run("--inactive-producer-timeout=soon")
    assert result.returncode == 2
    assert 'invalid value "soon" for flag -inactive-producer-timeout' in result.stderr


def test_bad_config_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('log_level = "loud"\n')
    result = run(f"--config={config}")
    assert result.returncode == 1
    assert re.match(r"\[nsqlookupd\] \S+ \S+ FATAL: failed parsing log_level loud\n", result.stderr)
    result = run(f"--config={tmp_path / 'missing.toml'}")
    assert result.returncode == 1
    assert "FATAL: failed to load config file" in result.stderr


def test_listen_failure_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(f"--tcp-address=127.0.0.1:{port}", "--http-address=127.0.0.1:0")
    assert result.returncode == 1
    assert (
        f"FATAL: failed to instantiate nsqlookupd%!(EXTRA *errors.errorString=listen "
        f"(127.0.0.1:{port}) failed - " in result.stderr
    )


async def test_flags_config_and_clean_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "nsqlookupd.toml"
    config.write_text(
        'broadcast_address = "from-config"\ntombstone_lifetime = "7s"\nlog_prefix = "[lk] "\n'
    )
    proc, ports, lines = await start(f"--config={config}", "--log-prefix=[nsqlookupd] ")
    try:
        assert all(LOG_LINE.match(line) for line in lines), lines
        assert b"nsqlookupd v1.3.0 (built w/nsqpy-" in lines[0]
        client = await V1Client.connect(ports["TCP"])
        reply = await client.identify()
        assert reply["broadcast_address"] == "from-config"
        assert (reply["tcp_port"], reply["http_port"]) == (ports["TCP"], ports["HTTP"])
        assert await client.command(b"REGISTER t\n") == b"OK"
        url = f"http://127.0.0.1:{ports['HTTP']}/lookup?topic=t"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            doc = json.loads(await resp.read())
        assert [p["broadcast_address"] for p in doc["producers"]] == ["nsqd.test"]
        await client.close()
    finally:
        code = await stop(proc)
    assert code == 0


async def test_sigint_stops_too() -> None:
    proc, _, _ = await start()
    assert await stop(proc, signal.SIGINT) == 0


def test_option_resolution(tmp_path: Path) -> None:
    defaults = NsqlookupdOptions()
    assert defaults.tcp_address == "0.0.0.0:4160"
    assert defaults.http_address == "0.0.0.0:4161"
    assert defaults.broadcast_address == socket.gethostname()
    assert defaults.inactive_producer_timeout == 300 * SECOND
    assert defaults.tombstone_lifetime == 45 * SECOND
    config = tmp_path / "c.toml"
    config.write_text(
        "inactive_producer_timeout = 1500\n"  # a TOML integer duration is milliseconds
        'tombstone_lifetime = "1m"\nlog_level = "WARN"\ntcp_address = "127.0.0.1:1"\n'
    )
    opts = parse_nsqlookupd_args([f"-config={config}", "-tcp-address", "127.0.0.1:2", "--verbose"])
    assert opts.inactive_producer_timeout == 1500 * 1_000_000
    assert opts.tombstone_lifetime == 60 * SECOND
    assert opts.log_level == "warn"
    assert opts.tcp_address == "127.0.0.1:2"  # the command line beats the config file
    assert opts.log_prefix == "[nsqlookupd] "
    with pytest.raises(SystemExit) as exited:
        parse_nsqlookupd_args(["--log-level=loud"])
    assert exited.value.code == 2
    names = [flag.name for flag in nsqlookupd_flag_set().flags]
    assert sorted(names) == sorted(
        [
            "config",
            "version",
            "log-level",
            "log-prefix",
            "verbose",
            "tcp-address",
            "http-address",
            "broadcast-address",
            "inactive-producer-timeout",
            "tombstone-lifetime",
            "http-allowed-origin",  # nsqpy's only addition (refusing cross-site requests)
        ]
    )

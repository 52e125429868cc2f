"""The nsqd command as a process: flags, --config, start-up lines, signals, exit codes."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import aiohttp
from daemon_process import Started, start_process, stop_process

NSQD = [sys.executable, "-m", "nsqpy.nsqd"]
LOG_LINE = re.compile(rb"^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (INFO|WARNING|FATAL): ")


async def start(*args: str) -> Started:
    return await start_process(NSQD, *args)


async def stop(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> int:
    return await stop_process(proc, sig)


async def test_flags_config_file_and_clean_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text('mem_queue_size = 123\nmsg_timeout = "7s"\nmax_rdy_count = 99\n')
    proc, ports, lines = await start(
        "--tcp-address=127.0.0.1:0",
        "--http-address",
        "127.0.0.1:0",
        f"--data-path={tmp_path / 'data'}",
        f"--config={config}",
        "-max-rdy-count=42",  # the command line beats the config file
        "--statsd-address=127.0.0.1:8125",
    )
    try:
        assert all(LOG_LINE.match(line) for line in lines), lines
        assert not [line for line in lines if b"WARNING" in line]  # statsd is active now
        assert (tmp_path / "data").is_dir()
        base = f"http://127.0.0.1:{ports['HTTP']}"
        async with aiohttp.ClientSession() as http:
            for option, expected in [
                ("mem_queue_size", 123),
                ("msg_timeout", 7_000_000_000),
                ("max_rdy_count", 42),
            ]:
                async with http.get(f"{base}/config/{option}") as resp:
                    assert json.loads(await resp.text()) == expected
        reader, writer = await asyncio.open_connection("127.0.0.1", ports["TCP"])
        writer.write(b"  V2PUB t\n\x00\x00\x00\x01x")
        assert await reader.readexactly(10) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"
        writer.close()
    finally:
        code = await stop(proc)
    assert code == 0


async def test_sigint_stops_too(tmp_path: Path) -> None:
    proc, _, _ = await start(
        "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}"
    )
    assert await stop(proc, signal.SIGINT) == 0


async def run(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *NSQD, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(20):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out, err


async def test_version() -> None:
    code, out, _ = await run("--version")
    assert code == 0
    assert re.fullmatch(rb"nsqd v1\.3\.0 \(built w/nsqpy-\d+\.\d+\.\d+\S*\)\n", out)


async def test_bad_tls_certificate_refuses_to_start(tmp_path: Path) -> None:
    code, _, err = await run(
        "--tcp-address=127.0.0.1:0",
        "--http-address=127.0.0.1:0",
        f"--data-path={tmp_path}",
        f"--tls-cert={tmp_path}/missing.pem",
        f"--tls-key={tmp_path}/missing.key",
    )
    assert code == 1
    assert b"FATAL: failed to build TLS config - " in err


async def test_unknown_flag_is_a_usage_error() -> None:
    code, _, err = await run("--no-such-flag")
    assert code == 2
    assert b"flag provided but not defined: -no-such-flag" in err


async def test_listen_failure_is_reported(tmp_path: Path) -> None:
    proc, ports, _ = await start(
        "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", f"--data-path={tmp_path}/a"
    )
    try:
        code, _, err = await run(
            f"--tcp-address=127.0.0.1:{ports['TCP']}",
            "--http-address=127.0.0.1:0",
            f"--data-path={tmp_path}/b",
        )
        assert code == 1
        assert f"listen (127.0.0.1:{ports['TCP']}) failed".encode() in err
    finally:
        await stop(proc)

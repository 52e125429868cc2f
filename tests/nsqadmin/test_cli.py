"""nsqadmin and nsqpy-cluster as processes: start-up lines, /ping, fatal start-up errors,
--version through the console script, clean stop on SIGTERM."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nsqpy.cli import cluster

from .conftest import Daemon

NSQADMIN = [sys.executable, "-m", "nsqpy.nsqadmin"]
LOG_LINE = r"\[nsqadmin\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} "


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
        return body


def test_start_up_lines_ping_and_sigterm() -> None:
    admin = Daemon.spawn(
        "nsqadmin", ["--http-address=127.0.0.1:0", "--lookupd-http-address=127.0.0.1:4161"]
    )
    try:
        admin.wait_listening(1)
        address = admin.addresses["HTTP"]
        assert re.fullmatch(rf"{LOG_LINE}INFO: nsqadmin v1\.3\.0 \(built w/nsqpy-\S+\)\n",
                            admin.lines[0])  # fmt: skip
        assert re.fullmatch(rf"{LOG_LINE}INFO: HTTP: listening on 127\.0\.0\.1:\d+\n",
                            admin.lines[1])  # fmt: skip
        assert get(f"http://{address}/ping") == b"OK"
    finally:
        admin.proc.send_signal(signal.SIGTERM)
        assert admin.proc.wait(timeout=10) == 0


def test_fatal_start_up_error() -> None:
    result = subprocess.run(
        [*NSQADMIN, "--http-address=127.0.0.1:0"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert re.fullmatch(
        rf"{LOG_LINE}FATAL: failed to instantiate nsqadmin - "
        r"--nsqd-http-address or --lookupd-http-address required\n",
        result.stderr,
    )


def test_version_through_the_console_script() -> None:
    script = Path(sys.executable).parent / "nsqadmin"
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0
    assert re.fullmatch(r"nsqadmin v1\.3\.0 \(built w/nsqpy-\S+\)\n", result.stdout)


def test_nsqpy_cluster_starts_nsqadmin_and_prints_its_url(tmp_path: Path) -> None:
    ports = [f"--{name}-port=0" for name in (
        "lookupd-tcp", "lookupd-http", "nsqd-tcp", "nsqd-http", "nsqadmin-http")]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsqpy.cli.cluster", f"--data-path={tmp_path / 'data'}", *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = []
        while not printed or not printed[-1].startswith("Ctrl-C"):
            line = proc.stdout.readline()
            assert line, printed
            printed.append(line)
        [admin_line] = [line for line in printed if line.startswith("nsqadmin:")]
        match = re.fullmatch(r"nsqadmin: +(http://127\.0\.0\.1:\d+/)\n", admin_line)
        assert match, admin_line
        url = match.group(1)
        assert get(url + "ping") == b"OK"
        assert b"nsqadmin" in get(url)  # the UI's page
        nodes = json.loads(get(url + "api/nodes"))
        assert nodes["message"] == ""
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_nsqpy_cluster_hides_the_samplers_requests(capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        "[nsqd] 2024/01/01 00:00:00.000000 INFO: 200 GET /stats?format=json&include_clients="
        "false&include_mem=false (127.0.0.1:5000) 1.2ms\n",
        "[nsqlookupd] 2024/01/01 00:00:00.000000 INFO: 200 GET /nodes (127.0.0.1:5000) 1ms\n",
        "[nsqd] 2024/01/01 00:00:00.000000 INFO: 200 GET /stats?format=json (127.0.0.1:5000) 1ms\n",
        "[nsqd] 2024/01/01 00:00:00.000000 INFO: TOPIC(t): created\n",
    ]
    cluster._echo(io.StringIO("".join(lines)))
    assert capsys.readouterr().err == "".join(lines[2:])

"""Real NSQ clients' own test suites, run unchanged against nsqpy's daemons.

Each suite starts the daemons it needs as ``nsqd`` and ``nsqlookupd`` from ``PATH``, as it
does in its own CI against Go NSQ. Here those names are wrappers that run nsqpy's, first on
``PATH``, so every integration test of the suite talks to nsqpy. A failure is a client's
expectation of NSQ v1.3.0 that nsqpy breaks.

- gnsq's suite comes with its sdist, which ``make`` downloads (the same version as the peer
  in pyproject.toml) into ``<venv>/upstream``;
- nsqjs's suite comes with its npm package, and ``tests/peers/nsqjs`` installs the tools it
  runs with (mocha, should, sinon, ...). Its four unit tests of its own Message timers are
  left out (``NSQJS_NOT_OURS``): no daemon takes part in them.

pynsq's sdist ships no tests and go-nsq needs a Go module cache, so those two suites are run
by hand from their repositories (docs/nsqd.md, "Clients' own test suites").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.peers, pytest.mark.slow]

GNSQ = "gnsq-1.0.2"
NSQJS = Path(__file__).resolve().parent.parent / "peers" / "nsqjs" / "node_modules"
#: Longer than either suite takes (~12 s each here), shorter than the test's own timeout.
SUITE_TIMEOUT = 100
#: nsqjs's unit tests of its own Message timers (``test/message_test.js``): no daemon takes
#: part, and with 5 ms between a touch and the timeout one fails when the loaded machine
#: runs node's timers late (a CI run here), leaving a timer that fails the next test too.
NSQJS_NOT_OURS = "^Message timeout "


@pytest.fixture(params=["memory", "durable"])
def daemons_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ``PATH`` whose ``nsqd`` and ``nsqlookupd`` are nsqpy's (this interpreter's); nsqd
    also in ``--durable`` mode, which must be as invisible to a client (pynsq's suite found a
    stall there that memory mode never hits)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nsqd", "nsqlookupd"):
        extra = "--durable " if name == "nsqd" and request.param == "durable" else ""
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nsqpy.{name} {extra}"$@"\n')
        wrapper.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def run_suite(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    """Run a suite to its end; fail with the end of its output unless it passed.

    The suite runs in a process group of its own, and whatever is left of that group when
    it ends goes with it: a suite that hangs or fails can leave the daemons it started
    running, on the fixed ports the next suite and the Go peers' tests listen on."""
    with subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=SUITE_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            stdout, stderr = proc.communicate()
            output = stdout[-6000:] + stderr[-3000:]
            pytest.fail(f"{cmd[0]} did not end within {SUITE_TIMEOUT} s:\n{output}")
        finally:
            _kill_group(proc.pid)
    if proc.returncode != 0:
        output = stdout[-6000:] + stderr[-3000:]
        pytest.fail(f"{cmd[0]} exited {proc.returncode}:\n{output}")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing of the group is left


def test_gnsq_suite(daemons_path: str, tmp_path: Path) -> None:
    upstream = Path(os.environ.get("NSQPY_UPSTREAM_DIR", Path(sys.prefix) / "upstream"))
    sdist = upstream / f"{GNSQ}.tar.gz"
    if not sdist.exists():
        pytest.skip(f"{sdist} missing: `make` downloads it (pip download, from PyPI)")
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse paths out of tmp_path
            archive.extractall(tmp_path, filter="data")
        else:
            archive.extractall(tmp_path)
    root = tmp_path / GNSQ
    # its own (empty) pytest config, not ours: our addopts, markers and paths are not its
    config = ["-c", "setup.cfg", "--rootdir", "."]
    run_suite(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *config, "tests"],
        root,
        {"PATH": daemons_path, "PYTHONPATH": f"{root}{os.pathsep}{root / 'gnsq'}"},
    )


def test_nsqjs_suite(daemons_path: str) -> None:
    mocha = NSQJS / "mocha" / "bin" / "mocha"
    package = NSQJS / "nsqjs"
    if not (mocha.exists() and (package / "test").is_dir()):
        pytest.skip("nsqjs and mocha are not installed (tests/peers/nsqjs: npm install)")
    skip = ["--grep", NSQJS_NOT_OURS, "--invert"]
    run_suite(["node", str(mocha), "-R", "dot", *skip], package, {"PATH": daemons_path})


def _running(marker: str) -> bool:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False)
    return found.returncode == 0


def test_what_a_suite_leaves_running_is_killed(tmp_path: Path) -> None:
    """A daemon a passing suite left behind (nsqjs's, after a failed hook) goes with it."""
    marker = f"sleep 3{os.getpid() % 1000}.17"
    run_suite(["sh", "-c", f"{marker} >/dev/null 2>&1 & echo started"], tmp_path, {})
    assert not _running(marker)


def test_a_suite_that_hangs_fails_with_its_output_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "SUITE_TIMEOUT", 1)
    marker = f"sleep 3{os.getpid() % 1000}.29"
    script = f"{marker} >/dev/null 2>&1 & echo started; {marker}"
    with pytest.raises(pytest.fail.Exception, match="did not end within 1 s:\nstarted"):
        run_suite(["sh", "-c", script], tmp_path, {})
    assert not _running(marker)

"""How fast the daemons start: time to print ``--version``, and from spawn to the first 200 on
``/ping``.

Each sample is a fresh process (``<python> -m nsqpy.<daemon>``, or ``--cmd``), so it includes
the interpreter's own start-up and every import. ``/ping`` is polled over plain sockets every
``--poll`` (1 ms by default) on a port chosen beforehand, so the figure is the daemon's, not
the poller's. Medians over ``--runs`` samples (p90 and range alongside); nsqlookupd and nsqadmin
are measured the same way unless ``--daemons`` says otherwise.

Bytecode: by default the daemons run as installed, with compiled bytecode (``__pycache__``,
written by one untimed warm-up run per daemon; ``PYTHONDONTWRITEBYTECODE`` is dropped for the
children, since with it set and no ``.pyc`` files a checkout recompiles every module of nsqpy
at every start). ``--cold`` measures exactly that case: the daemons run from a copy of
``src/`` without ``__pycache__`` and with ``PYTHONDONTWRITEBYTECODE=1``, so nsqpy's modules
are compiled at each start while the standard library's and the dependencies' are not. (With
``--cmd``, give the command its own ``PYTHONPATH`` and environment instead.)

Wall time is what a user waits; on a busy machine it mostly measures the others. So each
figure also has the daemon's own CPU time (user + system) up to that point, from
``getrusage`` for ``--version`` and ``/proc/<pid>/stat`` at the first 200: that one barely
moves with the load, and is the one to compare across runs on a shared machine.

    python -m benchmarks.bench_startup --runs 10
    python -m benchmarks.bench_startup --daemons nsqd --runs 20
    python -m benchmarks.bench_startup --daemons nsqd --cmd /path/to/go/nsqd   # e.g. Go's
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.run import ROOT

DAEMONS = ("nsqd", "nsqlookupd", "nsqadmin")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
Sample = tuple[float, float]  # wall seconds, CPU seconds


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    src = args.cold_src or str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.cold:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ping_ok(port: int) -> bool:
    """One ``GET /ping``: True on a 200, False while nothing listens (or answers) yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = sock.recv(64)
    except OSError:
        return False
    return head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200"))


def _command(args: argparse.Namespace, daemon: str) -> list[str]:
    return shlex.split(args.cmd) if args.cmd else [sys.executable, "-m", f"nsqpy.{daemon}"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime + stime, in ticks


def time_version(args: argparse.Namespace, daemon: str) -> Sample:
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(
        [*_command(args, daemon), "--version"],
        env=_env(args),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start, _children_cpu() - cpu


def _flags(daemon: str, http_port: int, data_path: str) -> list[str]:
    http = f"--http-address=127.0.0.1:{http_port}"
    if daemon == "nsqd":
        return [http, "--tcp-address=127.0.0.1:0", f"--data-path={data_path}"]
    if daemon == "nsqlookupd":
        return [http, "--tcp-address=127.0.0.1:0"]
    # nsqadmin needs somewhere to look; nothing answers there, which it survives
    return [http, f"--nsqd-http-address=127.0.0.1:{_free_port()}"]


def time_ping(args: argparse.Namespace, daemon: str) -> Sample:
    port = _free_port()
    data_path = tempfile.mkdtemp(prefix="nsqpy-bench-startup-")
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*_command(args, daemon), *_flags(daemon, port, data_path)],
        env=_env(args),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = start + args.timeout
        while not _ping_ok(port):
            if proc.poll() is not None:
                raise RuntimeError(f"{daemon} exited with {proc.returncode} before /ping")
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{daemon} did not answer /ping in {args.timeout} s")
            time.sleep(args.poll)  # the poll period: what the figure can be off by
        return time.perf_counter() - start, _cpu_of(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_path, ignore_errors=True)


def _line(what: str, samples: list[Sample]) -> str:
    ms = sorted(wall * 1e3 for wall, _ in samples)
    cpu = statistics.median(c * 1e3 for _, c in samples)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return (
        f"{what:30s} median {statistics.median(ms):7.1f} ms  p90 {p90:7.1f} ms"
        f"  range {ms[0]:.1f}-{ms[-1]:.1f} ms  CPU median {cpu:6.1f} ms  (n={len(ms)})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="samples per figure")
    p.add_argument("--daemons", default=",".join(DAEMONS), help="comma-separated subset")
    p.add_argument("--cmd", default="", help="the daemon's command instead of python -m")
    p.add_argument("--poll", type=float, default=0.001, help="seconds between /ping attempts")
    p.add_argument("--timeout", type=float, default=30.0, help="give up on /ping after this")
    p.add_argument("--cold", action="store_true", help="no bytecode cache: compile each start")
    args = p.parse_args(argv)
    daemons = [d for d in args.daemons.split(",") if d]
    if any(d not in DAEMONS for d in daemons) or not daemons:
        p.error(f"--daemons: a subset of {','.join(DAEMONS)}")
    if args.cmd and len(daemons) != 1:
        p.error("--cmd needs exactly one of --daemons")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    args.cold_src = ""
    if args.cold:  # nsqpy without its bytecode, the rest as installed
        args.cold_src = os.path.join(tempfile.mkdtemp(prefix="nsqpy-bench-cold-"), "src")
        shutil.copytree(ROOT / "src", args.cold_src, ignore=shutil.ignore_patterns("__pycache__"))
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.2f}" + ("  (not quiet: > 0.5)" if load > 0.5 else ""))
    print("bytecode: " + ("none for nsqpy, compiled at each start" if args.cold else "cached"))
    try:
        for daemon in daemons:
            # interleaved, so that a noisy moment hits both figures alike
            version, ping = [], []
            time_ping(args, daemon)  # warm-up, untimed: writes the bytecode cache if missing
            for _ in range(args.runs):
                version.append(time_version(args, daemon))
                ping.append(time_ping(args, daemon))
            print(_line(f"{daemon} --version", version))
            print(_line(f"{daemon} spawn to /ping 200", ping))
    finally:
        if args.cold_src:
            shutil.rmtree(os.path.dirname(args.cold_src), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``nsqpy-cluster``: a local NSQ cluster, each daemon in its own process.

Starts nsqlookupd, then nsqd registered with it (data under ``--data-path``) and nsqadmin
pointed at the lookupd, prints where everything listens (the nsqadmin URL included), and stops
them all on SIGINT/SIGTERM (or when one of them exits).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Final

from nsqpy.nsqadmin.sampler import STATS_QUERY

LISTENING: Final = re.compile(r"(TCP|HTTP): listening on (\S+)")


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nsqpy-cluster", description=__doc__)
    parser.add_argument("--data-path", default="data", help="where nsqd keeps its data")
    parser.add_argument("--host", default="127.0.0.1", help="address every daemon binds")
    parser.add_argument("--lookupd-tcp-port", type=int, default=4160)
    parser.add_argument("--lookupd-http-port", type=int, default=4161)
    parser.add_argument("--nsqd-tcp-port", type=int, default=4150)
    parser.add_argument("--nsqd-http-port", type=int, default=4151)
    parser.add_argument("--nsqadmin-http-port", type=int, default=4171)
    return parser.parse_args(argv)


def _start(
    name: str, args: list[str], listeners: int = 2
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Start ``python -m nsqpy.<name>``; wait for its ``listeners`` listening lines, echoing
    its log."""
    proc = subprocess.Popen(
        [sys.executable, "-m", f"nsqpy.{name}", *args], stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    bound: dict[str, str] = {}
    while len(bound) < listeners:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit(f"{name} exited before it was listening")
        sys.stderr.write(line)
        if match := LISTENING.search(line):
            bound[match.group(1)] = match.group(2)
    # keep echoing its log: a full pipe would block the daemon
    threading.Thread(target=_echo, args=(proc.stderr,), daemon=True).start()
    return proc, bound


#: nsqadmin's sampler GETs lookupd's /nodes and every nsqd's /stats each --sample-interval;
#: the daemons access-log every request, so echoing these would bury the rest of the log.
SAMPLER_REQUESTS: Final = (f" GET /stats?{STATS_QUERY} (", " GET /nodes (")


def _echo(stream: IO[str]) -> None:
    for line in stream:
        if not any(request in line for request in SAMPLER_REQUESTS):
            sys.stderr.write(line)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parse(sys.argv[1:] if argv is None else argv)
    os.makedirs(opts.data_path, exist_ok=True)
    host = opts.host
    lookupd, lookupd_addrs = _start(
        "nsqlookupd",
        [
            f"--tcp-address={host}:{opts.lookupd_tcp_port}",
            f"--http-address={host}:{opts.lookupd_http_port}",
            f"--broadcast-address={host}",
        ],
    )
    procs = [lookupd]
    try:
        nsqd, nsqd_addrs = _start(
            "nsqd",
            [
                f"--tcp-address={host}:{opts.nsqd_tcp_port}",
                f"--http-address={host}:{opts.nsqd_http_port}",
                f"--data-path={opts.data_path}",
                f"--broadcast-address={host}",
                f"--lookupd-tcp-address={lookupd_addrs['TCP']}",
                # the Spark source holds a batch or two in flight on one connection (docs/spark.md)
                "--max-rdy-count=200000",
            ],
        )
        procs.append(nsqd)
        admin, admin_addrs = _start(
            "nsqadmin",
            [
                f"--http-address={host}:{opts.nsqadmin_http_port}",
                f"--lookupd-http-address={lookupd_addrs['HTTP']}",
            ],
            listeners=1,
        )
        procs.append(admin)
        print(
            f"nsqlookupd: tcp {lookupd_addrs['TCP']}  http http://{lookupd_addrs['HTTP']}\n"
            f"nsqd:       tcp {nsqd_addrs['TCP']}  http http://{nsqd_addrs['HTTP']}"
            f"  data {os.path.abspath(opts.data_path)}\n"
            f"nsqadmin:   http://{admin_addrs['HTTP']}/\n"
            "pipeline:   nsqpy-archive, nsqpy-replay, nsqpy-report (docs/spark.md)\n"
            "Ctrl-C stops the cluster.",
            flush=True,
        )
        _wait(procs)
    finally:
        _stop(procs)
    return 0


def _wait(procs: list[subprocess.Popen[str]]) -> None:
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    while not stop and all(p.poll() is None for p in procs):
        time.sleep(0.2)  # the launcher only waits: daemons do the work in their own processes


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in reversed(procs):  # nsqadmin, then nsqd, so it leaves lookupd cleanly
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())

"""``nsqpy-spark-cluster``: a local Spark standalone cluster (a master and N workers) for
nsqpy's jobs, from the pyspark package alone (see nsqpy.spark.standalone).

Prints the ``--master spark://...`` to give the jobs and runs until SIGINT/SIGTERM, then stops
the workers and the master.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Final

from nsqpy.spark.env import SparkSetupError
from nsqpy.spark.jobs.cli import positive_int
from nsqpy.spark.standalone import (
    DEFAULT_EXECUTOR_MEMORY_MIB,
    ClusterConfig,
    StandaloneCluster,
    StandaloneError,
    StartCancelled,
    memory_mib,
)

PROG: Final = "nsqpy-spark-cluster"
#: How often the launcher looks at its daemons while it waits for a signal.
WATCH_INTERVAL: Final = 1.0


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535, 0 for any): {value}")
    return value


def _memory(text: str) -> str:
    try:
        memory_mib(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Start a Spark standalone master and N workers on this machine, from the "
        "installed pyspark, wait until the workers are registered, print the --master URL "
        "for nsqpy-archive/-replay/-report, and stop them all on Ctrl-C or SIGTERM.",
    )
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", help="default: 1")
    p.add_argument("--cores", type=positive_int, default=1, metavar="C",
                   help="cores each worker offers (default: 1)")  # fmt: skip
    p.add_argument("--memory", type=_memory, default="2g", metavar="SIZE",
                   help="memory each worker offers to executors, e.g. 512m, 2g (default: 2g); "
                        "the jobs' executors ask for 1g each")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1",
                   help="address the master and workers bind and advertise "
                        "(default: 127.0.0.1)")  # fmt: skip
    p.add_argument("--master-port", type=_port, default=7077, metavar="PORT",
                   help="default: 7077 (Spark takes the next free one if it is busy)")  # fmt: skip
    p.add_argument("--webui-port", type=_port, default=8080, metavar="PORT",
                   help="the master's web UI (default: 8080)")  # fmt: skip
    p.add_argument("--work-dir", metavar="PATH",
                   help="logs and the workers' scratch space, kept afterwards "
                        "(default: a temporary directory, removed on stop)")  # fmt: skip
    p.add_argument("--start-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="how long to wait for the workers to register (default: 120)")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        config = ClusterConfig(
            workers=args.workers, cores=args.cores, memory=args.memory, host=args.host,
            master_port=args.master_port, webui_port=args.webui_port, work_dir=args.work_dir,
            start_timeout=args.start_timeout,
        )  # fmt: skip
    except ValueError as exc:
        p.error(str(exc))
    if memory_mib(config.memory) < DEFAULT_EXECUTOR_MEMORY_MIB:
        print(f"{PROG}: warning: --memory {config.memory} is less than the 1g an executor asks "
              "for by default: a job waits for resources unless it sets spark.executor.memory "
              "lower", file=sys.stderr, flush=True)  # fmt: skip

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    # Installed before the daemons start, so that a signal during start-up stops them too.
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    cluster = StandaloneCluster(config)
    try:
        try:
            cluster.start(lambda line: print(line, flush=True), stop.is_set)
        except StartCancelled:
            return 0
        except (StandaloneError, SparkSetupError) as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
            return 1
        print(
            f"work dir {cluster.work_dir}\n"
            f"run the jobs with: --master {cluster.master_url}\n"
            "Ctrl-C stops the cluster.",
            flush=True,
        )
        while not stop.wait(WATCH_INTERVAL):
            if gone := cluster.exited():
                first = gone[0]
                print(f"{PROG}: error: spark {first.name} exited with status "
                      f"{first.proc.returncode}; its log ends with:\n{first.log_tail()}",
                      file=sys.stderr, flush=True)  # fmt: skip
                return 1
        print("stopping the workers and the master", flush=True)
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

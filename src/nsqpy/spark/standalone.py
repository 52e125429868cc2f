"""A local Spark standalone cluster (one master, N workers) from the pyspark package itself.

pyspark's wheel ships ``bin/spark-class`` but not ``sbin/start-master.sh``, and its scripts find
their Spark home with ``python3`` from PATH, which may not have pyspark. This module starts
``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker`` through the package's
own ``spark-class`` with ``SPARK_HOME`` set to the package directory, ``SPARK_LOCAL_IP`` set to
the chosen host (so nothing binds to or advertises another interface) and ``PYSPARK_PYTHON``
set to this interpreter. It waits until the master's ``/json/`` lists every worker as ALIVE.

Each daemon runs in a session of its own (so a Ctrl-C in the terminal reaches only the
launcher, which then stops workers before the master) and its output goes to a log file under
the work directory. Executors are children of their worker and go with it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from nsqpy.spark.env import check_java

MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"

#: Spark moves to the next port when one is taken (spark.port.maxRetries), so the ports in use
#: are read from the master's log rather than assumed.
MASTER_URL_LINE: Final = re.compile(r"Starting Spark master at (spark://\S+)")
MASTER_UI_LINE: Final = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")

#: What the jobs' executors ask for unless spark.executor.memory says otherwise.
DEFAULT_EXECUTOR_MEMORY_MIB: Final = 1024

POLL: Final = 0.2
_MEMORY: Final = re.compile(r"(\d+)([mg])", re.IGNORECASE)
#: prctl(PR_SET_PDEATHSIG): a daemon gets SIGTERM if the launcher dies without stopping it.
_PR_SET_PDEATHSIG: Final = 1


class StandaloneError(RuntimeError):
    """The cluster could not be started (a daemon exited, or workers did not register)."""


class StartCancelled(StandaloneError):
    """``start`` was asked to give up (``cancelled()`` returned true) before it was done."""


def memory_mib(text: str) -> int:
    """A worker memory size as Spark's ``--memory`` takes it (``512m``, ``2g``) in MiB."""
    match = _MEMORY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"memory must look like 512m or 2g, got {text!r}")
    amount = int(match.group(1)) * (1024 if match.group(2).lower() == "g" else 1)
    if amount < 1:
        raise ValueError(f"memory must be positive, got {text!r}")
    return amount


def spark_home() -> Path:
    """The pyspark package directory, which is a complete Spark home (jars, bin/spark-class)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StandaloneError("pyspark is not installed: pip install 'nsqpy[spark]'")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise StandaloneError(f"{home} has no bin/spark-class or jars/: not a full pyspark")
    return home


@dataclass(frozen=True)
class ClusterConfig:
    """A standalone cluster on one machine. Ports of 0 are chosen by the system."""

    workers: int = 1
    cores: int = 1  #: per worker
    memory: str = "2g"  #: per worker, for its executors
    host: str = "127.0.0.1"
    master_port: int = 7077
    webui_port: int = 8080
    #: logs and the workers' scratch space (executors' stdout/stderr, fetched files); a
    #: temporary directory, removed on stop, when None
    work_dir: str | None = None
    python: str = sys.executable
    start_timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.cores < 1:
            raise ValueError(f"cores must be at least 1, got {self.cores}")
        memory_mib(self.memory)
        if not self.host or self.host in ("0.0.0.0", "::"):
            raise ValueError(
                f"host must be an address the workers and the driver can reach, got {self.host!r}"
            )
        for name in ("master_port", "webui_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ValueError(f"{name} must be a port number (0 for any), got {port}")


def daemon_env(config: ClusterConfig, home: Path, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of the master and the workers."""
    env = dict(base)
    env["SPARK_HOME"] = str(home)
    env["SPARK_LOCAL_IP"] = config.host
    env["PYSPARK_PYTHON"] = config.python
    # The master's REST submission server (port 6066) takes unauthenticated submissions, and a
    # second cluster on the machine would collide on its port: the jobs do not need it.
    opts = env.get("SPARK_MASTER_OPTS", "")
    env["SPARK_MASTER_OPTS"] = f"{opts} -Dspark.master.rest.enabled=false".strip()
    return env


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the launcher's thread dies (Linux only)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "".join(text.splitlines(keepends=True)[-lines:])

    def group_alive(self) -> bool:
        """Is anything left of its process group (the daemon, its executors and their Python
        workers)?"""
        return bool(group_members(self.proc.pid))


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``.

    Read from /proc where there is one: an orphan that died but was not yet reaped by init still
    counts for ``killpg(pgid, 0)``, and not every container's init reaps promptly.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class StandaloneCluster:
    """Start with ``start()`` (or ``with``), submit to ``master_url``, ``stop()`` when done."""

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config or ClusterConfig()
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        self.master_url = ""
        self.webui_url = ""
        self.work_dir = Path()
        self._own_work_dir = False
        self._cancelled: Callable[[], bool] = lambda: False

    # ----------------------------------------------------------------------------- start

    def start(
        self,
        on_line: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker is ALIVE.

        ``on_line`` gets progress lines; ``cancelled`` is polled while waiting and, once true,
        makes ``start`` stop what it started and raise StartCancelled. On Linux the daemons
        get SIGTERM if the thread that started them ends without stopping them.
        """
        say = on_line or (lambda _line: None)
        self._cancelled = cancelled or (lambda: False)
        check_java()
        home = spark_home()
        cfg = self.config
        if cfg.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="nsqpy-spark-"))
            self._own_work_dir = True
        else:
            self.work_dir = Path(cfg.work_dir).resolve()
            self.work_dir.mkdir(parents=True, exist_ok=True)
        env = daemon_env(cfg, home, os.environ)
        spark_class = str(home / "bin" / "spark-class")
        deadline = time.monotonic() + cfg.start_timeout
        try:
            self.master = self._spawn(
                "master",
                [spark_class, MASTER_CLASS, "--host", cfg.host, "--port", str(cfg.master_port),
                 "--webui-port", str(cfg.webui_port)],
                env,
            )  # fmt: skip
            self.master_url, ui_port = self._await_master(self.master, deadline)
            self.webui_url = f"http://{_url_host(cfg.host)}:{ui_port}"
            say(f"master {self.master_url} (web UI {self.webui_url}/, log {self.master.log_path})")
            for index in range(1, cfg.workers + 1):
                scratch = self.work_dir / f"worker-{index}"
                scratch.mkdir(exist_ok=True)
                self.workers.append(self._spawn(
                    f"worker-{index}",
                    [spark_class, WORKER_CLASS, "--host", cfg.host, "--cores", str(cfg.cores),
                     "--memory", cfg.memory, "--webui-port", "0", "--work-dir", str(scratch),
                     self.master_url],
                    env,
                ))  # fmt: skip
            self._await_workers(deadline)
            say(f"{cfg.workers} worker(s) registered, {cfg.cores} core(s) and {cfg.memory} each")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> Daemon:
        log_path = self.work_dir / f"{name}.log"
        # Truncated: a kept --work-dir must not show the master URL of an earlier run.
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        try:
            proc = subprocess.Popen(
                list(argv), env=dict(env), cwd=self.work_dir, stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
        except BaseException:
            log_file.close()
            raise
        return Daemon(name, proc, log_path, log_file)

    def _await_master(self, master: Daemon, deadline: float) -> tuple[str, int]:
        """The master's URL and web UI port, from its log, once its ``/json/`` says ALIVE."""
        url = ui_port = None
        while True:
            log = master.log_tail(400)
            if url is None and (found := MASTER_URL_LINE.search(log)):
                url = found.group(1)
            if ui_port is None and (port := MASTER_UI_LINE.search(log)):
                ui_port = int(port.group(1))
            if url is not None and ui_port is not None:
                state = self._json(f"http://{_url_host(self.config.host)}:{ui_port}")
                if state is not None and state.get("status") == "ALIVE":
                    return url, ui_port
            self._check_running(deadline, "the master to start")
            time.sleep(POLL)

    def _await_workers(self, deadline: float) -> None:
        while len(self.alive_workers()) < self.config.workers:
            self._check_running(deadline, f"{self.config.workers} worker(s) to register")
            time.sleep(POLL)

    def _check_running(self, deadline: float, what: str) -> None:
        if self._cancelled():
            raise StartCancelled(f"cancelled while waiting for {what}")
        for daemon in self._daemons():
            if daemon.proc.poll() is not None:
                raise StandaloneError(
                    f"spark {daemon.name} exited with status {daemon.proc.returncode} while "
                    f"waiting for {what}; its log ({daemon.log_path}) ends with:\n"
                    f"{daemon.log_tail()}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {d.log_path}\n{d.log_tail(10)}" for d in self._daemons())
            raise StandaloneError(
                f"timed out after {self.config.start_timeout:.0f}s waiting for {what}\n{logs}"
            )

    # ----------------------------------------------------------------------------- state

    @staticmethod
    def _json(base: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{base}/json/", timeout=5) as reply:
                data = json.loads(reply.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` (workers, active and completed applications)."""
        data = self._json(self.webui_url)
        if data is None:
            raise StandaloneError(f"the master's web UI {self.webui_url}/json/ does not answer")
        return data

    def alive_workers(self) -> list[dict[str, Any]]:
        data = self._json(self.webui_url) or {}
        workers = data.get("workers", [])
        return [w for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"]

    def _daemons(self) -> list[Daemon]:
        return [*self.workers, *([self.master] if self.master else [])]

    def running(self) -> bool:
        """True while every daemon is running."""
        daemons = self._daemons()
        return bool(daemons) and all(d.proc.poll() is None for d in daemons)

    def exited(self) -> list[Daemon]:
        return [d for d in self._daemons() if d.proc.poll() is not None]

    # ----------------------------------------------------------------------------- stop

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the workers (they kill their executors), then the master; SIGKILL whatever
        of their process groups is left after ``timeout``. Removes a temporary work dir."""
        for daemon in self._daemons():  # workers first: a master that goes first makes them
            _terminate(daemon, timeout)  # retry their registration until they give up
        for daemon in self._daemons():
            daemon.log_file.close()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self._own_work_dir = False

    def __enter__(self) -> StandaloneCluster:
        return self.start() if not self.master else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(daemon: Daemon, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with contextlib.suppress(ProcessLookupError):
        os.killpg(daemon.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        daemon.proc.wait(max(0.0, deadline - time.monotonic()))
    # The group outlives the daemon while executors and Python workers shut down.
    while daemon.group_alive() and time.monotonic() < deadline:
        time.sleep(POLL)
    if daemon.proc.poll() is None or daemon.group_alive():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon.proc.wait()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

"""What NSQ's utilities (to_nsq, nsq_tail, nsq_to_file, ...) share: flags, checks, exits, a loop.

NSQ v1.3.0 builds each utility from the same handful of pieces; matching them here keeps every
utility's command line, messages and exit codes the same as its Go original:

- flags: ``--nsqd-tcp-address`` / ``--lookupd-http-address`` (repeatable, never comma-split),
  ``--consumer-opt`` / ``--producer-opt`` (go-nsq's ``ConfigFlag``: ``key,value`` checked as the
  flag is parsed, a bare ``key`` meaning ``true``), ``--version`` where the app has one;
- exits: a usage error prints the message and the usage and exits 2 (Go's ``flag`` package); a
  failed check is ``log.Fatal`` — one time-stamped line on stderr and exit 1 (:func:`fatal`, or
  :class:`Fatal` raised inside the loop, or :meth:`Shutdown.fail` from a callback);
- running: one asyncio loop (uvloop when installed) until the work is done or SIGINT/SIGTERM
  arrives (:func:`run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, NoReturn, TypeVar

from nsqpy._internal.daemon import new_loop_runner
from nsqpy._internal.goflag import FlagKind, FlagSet, ParsedFlags, go_log_line
from nsqpy._version import __version__
from nsqpy.client.config import Config
from nsqpy.protocol.constants import NSQ_VERSION

GODOC_CONFIG: Final = "http://godoc.org/github.com/nsqio/go-nsq#Config"
CONSUMER_OPT_USAGE: Final = (
    f"option to passthrough to nsq.Consumer (may be given multiple times, {GODOC_CONFIG})"
)
PRODUCER_OPT_USAGE: Final = (
    f"option to passthrough to nsq.Producer (may be given multiple times, {GODOC_CONFIG})"
)
NSQD_TCP_ADDRESS_USAGE: Final = "nsqd TCP address (may be given multiple times)"
LOOKUPD_HTTP_ADDRESS_USAGE: Final = "lookupd HTTP address (may be given multiple times)"
#: The signals that stop a utility cleanly (nsq_stat adds SIGHUP).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Identity
# ---------------------------------------------------------------------------------------------


def user_agent(app: str) -> str:
    """The IDENTIFY user agent: NSQ sends ``<app>/1.3.0 go-nsq/<ver>``; we name our library."""
    return f"{app}/{NSQ_VERSION} nsqpy/{__version__}"


def version_text(app: str) -> str:
    """``<app> --version`` output, as the Go utilities print it (no build details)."""
    return f"{app} v{NSQ_VERSION}"


# ---------------------------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------------------------


def new_flag_set(app: str, argv: Sequence[str] | None) -> FlagSet:
    """A FlagSet named as Go's ``flag.CommandLine`` is: after ``os.Args[0]``.

    Go prints ``Usage of <argv[0]>:``; run as a console script that is the script's path. Under
    ``python -m`` or when called with an explicit ``argv`` (tests) there is no such name, so
    the app's own name stands in.
    """
    prog = sys.argv[0] if sys.argv else ""
    if argv is not None or not prog or prog.endswith(".py") or prog.startswith("-"):
        prog = app
    return FlagSet(prog)


def parse(fs: FlagSet, argv: Sequence[str] | None) -> ParsedFlags:
    """Go's ``flag.Parse``: usage errors exit 2, ``-h`` exits 0 (both print the usage)."""
    return fs.parse(sys.argv[1:] if argv is None else list(argv))


def add_version_flag(fs: FlagSet, usage: str = "print version string") -> None:
    fs.add_bool("version", False, usage, cfg=None)


def handle_version(parsed: ParsedFlags, app: str) -> bool:
    """Print the version and return True when ``--version`` was given (the app then exits 0)."""
    if not parsed["version"]:
        return False
    print(version_text(app), flush=True)
    return True


def add_source_flags(fs: FlagSet) -> None:
    """``--nsqd-tcp-address`` and ``--lookupd-http-address``, as every consumer utility has."""
    fs.add_string_array("nsqd-tcp-address", NSQD_TCP_ADDRESS_USAGE)
    fs.add_string_array("lookupd-http-address", LOOKUPD_HTTP_ADDRESS_USAGE)


def add_config_opt(fs: FlagSet, name: str, usage: str, *, checked: bool = True) -> None:
    """A repeatable ``key,value`` passthrough flag; its value is the list of texts given.

    ``checked`` is go-nsq's ``ConfigFlag``: each occurrence is applied to a config while
    parsing, so a bad option is a usage error (exit 2). nsq_to_file declares the flag as a
    plain string list instead and applies it later, ignoring errors: pass ``checked=False``.
    """
    if not checked:
        fs.add_string_array(name, usage)
        return
    fs.add_value(name, [], usage, parser=_checked_opt, coerce_as=FlagKind.STRING_ARRAY)


def _checked_opt(text: str, current: object) -> object:
    set_config_opt(Config(), text)  # raises ValueError with go-nsq's reason
    previous = [v for v in current if isinstance(v, str)] if isinstance(current, list) else []
    return [*previous, text]


def set_config_opt(cfg: Config, text: str) -> None:
    """go-nsq ``ConfigFlag.Set``: ``key,value`` (a bare ``key`` sets ``true``); ValueError."""
    key, comma, value = text.partition(",")
    # go-nsq's Config.Set accepts dashed names too.
    cfg.set(key.replace("-", "_"), value if comma else "true")


def apply_config_opts(cfg: Config, opts: Sequence[str], *, strict: bool = True) -> None:
    """Apply ``--consumer-opt``/``--producer-opt`` texts; ``strict=False`` skips bad ones."""
    for text in opts:
        try:
            set_config_opt(cfg, text)
        except ValueError:
            if strict:
                raise


def client_config(
    app: str, opts: Sequence[str], *, max_in_flight: int | None = None, strict: bool = True
) -> Config:
    """A client Config the way the Go apps build one: passthrough options first, then the
    app's own settings (user agent, ``--max-in-flight``), which therefore win."""
    cfg = Config()
    apply_config_opts(cfg, opts, strict=strict)
    cfg.user_agent = user_agent(app)
    if max_in_flight is not None:
        cfg.max_in_flight = max_in_flight
    return cfg


def strings(parsed: ParsedFlags, name: str) -> list[str]:
    """A repeatable flag's values."""
    value = parsed[name]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def source_error(
    nsqd: Sequence[str],
    lookupd: Sequence[str],
    *,
    nsqd_flag: str = "--nsqd-tcp-address",
    lookupd_flag: str = "--lookupd-http-address",
) -> str | None:
    """The consumer utilities' address check: exactly one kind of source, NSQ's wording."""
    if not nsqd and not lookupd:
        return f"{nsqd_flag} or {lookupd_flag} required"
    if nsqd and lookupd:
        return f"use {nsqd_flag} or {lookupd_flag} not both"
    return None


# ---------------------------------------------------------------------------------------------
# Logging and fatal exits (Go's standard ``log`` package: ``2006/01/02 15:04:05 message``)
# ---------------------------------------------------------------------------------------------


class Fatal(Exception):
    """Raised inside :func:`run`'s loop: print like ``log.Fatal`` and exit 1."""


def logf(message: str) -> None:
    """Go's ``log.Printf`` to stderr."""
    print(go_log_line(message), file=sys.stderr, flush=True)


def fatal(message: str) -> NoReturn:
    """Go's ``log.Fatal``: one line on stderr, exit status 1 (stdout is flushed first).

    For the option checks, before the loop runs; inside :func:`run` raise :class:`Fatal`.
    """
    sys.stdout.flush()
    logf(message)
    raise SystemExit(1)


_LEVEL_TAGS: Final = {
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "ERR",
}


class _GoLogFormatter(logging.Formatter):
    """The client library's records in go-nsq's shape: ``<date> <time> INF <message>``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"{stamp} {_LEVEL_TAGS.get(record.levelno, 'INF')} {text}"


def setup_logging(level: int = logging.INFO) -> None:
    """Send the client library's log to stderr, as go-nsq's default logger does."""
    logger = logging.getLogger("nsqpy")
    if any(getattr(h, "_nsqpy_cli", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_GoLogFormatter())
    handler._nsqpy_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


class Shutdown:
    """Why the utility stops: a signal, its work being done, or a fatal error in a callback.

    Callbacks (message handlers, publish completions) cannot raise to the main coroutine, so
    they call :meth:`fail`; the main coroutine waits on :meth:`wait`, cleans up and returns,
    and :func:`run` then reports the error like ``log.Fatal``.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.error: str | None = None
        self.signalled = False

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        self._event.set()

    def on_signal(self) -> None:
        self.signalled = True
        self._event.set()

    def fail(self, message: str) -> None:
        if self.error is None:  # the first failure is the one worth reporting
            self.error = message
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


Main = Callable[[Shutdown], Coroutine[Any, Any, int | None]]


def run(main: Main, signals: Sequence[signal.Signals] = STOP_SIGNALS) -> int:
    """Run ``main(shutdown)`` on one loop, ``signals`` requesting a clean stop.

    Returns the exit status: ``main``'s (None means 0), or 1 after a :class:`Fatal` or a
    :meth:`Shutdown.fail`, whose message is printed the way ``log.Fatal`` prints it.
    """
    with new_loop_runner() as runner:
        try:
            shutdown, code = runner.run(_serve(main, signals))
        except Fatal as err:
            fatal_message = str(err)
        else:
            if shutdown.error is None:
                return code or 0
            fatal_message = shutdown.error
    sys.stdout.flush()
    logf(fatal_message)
    return 1


async def _serve(main: Main, signals: Sequence[signal.Signals]) -> tuple[Shutdown, int | None]:
    shutdown = Shutdown()
    loop = asyncio.get_running_loop()
    for sig in signals:
        loop.add_signal_handler(sig, shutdown.on_signal)
    try:
        code = await main(shutdown)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return shutdown, code


async def until_shutdown(shutdown: Shutdown, work: Awaitable[T]) -> T | None:
    """Await ``work`` unless shutdown comes first, in which case it is cancelled (None)."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(shutdown.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


def begin(
    fs: FlagSet, argv: Sequence[str] | None, app: str, build: Callable[[ParsedFlags], T]
) -> tuple[ParsedFlags, T] | None:
    """A consumer utility's prologue: parse the flags, answer ``--version`` (None: the app then
    exits 0), build its options and send the client library's log to stderr."""
    parsed = parse(fs, argv)
    if handle_version(parsed, app):
        return None
    opts = build(parsed)
    setup_logging()
    return parsed, opts


def until_done(work: Callable[[], Awaitable[object]], error: type[Exception]) -> Main:
    """A ``run`` main that awaits ``work()`` until it ends or shutdown comes; ``error`` is
    the utility's own failure, reported as a :class:`Fatal`."""

    async def serve(shutdown: Shutdown) -> int:
        try:
            await until_shutdown(shutdown, work())
        except error as err:
            raise Fatal(str(err)) from None
        return 0

    return serve

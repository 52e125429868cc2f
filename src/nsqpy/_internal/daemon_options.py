"""What the three daemons' command lines share: the version line, logFatal, option resolution.

Each daemon's ``options`` module declares its flags, defaults and checks; this runs NSQ's common
start-up sequence (``apps/<daemon>/main.go``): flags, ``--version``, the ``--config`` file and
its checks, then go-options resolution (command-line flag > config key > default), with Go's
messages and exit codes. The daemon's name and NSQ's version are passed in, so this module
knows no daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn, TypeVar

from nsqpy._internal.goflag import (
    ConfigError,
    FlagKind,
    FlagSet,
    ParsedFlags,
    exit_fatal,
    normalise_config_value,
    parse_command_line,
)
from nsqpy._version import __version__

OptionsT = TypeVar("OptionsT")


def version_line(daemon: str, nsq_version: str) -> str:
    """``<daemon> --version``'s output (and the daemon's first log line)."""
    return f"{daemon} v{nsq_version} (built w/nsqpy-{__version__})"


def log_prefix(daemon: str) -> str:
    """The daemon's default ``--log-prefix``, also what its fatal start-up lines carry."""
    return f"[{daemon}] "


def log_fatal(daemon: str, message: str) -> NoReturn:
    """apps/<daemon>'s logFatal: the daemon's prefix, microseconds, FATAL level, exit 1."""
    exit_fatal(f"FATAL: {message}", prefix=log_prefix(daemon), micros=True)


def add_log_flags(
    fs: FlagSet,
    *,
    level: str,
    level_parser: Callable[[str], str],
    level_text: str,
    prefix: str,
) -> None:
    """``--log-level``, ``--log-prefix`` and the deprecated ``--verbose``, as every daemon has."""
    fs.add_value(
        "log-level",
        level,
        "set log verbosity: debug, info, warn, error, or fatal",
        parser=lambda text, _current: level_parser(text),
        coerce_as=FlagKind.STRING,
        default_text=level_text,
    )
    fs.add_string("log-prefix", prefix, "log message prefix")
    fs.add_bool("verbose", False, "[deprecated] has no effect, use --log-level", cfg=None)


def check_config(
    cfg: Mapping[str, object],
    checks: Mapping[str, Callable[[str], object]],
    error: type[Exception],
) -> dict[str, object]:
    """The config file's values checked (and normalised) by ``checks``, key by key in order;
    ``error("failed parsing <key> <value>")`` on the first bad one."""
    out = dict(cfg)
    try:
        for key, parse in checks.items():
            normalise_config_value(out, key, parse)
    except ValueError as err:
        raise error(str(err)) from None
    return out


def resolve_into(
    opts: OptionsT,
    fs: FlagSet,
    parsed: ParsedFlags,
    cfg: Mapping[str, object],
    field_of: Mapping[str, str] | None = None,
) -> OptionsT:
    """Fill ``opts``: command-line flag > config key > default (``field_of`` names the fields
    whose config key differs). Raises ConfigError."""
    rename = field_of or {}
    for key, value in fs.resolve(parsed, cfg).items():
        setattr(opts, rename.get(key, key), value)
    return opts


def parse_daemon_args(
    fs: FlagSet,
    argv: Sequence[str],
    *,
    daemon: str,
    version: str,
    validate_config: Callable[[dict[str, object]], dict[str, object]],
    resolve: Callable[[FlagSet, ParsedFlags, Mapping[str, object]], OptionsT],
) -> OptionsT:
    """A daemon's command line (without argv[0]) into options, exiting as the daemon does:
    usage errors exit 2, ``--help``/``--version`` exit 0, a bad config file or value exit 1."""
    parsed, cfg = parse_command_line(
        fs,
        argv,
        version=version,
        validate_config=validate_config,
        fatal=lambda message: log_fatal(daemon, message),
    )
    try:
        return resolve(fs, parsed, cfg)
    except ConfigError as err:
        exit_fatal(str(err))  # go-options uses the standard logger: no prefix, no micros


def origin_flag(text: str, current: object) -> object:
    """``--http-allowed-origin``'s parser, imported when the flag is given: the origin module
    brings in aiohttp, which ``--version`` and the options alone do not need."""
    from nsqpy._internal.origin import origin_flag as parse

    return parse(text, current)


def add_allowed_origin_flag(fs: FlagSet, origins: list[str], what: str) -> None:
    """nsqpy's ``--http-allowed-origin`` (config key ``http_allowed_origins``): web origins
    whose pages may send ``what`` (other origins' pages get 403)."""
    fs.add_value(
        "http-allowed-origin",
        list(origins),
        f"(nsqpy) a web origin (scheme://host[:port], or * for all) whose pages may {what}; "
        "requests from other origins' pages are refused (may be given multiple times or comma "
        "separated)",
        parser=origin_flag,
        coerce_as=FlagKind.STRING_ARRAY,
        cfg="http_allowed_origins",
    )

"""nsqlookupd's options: defaults, command line and config file (NSQ v1.3.0).

``NsqlookupdOptions()`` holds the defaults of NSQ's ``nsqlookupd.NewOptions()``;
``parse_nsqlookupd_args`` reproduces ``apps/nsqlookupd`` start-up (flags → ``--version`` →
TOML config → ``log_level`` check → go-options resolution) with Go's messages and exit
codes. Fields are named by their config key; durations are int nanoseconds.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn

from nsqpy._internal.daemon_options import (
    add_allowed_origin_flag,
    add_log_flags,
    check_config,
    log_fatal,
    log_prefix,
    parse_daemon_args,
    resolve_into,
    version_line,
)
from nsqpy._internal.duration import SECOND
from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy._internal.logs import parse_level
from nsqpy.protocol.constants import NSQ_VERSION

FATAL_PREFIX: Final = log_prefix("nsqlookupd")


class OptionsError(ValueError):
    """An invalid nsqlookupd option; the message is nsqlookupd's own wording."""


#: Validate a log level (any case) and return its lowercase name.
parse_log_level = parse_level


@dataclass(slots=True)
class NsqlookupdOptions:
    """Every nsqlookupd v1.3.0 option, defaulting exactly as NSQ's ``NewOptions()``."""

    log_level: str = "info"
    log_prefix: str = FATAL_PREFIX
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    inactive_producer_timeout: int = 300 * SECOND
    tombstone_lifetime: int = 45 * SECOND
    #: nsqpy only: web origins whose pages may change the registrations (others: 403).
    http_allowed_origins: list[str] = field(default_factory=list)


def nsqlookupd_flag_set(defaults: NsqlookupdOptions | None = None) -> FlagSet:
    """nsqlookupd's flags, with defaults from ``defaults`` (a fresh NsqlookupdOptions if None)."""
    d = NsqlookupdOptions() if defaults is None else defaults
    fs = FlagSet("nsqlookupd")
    fs.add_string("config", "", "path to config file", cfg=None)
    fs.add_bool("version", False, "print version string", cfg=None)
    add_log_flags(
        fs, level=d.log_level, level_parser=parse_log_level, level_text="INFO", prefix=FATAL_PREFIX
    )
    fs.add_string("tcp-address", d.tcp_address, "<addr>:<port> to listen on for TCP clients")
    fs.add_string("http-address", d.http_address, "<addr>:<port> to listen on for HTTP clients")
    fs.add_string(
        "broadcast-address",
        d.broadcast_address,
        "address of this lookupd node, (default to the OS hostname)",
    )
    fs.add_duration(
        "inactive-producer-timeout",
        d.inactive_producer_timeout,
        "duration of time a producer will remain in the active list since its last ping",
    )
    fs.add_duration(
        "tombstone-lifetime",
        d.tombstone_lifetime,
        "duration of time a producer will remain tombstoned if registration remains",
    )
    add_allowed_origin_flag(fs, d.http_allowed_origins, "POST to the HTTP API")
    return fs


def validate_config(cfg: Mapping[str, object]) -> dict[str, object]:
    """nsqlookupd's only config-file check: ``log_level`` (normalised to lowercase)."""
    return check_config(cfg, {"log_level": parse_log_level}, OptionsError)


def resolve_options(
    fs: FlagSet, parsed: ParsedFlags, cfg: Mapping[str, object]
) -> NsqlookupdOptions:
    """Command-line flag > config key > default. Raises ConfigError."""
    return resolve_into(NsqlookupdOptions(), fs, parsed, cfg)


def version_string() -> str:
    """``nsqlookupd --version`` output."""
    return version_line("nsqlookupd", NSQ_VERSION)


def fatal(message: str) -> NoReturn:
    """apps/nsqlookupd's logFatal: fixed prefix, microseconds, FATAL level, exit status 1."""
    log_fatal("nsqlookupd", message)


def parse_nsqlookupd_args(argv: Sequence[str]) -> NsqlookupdOptions:
    """nsqlookupd's command line (without argv[0]) into options, exiting as nsqlookupd does:
    usage errors exit 2, ``--help``/``--version`` exit 0, bad values exit 1."""
    return parse_daemon_args(
        nsqlookupd_flag_set(),
        argv,
        daemon="nsqlookupd",
        version=version_string(),
        validate_config=validate_config,
        resolve=resolve_options,
    )

"""nsqd's options: defaults, command line, config file and validation (NSQ v1.3.0).

``NsqdOptions()`` holds exactly the defaults of NSQ's ``NewOptions()``; ``parse_nsqd_args``
reproduces nsqd's startup sequence (flags → ``--version`` → TOML config → config checks →
go-options resolution → option validation) with Go's messages and exit codes. Fields are named
by their config key (``id`` is ``node_id``); durations are int nanoseconds.
"""

from __future__ import annotations

import hashlib
import socket
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

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
from nsqpy._internal.duration import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    SECOND,
    parse_go_duration,
)
from nsqpy._internal.goflag import (
    FlagKind,
    FlagSet,
    ParsedFlags,
    ValueParser,
    format_go_float,
    go_quote,
    parse_go_bool,
)
from nsqpy._internal.logs import parse_level
from nsqpy.nsqd.core import policy
from nsqpy.nsqd.observe.alerts import AGE, DEPTH, Kind, parse_rule
from nsqpy.protocol.constants import NSQ_VERSION

# Options without a flag: fixed in NSQ, kept as fields too so tests can shorten them.
CLIENT_TIMEOUT_NS: Final = 60 * SECOND  # default heartbeat interval is half of this
QUEUE_SCAN_INTERVAL_NS: Final = 100 * MILLISECOND
QUEUE_SCAN_REFRESH_INTERVAL_NS: Final = 5 * SECOND
QUEUE_SCAN_DIRTY_PERCENT: Final = 0.25

TLS_NOT_REQUIRED: Final = 0
TLS_REQUIRED_EXCEPT_HTTP: Final = 1
TLS_REQUIRED: Final = 2

#: ``--tls-min-version`` names and the TLS protocol numbers Go stores for them.
TLS_VERSIONS: Final[Mapping[str, int]] = {
    "tls1.0": 0x0301,
    "tls1.1": 0x0302,
    "tls1.2": 0x0303,
    "tls1.3": 0x0304,
}

#: Log level names in NSQ's order; ``GET /config/log_level`` reports the 1-based index.
LOG_LEVELS: Final = ("debug", "info", "warn", "error", "fatal")
# Go's LogLevel.String(), shown as the flag's default in --help.
_LOG_LEVEL_DISPLAY: Final = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING"}


class OptionsError(ValueError):
    """An invalid nsqd option; the message is nsqd's own wording."""


# ---------------------------------------------------------------------------------------------
# Value parsers shared by flags, config files and the HTTP API
# ---------------------------------------------------------------------------------------------


#: Validate a log level (any case) and return its lowercase name.
parse_log_level = parse_level


def log_level_number(name: str) -> int:
    """NSQ's numeric level: debug=1, info=2, warn=3, error=4, fatal=5."""
    return LOG_LEVELS.index(parse_log_level(name)) + 1


def parse_tls_required(text: str) -> int:
    """``--tls-required`` value: "tcp-https" → 1, else a Go bool (true → 2, false → 0)."""
    lowered = text.lower()
    if lowered == "tcp-https":
        return TLS_REQUIRED_EXCEPT_HTTP
    return TLS_REQUIRED if parse_go_bool(lowered) else TLS_NOT_REQUIRED


def parse_tls_min_version(text: str) -> int | None:
    """``--tls-min-version`` value → TLS version number; "" means "leave unchanged" (None)."""
    lowered = text.lower()
    if not lowered:
        return None
    version = TLS_VERSIONS.get(lowered)
    if version is None:
        raise ValueError(f"unknown tlsVersionOption {go_quote(lowered)}")
    return version


def default_node_id(hostname: str | None = None) -> int:
    """NSQ's default node id: CRC-32 (IEEE) of the MD5 digest of the hostname, mod 1024."""
    name = socket.gethostname() if hostname is None else hostname
    return zlib.crc32(hashlib.md5(name.encode()).digest()) % 1024


# ---------------------------------------------------------------------------------------------
# The options
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class NsqdOptions:
    """Every nsqd v1.3.0 option, defaulting exactly as NSQ's ``NewOptions()``."""

    # basic
    node_id: int = field(default_factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = log_prefix("nsqd")
    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    nsqlookupd_tcp_addresses: list[str] = field(default_factory=list)
    auth_http_addresses: list[str] = field(default_factory=list)
    #: nsqpy only (NSQ #1183): the HTTP API's publishing and admin routes need a Bearer
    #: secret that the auth server allows for the topic.
    http_auth_required: bool = False
    #: nsqpy only: web origins whose pages may change state over the HTTP API (others: 403).
    http_allowed_origins: list[str] = field(default_factory=list)
    http_client_connect_timeout: int = 2 * SECOND
    http_client_request_timeout: int = 5 * SECOND
    # disk queue
    data_path: str = ""
    mem_queue_size: int = 10_000
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout: int = 2 * SECOND
    #: nsqpy only: OK a publish once it is fsynced, keep each message on disk until FIN.
    durable: bool = False
    #: nsqpy only, with --durable: how long a commit may wait for publishers due back.
    commit_linger: int = 600 * MICROSECOND
    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20
    # messages and commands
    msg_timeout: int = 60 * SECOND
    max_msg_timeout: int = 15 * MINUTE
    max_msg_size: int = 1024 * 1024
    max_req_timeout: int = 1 * HOUR
    #: nsqpy only (NSQ #1499): the cap on DPUB / ``/pub?defer=``; None: --max-req-timeout's.
    max_defer_timeout: int | None = None
    max_body_size: int = 5 * 1024 * 1024
    #: nsqpy only (NSQ #974, #1396): node-wide dead-letter and TTL defaults.
    max_attempts: int = 0
    message_ttl: int = 0
    dead_letter_suffix: str = policy.DEFAULT_SUFFIX
    #: nsqpy only (issue 22): how long a sealed lease may stay unfinished by default.
    lease_ttl: int = 60 * SECOND
    # client-overridable limits
    max_heartbeat_interval: int = 60 * SECOND
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 64 * 1024
    max_output_buffer_timeout: int = 30 * SECOND
    min_output_buffer_timeout: int = 25 * MILLISECOND
    output_buffer_timeout: int = 250 * MILLISECOND
    max_channel_consumers: int = 0
    # statsd
    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval: int = 60 * SECOND
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False
    # end-to-end latency
    e2e_processing_latency_percentiles: list[float] = field(default_factory=list)
    e2e_processing_latency_window_time: int = 10 * MINUTE
    #: nsqpy only (NSQ #1175): backlog alert rules, ``[TOPIC[:CHANNEL]=]N`` / ``=DURATION``.
    alert_depths: list[str] = field(default_factory=list)
    alert_ages: list[str] = field(default_factory=list)
    alert_check_interval: int = 1 * SECOND
    # TLS
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: int = TLS_NOT_REQUIRED
    tls_min_version: int = TLS_VERSIONS["tls1.0"]
    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True
    # no flag and no config key (not reported by /config)
    queue_scan_interval: int = QUEUE_SCAN_INTERVAL_NS
    queue_scan_refresh_interval: int = QUEUE_SCAN_REFRESH_INTERVAL_NS
    queue_scan_dirty_percent: float = QUEUE_SCAN_DIRTY_PERCENT
    client_timeout: int = CLIENT_TIMEOUT_NS

    @property
    def defer_limit(self) -> int:
        """The longest deferral DPUB and ``/pub?defer=`` accept, in ns."""
        return self.max_req_timeout if self.max_defer_timeout is None else self.max_defer_timeout

    def defer_allowed(self, defer_ns: int) -> bool:
        """Whether DPUB or ``/pub?defer=`` may defer a message this long (else nsqd's range
        error): ``--max-defer-timeout``, not ``--max-req-timeout``, is the bound."""
        return 0 <= defer_ns <= self.defer_limit

    def req_delay(self, delay_ns: int) -> int:
        """A REQ's delay as nsqd applies it: clamped into 0..``--max-req-timeout``."""
        return min(max(delay_ns, 0), self.max_req_timeout)

    @property
    def policy_defaults(self) -> policy.NodeDefaults:
        return policy.NodeDefaults(self.max_attempts, self.message_ttl, self.dead_letter_suffix)


#: Config keys (= ``/config/:opt`` names) whose field name differs from the key.
_FIELD_BY_CFG: Final = {"id": "node_id"}


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _tls_required_flag(text: str, _current: object) -> object:
    return parse_tls_required(text)


def _tls_min_version_flag(text: str, current: object) -> object:
    version = parse_tls_min_version(text)
    return current if version is None else version


def _tls_version_name(version: int) -> str:
    names = {number: name for name, number in TLS_VERSIONS.items()}
    return names.get(version, str(version))


def _add_basic_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_bool("version", False, "print version string", cfg=None)
    fs.add_string("config", "", "path to config file", cfg=None)
    add_log_flags(
        fs,
        level=d.log_level,
        level_parser=parse_log_level,
        level_text=_LOG_LEVEL_DISPLAY.get(d.log_level, d.log_level.upper()),
        prefix=d.log_prefix,
    )
    fs.add_int(
        "node-id",
        d.node_id,
        "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)",
        cfg="id",
    )
    fs.add_bool("worker-id", False, "[deprecated] use --node-id", cfg=None)
    fs.add_string("https-address", d.https_address, "<addr>:<port> to listen on for HTTPS clients")
    fs.add_string(
        "http-address",
        d.http_address,
        "address to listen on for HTTP clients "
        "(<addr>:<port> for TCP/IP or <path> for unix socket)",
    )
    fs.add_string(
        "tcp-address",
        d.tcp_address,
        "address to listen on for TCP clients (<addr>:<port> for TCP/IP or <path> for unix socket)",
    )
    fs.add_string_array(
        "auth-http-address",
        "<addr>:<port> or a full url to query auth server (may be given multiple times)",
        cfg="auth_http_addresses",
    )
    fs.add_bool(
        "http-auth-required",
        d.http_auth_required,
        "(nsqpy) require an 'Authorization: Bearer <secret>' that the auth server allows for "
        "the topic on the HTTP API's /pub, /mpub, /topic/* and /channel/* routes",
    )
    add_allowed_origin_flag(fs, d.http_allowed_origins, "POST to the HTTP API")
    fs.add_string(
        "broadcast-address",
        d.broadcast_address,
        "address that will be registered with lookupd (defaults to the OS hostname)",
    )
    fs.add_int(
        "broadcast-tcp-port",
        d.broadcast_tcp_port,
        "TCP port that will be registered with lookupd "
        "(defaults to the TCP port that this nsqd is listening on)",
    )
    fs.add_int(
        "broadcast-http-port",
        d.broadcast_http_port,
        "HTTP port that will be registered with lookupd "
        "(defaults to the HTTP port that this nsqd is listening on)",
    )
    fs.add_string_array(
        "lookupd-tcp-address",
        "lookupd TCP address (may be given multiple times)",
        cfg="nsqlookupd_tcp_addresses",
    )
    fs.add_duration(
        "http-client-connect-timeout", d.http_client_connect_timeout, "timeout for HTTP connect"
    )
    fs.add_duration(
        "http-client-request-timeout", d.http_client_request_timeout, "timeout for HTTP request"
    )


def _add_queue_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_string("data-path", d.data_path, "path to store disk-backed messages")
    fs.add_int(
        "mem-queue-size",
        d.mem_queue_size,
        "number of messages to keep in memory (per topic/channel)",
    )
    fs.add_int(
        "max-bytes-per-file",
        d.max_bytes_per_file,
        "number of bytes per diskqueue file before rolling",
    )
    fs.add_int("sync-every", d.sync_every, "number of messages per diskqueue fsync")
    fs.add_duration("sync-timeout", d.sync_timeout, "duration of time per diskqueue fsync")
    fs.add_bool(
        "durable",
        d.durable,
        "(nsqpy) answer PUB/MPUB/DPUB only once the messages are fsynced (group commit) and "
        "keep every message on disk until it is FINished, so a crash loses no acknowledged "
        "message",
    )
    fs.add_duration(
        "commit-linger",
        d.commit_linger,
        "(nsqpy) with --durable: how long a group commit may wait for publishers that were "
        "just answered to publish again, so that one fsync covers them (0 to never wait)",
    )
    fs.add_int(
        "queue-scan-worker-pool-max",
        d.queue_scan_worker_pool_max,
        "max concurrency for checking in-flight and deferred message timeouts",
    )
    fs.add_int(
        "queue-scan-selection-count",
        d.queue_scan_selection_count,
        "number of channels to check per cycle (every 100ms) for in-flight and deferred timeouts",
    )


def _add_message_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_duration(
        "msg-timeout", d.msg_timeout, "default duration to wait before auto-requeing a message"
    )
    fs.add_duration(
        "max-msg-timeout", d.max_msg_timeout, "maximum duration before a message will timeout"
    )
    fs.add_int("max-msg-size", d.max_msg_size, "maximum size of a single message in bytes")
    fs.add_duration("max-req-timeout", d.max_req_timeout, "maximum requeuing timeout for a message")
    fs.add_value(
        "max-defer-timeout",
        d.max_defer_timeout,
        "(nsqpy) maximum `duration` a DPUB or /pub?defer= may defer a message "
        "(default: the --max-req-timeout value)",
        parser=_duration_flag,
        coerce_as=FlagKind.DURATION,
    )
    fs.add_int("max-body-size", d.max_body_size, "maximum size of a single command body")


def _duration_flag(text: str, _current: object) -> object:
    try:
        return parse_go_duration(text)
    except ValueError:
        raise ValueError("parse error") from None


def _add_dead_letter_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_int(
        "max-attempts",
        d.max_attempts,
        "(nsqpy) a message that would be delivered for the (N+1)th time goes to its channel's "
        "dead-letter topic instead (0 = never, as nsqd; per topic/channel: /topic/config, "
        "/channel/config)",
    )
    fs.add_duration(
        "message-ttl",
        d.message_ttl,
        "(nsqpy) a message older than this is not delivered: it goes to the dead-letter topic "
        "when its channel has one, else it is dropped (0 = never)",
    )
    fs.add_string(
        "dead-letter-suffix",
        d.dead_letter_suffix,
        "(nsqpy) a channel's dead-letter topic is <topic><suffix> unless set per topic/channel",
    )
    fs.add_duration(
        "lease-ttl",
        d.lease_ttl,
        "(nsqpy) default time a sealed lease has to be finished before its messages are "
        "requeued (per request: /channel/lease?ttl=; at most --max-msg-timeout)",
    )


def _add_client_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_duration(
        "max-heartbeat-interval",
        d.max_heartbeat_interval,
        "maximum client configurable duration of time between client heartbeats",
    )
    fs.add_int("max-rdy-count", d.max_rdy_count, "maximum RDY count for a client")
    fs.add_int(
        "max-output-buffer-size",
        d.max_output_buffer_size,
        "maximum client configurable size (in bytes) for a client output buffer",
    )
    fs.add_duration(
        "max-output-buffer-timeout",
        d.max_output_buffer_timeout,
        "maximum client configurable duration of time between flushing to a client",
    )
    fs.add_duration(
        "min-output-buffer-timeout",
        d.min_output_buffer_timeout,
        "minimum client configurable duration of time between flushing to a client",
    )
    fs.add_duration(
        "output-buffer-timeout",
        d.output_buffer_timeout,
        "default duration of time between flushing data to clients",
    )
    fs.add_int(
        "max-channel-consumers",
        d.max_channel_consumers,
        "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)",
    )


def _add_statsd_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_string(
        "statsd-address",
        d.statsd_address,
        "UDP <addr>:<port> of a statsd daemon for pushing stats",
    )
    fs.add_duration("statsd-interval", d.statsd_interval, "duration between pushing to statsd")
    fs.add_bool(
        "statsd-mem-stats", d.statsd_mem_stats, "toggle sending memory and GC stats to statsd"
    )
    fs.add_string(
        "statsd-prefix",
        d.statsd_prefix,
        "prefix used for keys sent to statsd (%s for host replacement)",
    )
    fs.add_int(
        "statsd-udp-packet-size",
        d.statsd_udp_packet_size,
        "the size in bytes of statsd UDP packets",
    )
    fs.add_bool(
        "statsd-exclude-ephemeral",
        d.statsd_exclude_ephemeral,
        "Skip ephemeral topics and channels when sending stats to statsd",
    )


def _add_e2e_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_float_array(
        "e2e-processing-latency-percentile",
        "message processing time percentiles (as float (0, 1.0]) to track (can be specified "
        "multiple times or comma separated '1.0,0.99,0.95', default none)",
        cfg="e2e_processing_latency_percentiles",
    )
    fs.add_duration(
        "e2e-processing-latency-window-time",
        d.e2e_processing_latency_window_time,
        "calculate end to end latency quantiles for this duration of time "
        "(ie: 60s would only show quantile calculations from the past 60 seconds)",
    )


def _alert_flag(kind: Kind) -> ValueParser:
    """A repeatable rule flag: each value is checked as it is given, then appended."""

    def parse(text: str, current: object) -> object:
        parse_rule(text, kind)
        return [*(current if isinstance(current, list) else []), text]

    return parse


def _add_alert_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_value(
        "alert-depth",
        list(d.alert_depths),
        "(nsqpy) raise a backlog alert when a queue's depth reaches N, written "
        "`[TOPIC[:CHANNEL]=]N` (a bare N: every topic and channel; * globs; the most specific "
        "rule wins; N<=0 disables; may be given multiple times)",
        parser=_alert_flag(DEPTH),
        coerce_as=FlagKind.STRING_ARRAY,
        cfg="alert_depths",
    )
    fs.add_value(
        "alert-age",
        list(d.alert_ages),
        "(nsqpy) raise a backlog alert when a queue's oldest message is this old, written "
        "`[TOPIC[:CHANNEL]=]DURATION` (same rules as --alert-depth)",
        parser=_alert_flag(AGE),
        coerce_as=FlagKind.STRING_ARRAY,
        cfg="alert_ages",
    )
    fs.add_duration(
        "alert-check-interval",
        d.alert_check_interval,
        "(nsqpy) how often queues are compared with the --alert-depth/--alert-age thresholds",
    )


def _add_tls_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_string("tls-cert", d.tls_cert, "path to certificate file")
    fs.add_string("tls-key", d.tls_key, "path to key file")
    fs.add_string(
        "tls-client-auth-policy",
        d.tls_client_auth_policy,
        "client certificate auth policy ('require' or 'require-verify')",
    )
    fs.add_string("tls-root-ca-file", d.tls_root_ca_file, "path to certificate authority file")
    fs.add_value(
        "tls-required",
        d.tls_required,
        "require TLS for client connections (true, false, tcp-https)",
        parser=_tls_required_flag,
        coerce_as=FlagKind.INT,
        bool_style=True,
        default_text=str(d.tls_required) if d.tls_required else None,
    )
    fs.add_value(
        "tls-min-version",
        d.tls_min_version,
        "minimum SSL/TLS version acceptable ('ssl3.0', 'tls1.0', 'tls1.1', 'tls1.2' or 'tls1.3')",
        parser=_tls_min_version_flag,
        coerce_as=FlagKind.INT,
        default_text=_tls_version_name(d.tls_min_version) if d.tls_min_version else None,
    )


def _add_compression_flags(fs: FlagSet, d: NsqdOptions) -> None:
    fs.add_bool("deflate", d.deflate, "enable deflate feature negotiation (client compression)")
    fs.add_int(
        "max-deflate-level",
        d.max_deflate_level,
        "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)",
    )
    fs.add_bool("snappy", d.snappy, "enable snappy feature negotiation (client compression)")


def nsqd_flag_set(defaults: NsqdOptions | None = None) -> FlagSet:
    """nsqd's flags, with defaults taken from ``defaults`` (a fresh NsqdOptions if None)."""
    d = NsqdOptions() if defaults is None else defaults
    fs = FlagSet("nsqd")
    for add in (
        _add_basic_flags,
        _add_queue_flags,
        _add_message_flags,
        _add_dead_letter_flags,
        _add_client_flags,
        _add_statsd_flags,
        _add_e2e_flags,
        _add_alert_flags,
        _add_tls_flags,
        _add_compression_flags,
    ):
        add(fs, d)
    return fs


#: Every config-file key, which is also every name ``GET /config/:opt`` accepts.
CFG_NAMES: Final[frozenset[str]] = frozenset(
    key
    for flag in nsqd_flag_set(NsqdOptions(node_id=0, broadcast_address="")).flags
    if (key := flag.config_key) is not None
)


# ---------------------------------------------------------------------------------------------
# Config file
# ---------------------------------------------------------------------------------------------


def validate_config(cfg: Mapping[str, object]) -> dict[str, object]:
    """nsqd's special config-file checks; returns the cfg with those values normalised.

    tls_required becomes "0"/"1"/"2", tls_min_version a version number as text (an empty
    value is dropped), log_level a lowercase name. OptionsError: ``failed parsing <key> <v>``.
    """
    checks: dict[str, Callable[[str], object]] = {
        "tls_required": lambda t: str(parse_tls_required(t)),
        "tls_min_version": parse_tls_min_version,
        "log_level": parse_log_level,
    }
    out = check_config(cfg, checks, OptionsError)
    if "tls_min_version" in out:
        if out["tls_min_version"] is None:
            del out["tls_min_version"]
        else:
            out["tls_min_version"] = str(out["tls_min_version"])
    return out


def resolve_options(fs: FlagSet, parsed: ParsedFlags, cfg: Mapping[str, object]) -> NsqdOptions:
    """Build NsqdOptions: command-line flag > config key > default. Raises ConfigError."""
    return resolve_into(NsqdOptions(), fs, parsed, cfg, _FIELD_BY_CFG)


# ---------------------------------------------------------------------------------------------
# Validation and startup
# ---------------------------------------------------------------------------------------------


def validate(opts: NsqdOptions) -> None:
    """The option checks nsqd makes at startup, in NSQ's order. Raises OptionsError.

    A non-empty ``tls_client_auth_policy`` upgrades ``tls_required`` to 2 (in place).
    """
    if not 1 <= opts.max_deflate_level <= 9:
        raise OptionsError("--max-deflate-level must be [1,9]")
    if not 0 <= opts.node_id < 1024:
        raise OptionsError("--node-id must be [0,1024)")
    if opts.tls_client_auth_policy and opts.tls_required == TLS_NOT_REQUIRED:
        opts.tls_required = TLS_REQUIRED
    # NSQ only lacks a TLS config when neither file is given; one without the other fails
    # later, while loading the key pair.
    if not opts.tls_cert and not opts.tls_key and opts.tls_required != TLS_NOT_REQUIRED:
        raise OptionsError("cannot require TLS client connections without TLS key and cert")
    for percentile in opts.e2e_processing_latency_percentiles:
        if percentile <= 0 or percentile > 1:
            raise OptionsError(
                f"invalid E2E processing latency percentile: {format_go_float(percentile)}"
            )
    validate_alerts(opts)
    validate_dead_letters(opts)
    if opts.http_allowed_origins:
        from nsqpy._internal.origin import check_allowed_origins

        try:
            check_allowed_origins(opts.http_allowed_origins)
        except ValueError as err:
            raise OptionsError(str(err)) from None


def validate_dead_letters(opts: NsqdOptions) -> None:
    """nsqpy's own options: the defer limit, dead-letter and TTL defaults."""
    if opts.max_defer_timeout is not None and opts.max_defer_timeout < 0:
        raise OptionsError("--max-defer-timeout must be >= 0")
    if not 0 <= opts.max_attempts <= policy.MAX_ATTEMPTS_LIMIT:
        raise OptionsError(f"--max-attempts must be [0,{policy.MAX_ATTEMPTS_LIMIT}]")
    if opts.message_ttl < 0:
        raise OptionsError("--message-ttl must be >= 0")
    if opts.lease_ttl <= 0:
        raise OptionsError("--lease-ttl must be > 0")
    if opts.commit_linger < 0:
        raise OptionsError("--commit-linger must be >= 0")
    try:
        policy.check_suffix(opts.dead_letter_suffix)
    except ValueError as err:
        raise OptionsError(str(err)) from None


def validate_alerts(opts: NsqdOptions) -> None:
    """The alert rules (a config file's are not checked while flags are parsed)."""
    for flag, kind, values in (
        ("--alert-depth", DEPTH, opts.alert_depths),
        ("--alert-age", AGE, opts.alert_ages),
    ):
        for text in values:
            try:
                parse_rule(text, kind)
            except ValueError as err:
                raise OptionsError(f"invalid {flag} {go_quote(text)} - {err}") from None
    if opts.alert_check_interval <= 0 and (opts.alert_depths or opts.alert_ages):
        raise OptionsError("--alert-check-interval must be > 0")


def version_string() -> str:
    """``nsqd --version`` output."""
    return version_line("nsqd", NSQ_VERSION)


def parse_nsqd_args(argv: Sequence[str]) -> NsqdOptions:
    """Turn nsqd's command line (without argv[0]) into validated options, exiting like nsqd
    on errors: usage errors exit 2, ``--help``/``--version`` exit 0, bad values exit 1."""
    opts = parse_daemon_args(
        nsqd_flag_set(),
        argv,
        daemon="nsqd",
        version=version_string(),
        validate_config=validate_config,
        resolve=resolve_options,
    )
    try:
        validate(opts)
    except OptionsError as err:
        log_fatal("nsqd", f"failed to instantiate nsqd - {err}")
    return opts


# ---------------------------------------------------------------------------------------------
# HTTP /config/:opt
# ---------------------------------------------------------------------------------------------


def config_value(opts: NsqdOptions, cfg_name: str) -> object:
    """The value ``GET /config/<cfg_name>`` reports, typed as Go would (log_level as 1..5,
    durations as int ns, lists copied). KeyError for names nsqd does not expose."""
    if cfg_name not in CFG_NAMES:
        raise KeyError(cfg_name)
    value: object = getattr(opts, _FIELD_BY_CFG.get(cfg_name, cfg_name))
    if cfg_name == "max_defer_timeout":
        return opts.defer_limit
    if cfg_name == "log_level":
        return log_level_number(str(value))
    if isinstance(value, list):
        return list(value)
    return value

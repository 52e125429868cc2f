"""nsqadmin's options: defaults, command line, config file and start-up checks (NSQ v1.3.0).

``NsqadminOptions()`` holds the defaults of NSQ's ``nsqadmin.NewOptions()`` plus nsqpy's two
sampler options; ``parse_nsqadmin_args`` reproduces ``apps/nsqadmin`` start-up (flags →
``--version`` → TOML config → ``log_level`` check → go-options resolution). ``validate`` is
the part of Go's ``nsqadmin.New`` that checks options, with its messages, in its order.
Fields are named by their config key; durations are int nanoseconds.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Final, NoReturn
from urllib.parse import urlsplit

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
from nsqpy._internal.duration import MINUTE, SECOND
from nsqpy._internal.goflag import FlagSet, ParsedFlags, go_quote
from nsqpy._internal.http_api import clean_path
from nsqpy._internal.logs import LEVELS, parse_level
from nsqpy._internal.origin import check_allowed_origins
from nsqpy.protocol.constants import NSQ_VERSION

FATAL_PREFIX: Final = log_prefix("nsqadmin")
_LOG_LEVEL_NAMES: Final = tuple(LEVELS)  # debug, info, warn, error, fatal: NSQ's 1..5


class OptionsError(ValueError):
    """An invalid nsqadmin option; the message is nsqadmin's own wording."""


@dataclass(slots=True)
class NsqadminOptions:
    """Every nsqadmin v1.3.0 option, defaulting exactly as NSQ's ``NewOptions()``."""

    log_level: str = "info"
    log_prefix: str = FATAL_PREFIX
    http_address: str = "0.0.0.0:4171"
    base_path: str = "/"
    dev_static_dir: str = ""
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_prefix: str = "nsq.%s"
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_interval: int = 60 * SECOND
    nsqlookupd_http_addresses: list[str] = field(default_factory=list)
    nsqd_http_addresses: list[str] = field(default_factory=list)
    http_client_connect_timeout: int = 2 * SECOND
    http_client_request_timeout: int = 5 * SECOND
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    notification_http_endpoint: str = ""
    acl_http_header: str = "X-Forwarded-User"
    admin_users: list[str] = field(default_factory=list)
    #: nsqpy only: how often every nsqd's /stats is sampled for the built-in charts.
    sample_interval: int = 2 * SECOND
    #: nsqpy only: how much sampled history is kept in memory.
    history_duration: int = 10 * MINUTE
    #: nsqpy only: web origins besides nsqadmin's own whose pages may use its actions.
    http_allowed_origins: list[str] = field(default_factory=list)


def _add_basic_flags(fs: FlagSet, d: NsqadminOptions) -> None:
    fs.add_string("config", "", "path to config file", cfg=None)
    fs.add_bool("version", False, "print version string", cfg=None)
    add_log_flags(
        fs, level=d.log_level, level_parser=parse_level, level_text="INFO", prefix=FATAL_PREFIX
    )
    fs.add_string("http-address", d.http_address, "<addr>:<port> to listen on for HTTP clients")
    fs.add_string("base-path", d.base_path, "URL base path")
    add_allowed_origin_flag(
        fs, d.http_allowed_origins, "use the admin actions besides nsqadmin's own"
    )
    fs.add_string("dev-static-dir", d.dev_static_dir, "(development use only)")


_STATSD_FORMAT_HELP: Final = (
    "The {} stats key formatting applied by the implementation of statsd. "
    "If no formatting is desired, set this to an empty string."
)


def _add_graphite_flags(fs: FlagSet, d: NsqadminOptions) -> None:
    fs.add_string("graphite-url", d.graphite_url, "graphite HTTP address")
    fs.add_bool("proxy-graphite", False, "proxy HTTP requests to graphite")
    fs.add_string(
        "statsd-counter-format", d.statsd_counter_format, _STATSD_FORMAT_HELP.format("counter")
    )
    fs.add_string("statsd-gauge-format", d.statsd_gauge_format, _STATSD_FORMAT_HELP.format("gauge"))
    fs.add_string(
        "statsd-prefix",
        d.statsd_prefix,
        "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
    )
    fs.add_duration(
        "statsd-interval",
        d.statsd_interval,
        "time interval nsqd is configured to push to statsd (must match nsqd)",
    )


def _add_client_flags(fs: FlagSet, d: NsqadminOptions) -> None:
    fs.add_string(
        "notification-http-endpoint",
        "",
        "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent",
    )
    fs.add_duration(
        "http-client-connect-timeout", d.http_client_connect_timeout, "timeout for HTTP connect"
    )
    fs.add_duration(
        "http-client-request-timeout", d.http_client_request_timeout, "timeout for HTTP request"
    )
    fs.add_bool(
        "http-client-tls-insecure-skip-verify",
        False,
        "configure the HTTP client to skip verification of TLS certificates",
    )
    fs.add_string("http-client-tls-root-ca-file", "", "path to CA file for the HTTP client")
    fs.add_string("http-client-tls-cert", "", "path to certificate file for the HTTP client")
    fs.add_string("http-client-tls-key", "", "path to key file for the HTTP client")


def _add_cluster_flags(fs: FlagSet, d: NsqadminOptions) -> None:
    fs.add_string(
        "allow-config-from-cidr",
        d.allow_config_from_cidr,
        "A CIDR from which to allow HTTP requests to the /config endpoint",
    )
    fs.add_string(
        "acl-http-header", d.acl_http_header, "HTTP header to check for authenticated admin users"
    )
    fs.add_string_array(
        "lookupd-http-address",
        "lookupd HTTP address (may be given multiple times)",
        cfg="nsqlookupd_http_addresses",
    )
    fs.add_string_array(
        "nsqd-http-address",
        "nsqd HTTP address (may be given multiple times)",
        cfg="nsqd_http_addresses",
    )
    fs.add_string_array(
        "admin-user",
        "admin user (may be given multiple times; if specified, only these users will be able "
        "to perform privileged actions; acl-http-header is used to determine the authenticated "
        "user)",
        cfg="admin_users",
    )


def _add_sampler_flags(fs: FlagSet, d: NsqadminOptions) -> None:
    fs.add_duration(
        "sample-interval",
        d.sample_interval,
        "how often to sample every nsqd's /stats for the built-in charts (nsqpy)",
    )
    fs.add_duration(
        "history-duration",
        d.history_duration,
        "how much sampled history to keep in memory for the built-in charts (nsqpy)",
    )


def nsqadmin_flag_set(defaults: NsqadminOptions | None = None) -> FlagSet:
    """nsqadmin's flags, with defaults from ``defaults`` (a fresh NsqadminOptions if None)."""
    d = NsqadminOptions() if defaults is None else defaults
    fs = FlagSet("nsqadmin")
    for add in (
        _add_basic_flags,
        _add_graphite_flags,
        _add_client_flags,
        _add_cluster_flags,
        _add_sampler_flags,
    ):
        add(fs, d)
    return fs


#: Every config key, which is also every name ``GET /config/:opt`` answers.
CFG_NAMES: Final[frozenset[str]] = frozenset(f.name for f in fields(NsqadminOptions))


def validate_config(cfg: Mapping[str, object]) -> dict[str, object]:
    """nsqadmin's only config-file check: ``log_level`` (normalised to lowercase)."""
    return check_config(cfg, {"log_level": parse_level}, OptionsError)


def resolve_options(fs: FlagSet, parsed: ParsedFlags, cfg: Mapping[str, object]) -> NsqadminOptions:
    """Command-line flag > config key > default. Raises ConfigError."""
    return resolve_into(NsqadminOptions(), fs, parsed, cfg)


def version_string() -> str:
    """``nsqadmin --version`` output (and its first log line)."""
    return version_line("nsqadmin", NSQ_VERSION)


def fatal(message: str) -> NoReturn:
    """apps/nsqadmin's logFatal: fixed prefix, microseconds, FATAL level, exit status 1."""
    log_fatal("nsqadmin", message)


def parse_nsqadmin_args(argv: Sequence[str]) -> NsqadminOptions:
    """nsqadmin's command line (without argv[0]) into options, exiting as nsqadmin does:
    usage errors exit 2, ``--help``/``--version`` exit 0, bad values exit 1. The checks of
    ``nsqadmin.New`` run later, in ``NSQAdmin.start`` (see ``validate``)."""
    return parse_daemon_args(
        nsqadmin_flag_set(),
        argv,
        daemon="nsqadmin",
        version=version_string(),
        validate_config=validate_config,
        resolve=resolve_options,
    )


# ---------------------------------------------------------------------------------------------
# nsqadmin.New's checks
# ---------------------------------------------------------------------------------------------


def validate(opts: NsqadminOptions) -> ssl.SSLContext | None:
    """Go's ``nsqadmin.New`` option checks, in its order; the HTTP client's TLS context
    (None: no TLS option is set, so the default one will do).

    Normalises ``base_path`` in place. Raises OptionsError with Go's message.
    """
    if not opts.nsqd_http_addresses and not opts.nsqlookupd_http_addresses:
        raise OptionsError("--nsqd-http-address or --lookupd-http-address required")
    if opts.nsqd_http_addresses and opts.nsqlookupd_http_addresses:
        raise OptionsError("use --nsqd-http-address or --lookupd-http-address not both")
    if opts.http_client_tls_cert and not opts.http_client_tls_key:
        raise OptionsError("--http-client-tls-key must be specified with --http-client-tls-cert")
    if opts.http_client_tls_key and not opts.http_client_tls_cert:
        raise OptionsError("--http-client-tls-cert must be specified with --http-client-tls-key")
    context = client_tls_context(opts)
    for flag, addresses in (
        ("--lookupd-http-address", opts.nsqlookupd_http_addresses),
        ("--nsqd-http-address", opts.nsqd_http_addresses),
    ):
        for address in addresses:
            try:
                resolve_tcp_address(address)
            except ValueError as err:
                raise OptionsError(f"failed to resolve {flag} ({address}) - {err}") from None
    if opts.proxy_graphite:
        try:
            parse_url(opts.graphite_url)
        except ValueError as err:
            raise OptionsError(
                f"failed to parse --graphite-url ({opts.graphite_url}) - {err}"
            ) from None
    if opts.allow_config_from_cidr:
        try:
            parse_cidr(opts.allow_config_from_cidr)
        except ValueError as err:
            raise OptionsError(
                f"failed to parse --allow-config-from-cidr ({opts.allow_config_from_cidr}) - {err}"
            ) from None
    if opts.sample_interval <= 0:
        raise OptionsError("--sample-interval must be positive")
    try:
        check_allowed_origins(opts.http_allowed_origins)
    except ValueError as err:
        raise OptionsError(str(err)) from None
    opts.base_path = normalize_base_path(opts.base_path)
    return context


def client_tls_context(opts: NsqadminOptions) -> ssl.SSLContext | None:
    """The TLS settings nsqadmin's HTTP client uses for https upstreams (None: defaults)."""
    if not (
        opts.http_client_tls_insecure_skip_verify
        or opts.http_client_tls_cert
        or opts.http_client_tls_root_ca_file
    ):
        return None  # loading the system CAs costs ~0.2 s; aiohttp does it if ever needed
    context = ssl.create_default_context()
    if opts.http_client_tls_insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = opts.http_client_tls_cert, opts.http_client_tls_key
    if cert and key:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as err:
            raise OptionsError(f"failed to LoadX509KeyPair {cert}, {key} - {err}") from None
    ca_file = opts.http_client_tls_root_ca_file
    if ca_file:
        try:
            with open(ca_file, encoding="latin-1") as handle:
                pem = handle.read()
        except OSError as err:
            raise OptionsError(f"failed to read TLS root CA file {ca_file} - {err}") from None
        try:
            context.load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError):
            raise OptionsError(f"failed to AppendCertsFromPEM {ca_file}") from None
    return context


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``; ValueError with its wording."""
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ValueError(f"address {address}: missing ']' in address")
        host, rest = address[1:end], address[end + 1 :]
        if not rest.startswith(":"):
            raise ValueError(f"address {address}: missing port in address")
        return host, rest[1:]
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if ":" in host:
        raise ValueError(f"address {address}: too many colons in address")
    return host, port


def resolve_tcp_address(address: str) -> None:
    """Go's ``net.ResolveTCPAddr("tcp", address)``: ValueError when it would fail."""
    host, port = split_host_port(address)
    if not port.isdigit():
        try:
            socket.getservbyname(port, "tcp")
        except OSError:
            raise ValueError(f"lookup tcp/{port}: unknown port") from None
    elif int(port) > 65535:
        raise ValueError(f"address {address}: invalid port")
    if not host:
        return
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            raise ValueError(f"lookup {host}: no such host") from None


_CONTROL: Final = frozenset(chr(c) for c in (*range(0x20), 0x7F))
_SCHEME_CHARS: Final = frozenset(string.ascii_letters + string.digits + "+-.")


def parse_url(text: str) -> None:
    """The failures of Go's ``url.Parse`` that matter for a graphite URL."""
    if _CONTROL.intersection(text):
        raise ValueError(f"parse {go_quote(text)}: net/url: invalid control character in URL")
    scheme, colon, _ = text.partition(":")
    if colon and not scheme and "/" not in text.split(":", 1)[0]:
        raise ValueError(f"parse {go_quote(text)}: missing protocol scheme")
    if colon and scheme and scheme[0].isalpha() and _SCHEME_CHARS.issuperset(scheme):
        try:
            parts = urlsplit(text)
            _ = parts.port
        except ValueError:
            raise ValueError(f"parse {go_quote(text)}: invalid port or host") from None


def parse_cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """Go's ``net.ParseCIDR``: an address and a decimal prefix length (host bits allowed)."""
    address, slash, prefix = text.partition("/")
    if not slash or not prefix.isdigit() or not prefix.isascii():
        raise ValueError(f"invalid CIDR address: {text}")
    try:
        return ipaddress.ip_network(f"{address}/{int(prefix)}", strict=False)
    except ValueError:
        raise ValueError(f"invalid CIDR address: {text}") from None


def normalize_base_path(path: str) -> str:
    """Go's normalizeBasePath: a leading ``/``, then ``path.Clean`` (no trailing slash)."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = clean_path(path)
    return cleaned.rstrip("/") or "/"


# ---------------------------------------------------------------------------------------------
# HTTP /config/:opt
# ---------------------------------------------------------------------------------------------


def config_value(opts: NsqadminOptions, cfg_name: str) -> object:
    """What ``GET /config/<cfg_name>`` reports, typed as Go would (log_level as 1..5,
    durations as int ns, lists copied). KeyError for names nsqadmin does not have."""
    if cfg_name not in CFG_NAMES:
        raise KeyError(cfg_name)
    value: object = getattr(opts, cfg_name)
    if cfg_name == "log_level":
        return _LOG_LEVEL_NAMES.index(str(value)) + 1
    if isinstance(value, list):
        return list(value)
    return value

"""nsqd options: defaults, flags, TOML config, validation and /config values (NSQ v1.3.0)."""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import re
import socket
from pathlib import Path

import pytest

from nsqpy import __version__
from nsqpy._internal.duration import HOUR, MICROSECOND, MILLISECOND, MINUTE, SECOND
from nsqpy.nsqd.core.policy import NodeDefaults
from nsqpy.nsqd.options import (
    CFG_NAMES,
    CLIENT_TIMEOUT_NS,
    QUEUE_SCAN_DIRTY_PERCENT,
    QUEUE_SCAN_INTERVAL_NS,
    QUEUE_SCAN_REFRESH_INTERVAL_NS,
    NsqdOptions,
    OptionsError,
    config_value,
    default_node_id,
    log_level_number,
    nsqd_flag_set,
    parse_log_level,
    parse_nsqd_args,
    validate,
    validate_config,
)

FATAL_LINE = r"\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} FATAL: "

# NSQ_FEATURES.md §1.1, written out independently of the implementation.
EXPECTED_DEFAULTS: dict[str, object] = {
    "log_level": "info",
    "log_prefix": "[nsqd] ",
    "tcp_address": "0.0.0.0:4150",
    "http_address": "0.0.0.0:4151",
    "https_address": "0.0.0.0:4152",
    "broadcast_tcp_port": 0,
    "broadcast_http_port": 0,
    "nsqlookupd_tcp_addresses": [],
    "auth_http_addresses": [],
    "http_client_connect_timeout": 2 * SECOND,
    "http_client_request_timeout": 5 * SECOND,
    "data_path": "",
    "mem_queue_size": 10000,
    "max_bytes_per_file": 104857600,
    "sync_every": 2500,
    "sync_timeout": 2 * SECOND,
    "durable": False,  # nsqpy's own
    "commit_linger": 600 * MICROSECOND,  # nsqpy's own (issue 21)
    "http_auth_required": False,  # nsqpy's own (nsq#1183)
    "http_allowed_origins": [],  # nsqpy's own: web origins whose pages may change state
    "queue_scan_worker_pool_max": 4,
    "queue_scan_selection_count": 20,
    "msg_timeout": 60 * SECOND,
    "max_msg_timeout": 15 * MINUTE,
    "max_msg_size": 1048576,
    "max_req_timeout": HOUR,
    "max_defer_timeout": None,  # nsqpy's own (nsq#1499): --max-req-timeout's value
    "max_body_size": 5242880,
    "max_attempts": 0,  # nsqpy's own (nsq#974, #1396), like the two below
    "message_ttl": 0,
    "dead_letter_suffix": ".dead",
    "lease_ttl": 60 * SECOND,  # nsqpy's own (issue 22)
    "max_heartbeat_interval": 60 * SECOND,
    "max_rdy_count": 2500,
    "max_output_buffer_size": 65536,
    "max_output_buffer_timeout": 30 * SECOND,
    "min_output_buffer_timeout": 25 * MILLISECOND,
    "output_buffer_timeout": 250 * MILLISECOND,
    "max_channel_consumers": 0,
    "statsd_address": "",
    "statsd_prefix": "nsq.%s",
    "statsd_interval": 60 * SECOND,
    "statsd_mem_stats": True,
    "statsd_udp_packet_size": 508,
    "statsd_exclude_ephemeral": False,
    "e2e_processing_latency_percentiles": [],
    "e2e_processing_latency_window_time": 10 * MINUTE,
    "alert_depths": [],  # nsqpy's own (nsq#1175), like the two below
    "alert_ages": [],
    "alert_check_interval": SECOND,
    "tls_cert": "",
    "tls_key": "",
    "tls_client_auth_policy": "",
    "tls_root_ca_file": "",
    "tls_required": 0,
    "tls_min_version": 0x0301,
    "deflate": True,
    "max_deflate_level": 6,
    "snappy": True,
    "queue_scan_interval": 100 * MILLISECOND,
    "queue_scan_refresh_interval": 5 * SECOND,
    "queue_scan_dirty_percent": 0.25,
    "client_timeout": 60 * SECOND,
}


def fatal_exit(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run a parse that must fail like nsqd's logFatal; return the message after FATAL:."""
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(argv)
    assert info.value.code == 1
    err = capsys.readouterr().err
    match = re.fullmatch(FATAL_LINE + r"(.*)\n", err)
    assert match, err
    return match.group(1)


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqd.cfg"
    path.write_text(text)
    return str(path)


# --- defaults ---------------------------------------------------------------------------------


def test_every_default_matches_nsq() -> None:
    opts = NsqdOptions()
    for name, expected in EXPECTED_DEFAULTS.items():
        assert getattr(opts, name) == expected, name
    assert opts.broadcast_address == socket.gethostname()
    assert opts.node_id == default_node_id(socket.gethostname())
    covered = set(EXPECTED_DEFAULTS) | {"node_id", "broadcast_address"}
    assert {f.name for f in dataclasses.fields(NsqdOptions)} == covered


def test_parsing_nothing_gives_the_defaults() -> None:
    assert parse_nsqd_args([]) == NsqdOptions()


def test_constants() -> None:
    assert CLIENT_TIMEOUT_NS == 60 * SECOND
    assert QUEUE_SCAN_INTERVAL_NS == 100 * MILLISECOND
    assert QUEUE_SCAN_REFRESH_INTERVAL_NS == 5 * SECOND
    assert QUEUE_SCAN_DIRTY_PERCENT == 0.25


def test_default_node_id_is_crc32_of_md5_of_hostname() -> None:
    for host in ("localhost", "nsq-1.example.com", ""):
        digest = hashlib.md5(host.encode()).digest()
        assert default_node_id(host) == binascii.crc32(digest) % 1024
    assert 0 <= default_node_id() < 1024


def test_default_lists_are_not_shared() -> None:
    a, b = NsqdOptions(), NsqdOptions()
    a.nsqlookupd_tcp_addresses.append("x:1")
    assert b.nsqlookupd_tcp_addresses == []


def test_cfg_names() -> None:
    fields = set(EXPECTED_DEFAULTS) - {
        "queue_scan_interval",
        "queue_scan_refresh_interval",
        "queue_scan_dirty_percent",
        "client_timeout",
    }
    assert fields | {"id", "broadcast_address"} == CFG_NAMES
    # nsqd v1.3.0's 49; nsqpy's durable, http_auth_required, http_allowed_origins, the three
    # alert_* keys, max_defer_timeout, max_attempts, message_ttl, dead_letter_suffix,
    # lease_ttl and commit_linger
    assert len(CFG_NAMES) == 61


# --- command line -----------------------------------------------------------------------------


def test_flags_map_to_fields() -> None:
    opts = parse_nsqd_args(
        [
            "--node-id=7",
            "-log-level",
            "DEBUG",
            "--tcp-address=127.0.0.1:0",
            "--lookupd-tcp-address=a:4160",
            "-lookupd-tcp-address",
            "b:4160",
            "--auth-http-address=http://auth/x,y",
            "--msg-timeout=1m30s",
            "--mem-queue-size=0x10",
            "--statsd-mem-stats=false",
            "--e2e-processing-latency-percentile=0.5,1.0",
            "--e2e-processing-latency-percentile=0.99",
            "--tls-min-version=TLS1.2",
            "--deflate=false",
            "--verbose",
            "--worker-id",
        ]
    )
    assert opts.node_id == 7
    assert opts.log_level == "debug"
    assert opts.tcp_address == "127.0.0.1:0"
    assert opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert opts.auth_http_addresses == ["http://auth/x,y"]
    assert opts.msg_timeout == 90 * SECOND
    assert opts.mem_queue_size == 16
    assert opts.statsd_mem_stats is False
    assert opts.e2e_processing_latency_percentiles == [1.0, 0.99, 0.5]
    assert opts.tls_min_version == 0x0303
    assert opts.deflate is False


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(["--version", "--config=/does/not/exist"])
    assert info.value.code == 0
    captured = capsys.readouterr()
    assert captured.out == f"nsqd v1.3.0 (built w/nsqpy-{__version__})\n"
    assert captured.err == ""


def test_help_lists_flags_with_go_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(["-help"])
    assert info.value.code == 0
    err = capsys.readouterr().err
    assert err.startswith("Usage of nsqd:\n  -alert-age [TOPIC[:CHANNEL]=]DURATION\n")
    assert "\n  -alert-check-interval duration\n" in err
    assert "\n  -alert-depth [TOPIC[:CHANNEL]=]N\n" in err
    assert "\n  -auth-http-address value\n" in err
    assert "  -log-level value\n    \tset log verbosity: debug, info, warn, error, or fatal" in err
    assert "(default INFO)\n" in err
    assert (
        "  -tls-required\n    \trequire TLS for client connections (true, false, tcp-https)\n"
        in err
    )
    assert "'tls1.3') (default tls1.0)\n" in err
    assert "  -tcp-address string\n" in err
    assert '(default "0.0.0.0:4150")\n' in err
    assert "  -msg-timeout duration\n" in err
    assert "auto-requeing a message (default 1m0s)\n" in err
    assert "  -verbose\n    \t[deprecated] has no effect, use --log-level\n" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topology-zone=a"], "flag provided but not defined: -topology-zone"),
        (
            ["--auth-http-request-method=post"],
            "flag provided but not defined: -auth-http-request-method",
        ),
        (["--mem-queue-size=lots"], 'invalid value "lots" for flag -mem-queue-size: parse error'),
        (["--msg-timeout=60000"], 'invalid value "60000" for flag -msg-timeout: parse error'),
        (
            ["--log-level=loud"],
            'invalid value "loud" for flag -log-level: '
            "invalid log level 'loud' (debug, info, warn, error, fatal)",
        ),
        (
            ["--tls-required=maybe"],
            'invalid boolean value "maybe" for -tls-required: '
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (
            ["--tls-min-version=ssl3.0"],
            'invalid value "ssl3.0" for flag -tls-min-version: unknown tlsVersionOption "ssl3.0"',
        ),
        (["--snappy=no"], 'invalid boolean value "no" for -snappy: parse error'),
    ],
)
def test_bad_flags_exit_2_with_go_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message + "\nUsage of nsqd:\n")


def test_bad_percentile_text_is_log_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(["--e2e-processing-latency-percentile=0.9,high"])
    assert info.value.code == 1
    assert re.fullmatch(r"\S+ \S+ Could not parse: high\n", capsys.readouterr().err)


@pytest.mark.parametrize(
    ("argv", "required"),
    [
        (["--tls-required"], 2),
        (["--tls-required=true"], 2),
        (["--tls-required=TRUE"], 2),
        (["--tls-required=tcp-https"], 1),
        (["--tls-required=TCP-HTTPS"], 1),
        (["--tls-required=false"], 0),
        (["--tls-client-auth-policy=require"], 2),
        (["--tls-client-auth-policy=require-verify", "--tls-required=tcp-https"], 1),
    ],
)
def test_tls_required(argv: list[str], required: int) -> None:
    opts = parse_nsqd_args(["--tls-cert=c.pem", "--tls-key=k.pem", *argv])
    assert opts.tls_required == required


def test_bare_tls_required_does_not_take_next_argument() -> None:
    opts = parse_nsqd_args(["--tls-cert=c", "--tls-key=k", "--tls-required", "tcp-https"])
    assert opts.tls_required == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node-id=1024"], "--node-id must be [0,1024)"),
        (["--node-id=-1"], "--node-id must be [0,1024)"),
        (["--max-deflate-level=0"], "--max-deflate-level must be [1,9]"),
        (["--max-deflate-level=10", "--node-id=5000"], "--max-deflate-level must be [1,9]"),
        (["--tls-required"], "cannot require TLS client connections without TLS key and cert"),
        (
            ["--tls-client-auth-policy=require"],
            "cannot require TLS client connections without TLS key and cert",
        ),
        (
            ["--e2e-processing-latency-percentile=1.5"],
            "invalid E2E processing latency percentile: 1.5",
        ),
        (
            ["--e2e-processing-latency-percentile=0.5,0"],
            "invalid E2E processing latency percentile: 0",
        ),
    ],
)
def test_invalid_options_are_fatal(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert fatal_exit(capsys, argv) == f"failed to instantiate nsqd - {message}"


def test_validate_accepts_edges_and_forces_tls() -> None:
    opts = NsqdOptions(node_id=1023, max_deflate_level=9)
    opts.e2e_processing_latency_percentiles = [1.0, 0.0001]
    validate(opts)
    opts = NsqdOptions(node_id=0, max_deflate_level=1, tls_client_auth_policy="x", tls_key="k")
    validate(opts)
    assert opts.tls_required == 2
    with pytest.raises(OptionsError, match=r"^--node-id must be \[0,1024\)$"):
        validate(NsqdOptions(node_id=1024))


# --- config file ------------------------------------------------------------------------------


def test_config_file_precedence(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        id = 12
        mem_queue_size = 500
        max_rdy_count = 100
        msg_timeout = 1500                       # integer: milliseconds
        sync_timeout = "3s"
        nsqlookupd_tcp_addresses = ["a:4160", "b:4160"]
        auth_http_addresses = "x:1,y:2"
        statsd_mem_stats = false
        e2e_processing_latency_percentiles = [0.5, 0.99]
        log_level = "WARN"
        tls_min_version = "tls1.3"
        verbose = true
        worker_id = 9
        no_such_option = "ignored"
        [some_table]
        key = 1
        """,
    )
    opts = parse_nsqd_args([f"--config={path}", "--max-rdy-count=7", "--data-path", "/d"])
    assert opts.node_id == 12
    assert opts.mem_queue_size == 500
    assert opts.max_rdy_count == 7  # command line beats config
    assert opts.data_path == "/d"
    assert opts.msg_timeout == 1500 * MILLISECOND
    assert opts.sync_timeout == 3 * SECOND
    assert opts.nsqlookupd_tcp_addresses == ["a:4160", "b:4160"]
    assert opts.auth_http_addresses == ["x:1", "y:2"]
    assert opts.statsd_mem_stats is False
    assert opts.e2e_processing_latency_percentiles == [0.5, 0.99]  # config order kept
    assert opts.log_level == "warn"
    assert opts.tls_min_version == 0x0304
    assert opts.max_output_buffer_size == 65536  # default


def test_command_line_arrays_replace_config_arrays(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'nsqlookupd_tcp_addresses = ["a:1"]\n')
    opts = parse_nsqd_args(["--config", path, "--lookupd-tcp-address=b:2"])
    assert opts.nsqlookupd_tcp_addresses == ["b:2"]


@pytest.mark.parametrize(
    ("toml", "required"),
    [("true", 2), ("false", 0), ('"tcp-https"', 1), ('"TRUE"', 2), ("1", 2), ('"0"', 0)],
)
def test_config_tls_required(tmp_path: Path, toml: str, required: int) -> None:
    path = write_config(tmp_path, f'tls_required = {toml}\ntls_cert = "c"\ntls_key = "k"\n')
    assert parse_nsqd_args([f"--config={path}"]).tls_required == required


def test_config_empty_tls_min_version_keeps_default(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'tls_min_version = ""\n')
    assert parse_nsqd_args([f"--config={path}"]).tls_min_version == 0x0301


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('tls_required = "sometimes"', "failed parsing tls_required sometimes"),
        ('tls_min_version = "ssl3.0"', "failed parsing tls_min_version ssl3.0"),
        ("tls_min_version = 12", "failed parsing tls_min_version 12"),
        ('log_level = "verbose"', "failed parsing log_level verbose"),
        ("log_level = 2", "failed parsing log_level 2"),
    ],
)
def test_config_special_validation_is_fatal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, toml: str, message: str
) -> None:
    path = write_config(tmp_path, toml + "\n")
    assert fatal_exit(capsys, [f"--config={path}"]) == message


def test_missing_config_file_is_fatal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = str(tmp_path / "absent.cfg")
    message = fatal_exit(capsys, [f"--config={path}"])
    assert message.startswith(f"failed to load config file {path} - ")


def test_malformed_config_file_is_fatal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_config(tmp_path, "mem_queue_size = = 3\n")
    assert fatal_exit(capsys, [f"--config={path}"]).startswith(
        f"failed to load config file {path} - "
    )


@pytest.mark.parametrize(
    ("toml", "tail"),
    [
        ('msg_timeout = "60000"', 'for field msg_timeout - time: missing unit in duration "60000"'),
        ("mem_queue_size = 1.5", "for field mem_queue_size - invalid int64 value type float64"),
        ('mem_queue_size = "0x10"', 'strconv.ParseInt: parsing "0x10": invalid syntax'),
    ],
)
def test_config_coercion_failure_is_log_fatal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, toml: str, tail: str
) -> None:
    path = write_config(tmp_path, toml + "\n")
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args([f"--config={path}"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ERROR: Resolve failed to coerce value .*\n", err
    )
    assert err.endswith(tail + "\n")


def test_config_values_are_validated_like_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_config(tmp_path, "id = 4096\n")
    assert fatal_exit(capsys, [f"--config={path}"]) == (
        "failed to instantiate nsqd - --node-id must be [0,1024)"
    )


def test_validate_config_normalises() -> None:
    assert validate_config(
        {"tls_required": True, "tls_min_version": "TLS1.1", "log_level": "Error", "x": 1}
    ) == {"tls_required": "2", "tls_min_version": "770", "log_level": "error", "x": 1}
    with pytest.raises(OptionsError, match=r"^failed parsing log_level $"):
        validate_config({"log_level": ""})


# --- log levels and /config -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "number"),
    [("debug", "debug", 1), ("INFO", "info", 2), ("Warn", "warn", 3), ("error", "error", 4),
     ("FATAL", "fatal", 5)],
)  # fmt: skip
def test_log_levels(text: str, name: str, number: int) -> None:
    assert parse_log_level(text) == name
    assert log_level_number(text) == number


@pytest.mark.parametrize("text", ["warning", "", "trace", " info"])
def test_bad_log_level(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_log_level(text)
    assert str(info.value) == f"invalid log level '{text}' (debug, info, warn, error, fatal)"


def test_config_value_types() -> None:
    opts = parse_nsqd_args(["--node-id=5", "--log-level=error", "--lookupd-tcp-address=a:1"])
    assert config_value(opts, "id") == 5
    assert config_value(opts, "log_level") == 4
    assert config_value(opts, "log_prefix") == "[nsqd] "
    assert config_value(opts, "tcp_address") == "0.0.0.0:4150"
    assert config_value(opts, "max_msg_size") == 1048576
    assert config_value(opts, "msg_timeout") == 60_000_000_000
    assert config_value(opts, "min_output_buffer_timeout") == 25_000_000
    assert config_value(opts, "snappy") is True
    assert config_value(opts, "tls_required") == 0
    assert config_value(opts, "tls_min_version") == 769
    assert config_value(opts, "e2e_processing_latency_percentiles") == []
    lookupds = config_value(opts, "nsqlookupd_tcp_addresses")
    assert lookupds == ["a:1"]
    assert lookupds is not opts.nsqlookupd_tcp_addresses


def test_config_value_covers_every_cfg_name() -> None:
    opts = NsqdOptions()
    for name in CFG_NAMES:
        config_value(opts, name)


@pytest.mark.parametrize(
    "name", ["node_id", "queue_scan_interval", "client_timeout", "version", "config", "nope"]
)
def test_config_value_unknown_names(name: str) -> None:
    with pytest.raises(KeyError):
        config_value(NsqdOptions(), name)


def test_flag_set_uses_given_defaults() -> None:
    fs = nsqd_flag_set(NsqdOptions(node_id=3, broadcast_address="h"))
    parsed = fs.parse([])
    assert parsed["node-id"] == 3
    assert parsed["broadcast-address"] == "h"


# --- backlog alerts (nsqpy only) -----------------------------------------------------------------


def test_alert_flags_repeat_and_keep_their_text() -> None:
    opts = parse_nsqd_args(
        [
            "--alert-depth=1000",
            "-alert-depth",
            "orders:*=50",
            "--alert-depth=*#ephemeral=0",
            "--alert-age=orders:archive=1m30s",
            "--alert-check-interval=250ms",
        ]
    )
    assert opts.alert_depths == ["1000", "orders:*=50", "*#ephemeral=0"]
    assert opts.alert_ages == ["orders:archive=1m30s"]
    assert opts.alert_check_interval == 250 * MILLISECOND
    assert config_value(opts, "alert_depths") == ["1000", "orders:*=50", "*#ephemeral=0"]
    assert config_value(opts, "alert_check_interval") == 250 * MILLISECOND


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--alert-depth=t=many"],
            'invalid value "t=many" for flag -alert-depth: '
            'strconv.ParseInt: parsing "many": invalid syntax',
        ),
        (
            ["--alert-depth=bad topic=5"],
            'invalid value "bad topic=5" for flag -alert-depth: '
            'invalid topic or channel name "bad topic" in "bad topic=5"',
        ),
        (
            ["--alert-age=t:c=5"],
            'invalid value "t:c=5" for flag -alert-age: time: missing unit in duration "5"',
        ),
        (
            ["--alert-check-interval=1"],
            'invalid value "1" for flag -alert-check-interval: parse error',
        ),
    ],
)
def test_bad_alert_flags_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(message + "\nUsage of nsqd:\n")


def test_alert_rules_from_a_config_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        'alert_depths = ["1000", "t:c=5"]\nalert_ages = "1m,t=10s"\nalert_check_interval = 500\n',
    )
    opts = parse_nsqd_args([f"--config={path}"])
    assert opts.alert_depths == ["1000", "t:c=5"]
    assert opts.alert_ages == ["1m", "t=10s"]  # a string is comma-split, as for every list
    assert opts.alert_check_interval == 500 * MILLISECOND  # a bare integer is milliseconds
    opts = parse_nsqd_args([f"--config={path}", "--alert-depth=7"])
    assert opts.alert_depths == ["7"]  # the command line replaces the config's list


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            'alert_depths = ["t=x"]',
            'failed to instantiate nsqd - invalid --alert-depth "t=x" - '
            'strconv.ParseInt: parsing "x": invalid syntax',
        ),
        (
            'alert_ages = ["a:b:c=1s"]',
            'failed to instantiate nsqd - invalid --alert-age "a:b:c=1s" - '
            'invalid topic or channel name "b:c" in "a:b:c=1s"',
        ),
        (
            'alert_depths = ["5"]\nalert_check_interval = "0s"',
            "failed to instantiate nsqd - --alert-check-interval must be > 0",
        ),
    ],
)
def test_bad_alert_config_is_fatal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, toml: str, message: str
) -> None:
    path = write_config(tmp_path, toml + "\n")
    assert fatal_exit(capsys, [f"--config={path}"]) == message


def test_a_zero_check_interval_is_fine_without_rules() -> None:
    opts = NsqdOptions(alert_check_interval=0)
    validate(opts)
    opts.alert_ages = ["1m"]
    with pytest.raises(OptionsError, match="alert-check-interval"):
        validate(opts)


# --- dead letters, TTL and the defer limit (nsqpy) ----------------------------------------------


def test_dead_letter_flags_and_the_defer_limit() -> None:
    opts = parse_nsqd_args([])
    assert opts.max_defer_timeout is None and opts.defer_limit == HOUR  # follows REQ's limit
    assert config_value(opts, "max_defer_timeout") == HOUR
    opts = parse_nsqd_args(["--max-req-timeout=2h"])
    assert opts.defer_limit == 2 * HOUR
    opts = parse_nsqd_args(
        [
            "--max-defer-timeout=24h",
            "--max-attempts=5",
            "--message-ttl=90s",
            "--dead-letter-suffix=_dlq",
        ]
    )
    assert (opts.defer_limit, opts.max_req_timeout) == (24 * HOUR, HOUR)
    assert config_value(opts, "max_defer_timeout") == 24 * HOUR
    assert opts.policy_defaults == NodeDefaults(5, 90 * SECOND, "_dlq")
    assert config_value(opts, "message_ttl") == 90 * SECOND


def test_dead_letter_settings_from_a_config_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        'max_defer_timeout = "6h"\nmax_attempts = 3\nmessage_ttl = "1h"\n'
        'dead_letter_suffix = ".failed"\n',
    )
    opts = parse_nsqd_args([f"--config={path}"])
    assert opts.policy_defaults == NodeDefaults(3, HOUR, ".failed")
    assert opts.defer_limit == 6 * HOUR


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-attempts=-1"], "failed to instantiate nsqd - --max-attempts must be [0,65535]"),
        (["--max-attempts=65536"], "failed to instantiate nsqd - --max-attempts must be [0,65535]"),
        (["--message-ttl=-1s"], "failed to instantiate nsqd - --message-ttl must be >= 0"),
        (["--lease-ttl=0s"], "failed to instantiate nsqd - --lease-ttl must be > 0"),
        (["--commit-linger=-1us"], "failed to instantiate nsqd - --commit-linger must be >= 0"),
        (
            ["--max-defer-timeout=-1s"],
            "failed to instantiate nsqd - --max-defer-timeout must be >= 0",
        ),
        (
            ["--dead-letter-suffix=#dead"],
            'failed to instantiate nsqd - --dead-letter-suffix "#dead" must be 1 to 63 '
            "characters of [.a-zA-Z0-9_-]",
        ),
    ],
)
def test_bad_dead_letter_options_are_fatal(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert fatal_exit(capsys, argv) == message


def test_an_unparsable_defer_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_nsqd_args(["--max-defer-timeout=soon"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith('invalid value "soon" for flag -max-defer-timeout: parse error\n')

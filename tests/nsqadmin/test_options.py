"""nsqadmin's flags, config file and start-up checks (NSQ v1.3.0 ``apps/nsqadmin``,
``nsqadmin.New``), parsed in-process; the process itself is in test_cli."""

from __future__ import annotations

from pathlib import Path

import pytest

from nsqpy.nsqadmin.app import NSQAdmin, StartupError
from nsqpy.nsqadmin.options import (
    NsqadminOptions,
    OptionsError,
    config_value,
    normalize_base_path,
    nsqadmin_flag_set,
    parse_cidr,
    parse_nsqadmin_args,
    resolve_tcp_address,
    validate,
)

SECOND = 1_000_000_000
LOOKUPD = "--lookupd-http-address=127.0.0.1:4161"


def test_defaults_are_nsqs() -> None:
    opts = parse_nsqadmin_args([])
    assert opts == NsqadminOptions()
    assert opts.http_address == "0.0.0.0:4171"
    assert opts.base_path == "/"
    assert opts.statsd_prefix == "nsq.%s"
    assert opts.statsd_counter_format == "stats.counters.%s.count"
    assert opts.statsd_gauge_format == "stats.gauges.%s"
    assert opts.statsd_interval == 60 * SECOND
    assert opts.http_client_connect_timeout == 2 * SECOND
    assert opts.http_client_request_timeout == 5 * SECOND
    assert opts.allow_config_from_cidr == "127.0.0.1/8"
    assert opts.acl_http_header == "X-Forwarded-User"
    assert opts.admin_users == []
    assert opts.log_prefix == "[nsqadmin] "
    assert (opts.sample_interval, opts.history_duration) == (2 * SECOND, 600 * SECOND)


def test_every_flag_of_nsqadmin_exists() -> None:
    names = {flag.name for flag in nsqadmin_flag_set().flags}
    assert names == {
        "config", "version", "log-level", "log-prefix", "verbose", "http-address", "base-path",
        "dev-static-dir", "graphite-url", "proxy-graphite", "statsd-counter-format",
        "statsd-gauge-format", "statsd-prefix", "statsd-interval", "notification-http-endpoint",
        "http-client-connect-timeout", "http-client-request-timeout",
        "http-client-tls-insecure-skip-verify", "http-client-tls-root-ca-file",
        "http-client-tls-cert", "http-client-tls-key", "allow-config-from-cidr",
        "acl-http-header", "lookupd-http-address", "nsqd-http-address", "admin-user",
        "sample-interval", "history-duration", "http-allowed-origin",
    }  # fmt: skip


def test_go_flag_syntax_and_repeatable_flags() -> None:
    opts = parse_nsqadmin_args(
        [
            "-lookupd-http-address", "a:4161",
            "--lookupd-http-address=b:4161",
            "--admin-user=alice", "--admin-user", "bob",
            "--proxy-graphite",
            "--statsd-interval=10s",
            "--sample-interval=500ms",
            "--base-path=admin",
        ]
    )  # fmt: skip
    assert opts.nsqlookupd_http_addresses == ["a:4161", "b:4161"]
    assert opts.admin_users == ["alice", "bob"]
    assert opts.proxy_graphite is True
    assert opts.statsd_interval == 10 * SECOND
    assert opts.sample_interval == SECOND // 2
    assert opts.base_path == "admin"  # normalised when nsqadmin starts (validate)


def test_help_lists_nsqs_wording(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_nsqadmin_args(["-h"])
    assert exited.value.code == 0
    usage = capsys.readouterr().err
    assert usage.startswith("Usage of nsqadmin:\n")
    for entry in (
        "  -http-address string\n    \t<addr>:<port> to listen on for HTTP clients"
        ' (default "0.0.0.0:4171")\n',
        "  -admin-user value\n    \tadmin user (may be given multiple times;",
        "  -allow-config-from-cidr string\n    \tA CIDR from which to allow HTTP requests to the"
        ' /config endpoint (default "127.0.0.1/8")\n',
        "  -statsd-interval duration\n    \ttime interval nsqd is configured to push to statsd"
        " (must match nsqd) (default 1m0s)\n",
        "  -log-level value\n    \tset log verbosity: debug, info, warn, error, or fatal"
        " (default INFO)\n",
        "  -dev-static-dir string\n    \t(development use only)\n",
    ):
        assert entry in usage


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_nsqadmin_args(["--http-client-connect-timeout=soon"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        'invalid value "soon" for flag -http-client-connect-timeout: parse error\n'
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_nsqadmin_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("nsqadmin v1.3.0 (built w/nsqpy-")


def test_config_file_and_precedence(tmp_path: Path) -> None:
    config = tmp_path / "nsqadmin.cfg"
    config.write_text(
        'log_level = "WARN"\n'
        'http_address = "127.0.0.1:4999"\n'
        'nsqlookupd_http_addresses = ["127.0.0.1:4161", "127.0.0.1:4163"]\n'
        'admin_users = ["root"]\n'
        'statsd_interval = "30s"\n'
        "sample_interval = 250\n"  # a TOML integer duration is milliseconds
        'base_path = "/x"\n'
    )
    opts = parse_nsqadmin_args([f"--config={config}", "--base-path=/cli"])
    assert opts.log_level == "warn"
    assert opts.http_address == "127.0.0.1:4999"
    assert opts.nsqlookupd_http_addresses == ["127.0.0.1:4161", "127.0.0.1:4163"]
    assert opts.admin_users == ["root"]
    assert opts.statsd_interval == 30 * SECOND
    assert opts.sample_interval == SECOND // 4
    assert opts.base_path == "/cli"  # the command line wins


def test_bad_config_log_level_is_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.cfg"
    config.write_text('log_level = "loud"\n')
    with pytest.raises(SystemExit) as exited:
        parse_nsqadmin_args([f"--config={config}"])
    assert exited.value.code == 1
    assert "[nsqadmin] " in (err := capsys.readouterr().err)
    assert err.rstrip().endswith("FATAL: failed parsing log_level loud")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "--nsqd-http-address or --lookupd-http-address required"),
        (
            {"nsqd_http_addresses": ["127.0.0.1:4151"]},
            "use --nsqd-http-address or --lookupd-http-address not both",
        ),
        (
            {"http_client_tls_cert": "cert.pem"},
            "--http-client-tls-key must be specified with --http-client-tls-cert",
        ),
        (
            {"http_client_tls_key": "key.pem"},
            "--http-client-tls-cert must be specified with --http-client-tls-key",
        ),
        (
            {"http_client_tls_root_ca_file": "/nonexistent/ca.pem"},
            "failed to read TLS root CA file /nonexistent/ca.pem - ",
        ),
        (
            {"allow_config_from_cidr": "10.0.0.1"},
            "failed to parse --allow-config-from-cidr (10.0.0.1) - invalid CIDR address: 10.0.0.1",
        ),
        (
            {"proxy_graphite": True, "graphite_url": ":nope"},
            'failed to parse --graphite-url (:nope) - parse ":nope": missing protocol scheme',
        ),
    ],
)
def test_startup_errors(overrides: dict[str, object], message: str) -> None:
    opts = NsqadminOptions()
    if overrides:  # all but the first case have an address to get past the first check
        opts.nsqlookupd_http_addresses = ["127.0.0.1:4161"]
    for name, value in overrides.items():
        setattr(opts, name, value)
    with pytest.raises(OptionsError) as failed:
        validate(opts)
    assert str(failed.value).startswith(message)


def test_lookupd_address_must_resolve() -> None:
    opts = NsqadminOptions(nsqlookupd_http_addresses=["127.0.0.1"])
    with pytest.raises(OptionsError) as failed:
        validate(opts)
    assert str(failed.value) == (
        "failed to resolve --lookupd-http-address (127.0.0.1) - "
        "address 127.0.0.1: missing port in address"
    )
    with pytest.raises(ValueError, match="unknown port"):
        resolve_tcp_address("127.0.0.1:nosuchservice")
    resolve_tcp_address("localhost:4161")
    resolve_tcp_address("[::1]:4161")


def test_base_path_is_normalised() -> None:
    assert normalize_base_path("") == "/"
    assert normalize_base_path("admin") == "/admin"
    assert normalize_base_path("/admin/") == "/admin"
    assert normalize_base_path("//a/./b/../c/") == "/a/c"
    opts = NsqadminOptions(nsqd_http_addresses=["127.0.0.1:4151"], base_path="x/y/")
    validate(opts)
    assert opts.base_path == "/x/y"


def test_cidr_parsing_is_gos() -> None:
    assert str(parse_cidr("127.0.0.1/8")) == "127.0.0.0/8"
    assert str(parse_cidr("::1/128")) == "::1/128"
    for bad in ("127.0.0.1", "127.0.0.1/33", "127.0.0.1/255.0.0.0", "x/8", "1.2.3.4/+8"):
        with pytest.raises(ValueError, match="invalid CIDR address"):
            parse_cidr(bad)


def test_config_values_typed_as_go() -> None:
    opts = NsqadminOptions(nsqlookupd_http_addresses=["a:1"])
    assert config_value(opts, "log_level") == 2
    assert config_value(opts, "http_address") == "0.0.0.0:4171"
    assert config_value(opts, "statsd_interval") == 60 * SECOND
    assert config_value(opts, "nsqlookupd_http_addresses") == ["a:1"]
    assert config_value(opts, "nsqd_http_addresses") == []
    assert config_value(opts, "proxy_graphite") is False
    with pytest.raises(KeyError):
        config_value(opts, "nope")


async def test_start_reports_the_first_failed_check() -> None:
    admin = NSQAdmin(NsqadminOptions(http_address="127.0.0.1:0"))
    with pytest.raises(StartupError, match="--lookupd-http-address required"):
        await admin.start()
    await admin.close()


async def test_listen_failure_is_a_startup_error() -> None:
    first = NSQAdmin(
        NsqadminOptions(http_address="127.0.0.1:0", nsqd_http_addresses=["127.0.0.1:1"])
    )
    await first.start()
    try:
        second = NSQAdmin(
            NsqadminOptions(http_address=first.http_address, nsqd_http_addresses=["127.0.0.1:1"])
        )
        with pytest.raises(StartupError, match=rf"listen \({first.http_address}\) failed - "):
            await second.start()
        await second.close()
    finally:
        await first.close()

"""``nsq_to_file``: write topics' messages to (rotated, optionally gzipped) files.

NSQ v1.3.0's ``apps/nsq_to_file``: same flags, checks, messages and log lines; the work is done
by :mod:`nsqpy.tools.to_file` (files: ``file_logger``, sync and FIN: ``file_router``, topics:
``topic_discoverer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from nsqpy._internal import logs
from nsqpy._internal.duration import MINUTE, SECOND
from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy.cli import common
from nsqpy.tools.file_names import FileOptions, compute_filename_format
from nsqpy.tools.file_router import RouterOptions
from nsqpy.tools.to_file import ToFileOptions, serve

APP: Final = "nsq_to_file"
FILENAME_USAGE: Final = (
    "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. "
    "<REV> is increased when file already exists)"
)
HOST_IDENTIFIER_USAGE: Final = (
    "value to output in log filename in place of hostname. "
    "<SHORT_HOST> and <HOSTNAME> are valid replacement tokens"
)


def flag_set() -> FlagSet:
    # NSQ names this flag set "nsqd" (a copy-paste in apps/nsq_to_file), so -h says so too.
    fs = FlagSet("nsqd")
    common.add_version_flag(fs)
    fs.add_string("log-level", "info", "set log verbosity: debug, info, warn, error, or fatal")
    fs.add_string("log-prefix", "[nsq_to_file] ", "log message prefix")
    fs.add_string("channel", "nsq_to_file", "nsq channel")
    fs.add_int("max-in-flight", 200, "max number of messages to allow in flight")
    fs.add_string("output-dir", "/tmp", "directory to write output files to")
    fs.add_string("work-dir", "", "directory for in-progress files before moving to output-dir")
    fs.add_string(
        "datetime-format",
        "%Y-%m-%d_%H",
        "strftime compatible format for <DATETIME> in filename format",
    )
    fs.add_string("filename-format", "<TOPIC>.<HOST><REV>.<DATETIME>.log", FILENAME_USAGE)
    fs.add_string("host-identifier", "", HOST_IDENTIFIER_USAGE)
    fs.add_int("gzip-level", 6, "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)")
    fs.add_bool("gzip", False, "gzip output files.")
    fs.add_bool("skip-empty-files", False, "skip writing empty files")
    fs.add_duration("topic-refresh", MINUTE, "how frequently the topic list should be refreshed")
    fs.add_string("topic-pattern", "", "only log topics matching the following pattern")
    fs.add_int("rotate-size", 0, "rotate the file when it grows bigger than `rotate-size` bytes")
    fs.add_duration("rotate-interval", 0, "rotate the file every duration")
    fs.add_duration("sync-interval", 30 * SECOND, "sync file to disk every duration")
    fs.add_duration("http-client-connect-timeout", 2 * SECOND, "timeout for HTTP connect")
    fs.add_duration("http-client-request-timeout", 5 * SECOND, "timeout for HTTP request")
    common.add_source_flags(fs)
    fs.add_string_array("topic", "nsq topic (may be given multiple times)")
    # A plain string list in NSQ: applied after parsing, bad options silently ignored.
    common.add_config_opt(fs, "consumer-opt", common.CONSUMER_OPT_USAGE, checked=False)
    return fs


def _seconds(parsed: ParsedFlags, name: str) -> float:
    value = parsed[name]
    return value / SECOND if isinstance(value, int) else 0.0


def _int(parsed: ParsedFlags, name: str) -> int:
    value = parsed[name]
    return value if isinstance(value, int) else 0


def file_options(parsed: ParsedFlags) -> FileOptions:
    return FileOptions(
        output_dir=str(parsed["output-dir"]),
        work_dir=str(parsed["work-dir"]),
        datetime_format=str(parsed["datetime-format"]),
        filename_format=str(parsed["filename-format"]),
        host_identifier=str(parsed["host-identifier"]),
        gzip=bool(parsed["gzip"]),
        gzip_level=_int(parsed, "gzip-level"),
        rotate_size=_int(parsed, "rotate-size"),
        rotate_interval=_seconds(parsed, "rotate-interval"),
    )


def options(parsed: ParsedFlags) -> ToFileOptions:
    """The checks of NSQ's nsq_to_file ``main()``, in its order; each failure is fatal."""
    if not parsed["channel"]:
        common.fatal("--channel is required")
    for name in ("http-client-connect-timeout", "http-client-request-timeout"):
        if _seconds(parsed, name) <= 0:
            common.fatal(f"--{name} should be positive")
    nsqd = common.strings(parsed, "nsqd-tcp-address")
    lookupd = common.strings(parsed, "lookupd-http-address")
    if not nsqd and not lookupd:
        common.fatal("--nsqd-tcp-address or --lookupd-http-address required.")  # sic: the dot
    if nsqd and lookupd:
        common.fatal("use --nsqd-tcp-address or --lookupd-http-address not both")
    level = _int(parsed, "gzip-level")
    if not 1 <= level <= 9:
        common.fatal(f"invalid --gzip-level value ({level}), should be 1-9")
    topics = common.strings(parsed, "topic")
    if not topics and not parsed["topic-pattern"]:
        common.fatal("--topic or --topic-pattern required")
    if not topics and not lookupd:
        common.fatal("--lookupd-http-address must be specified when no --topic specified")
    if _seconds(parsed, "sync-interval") <= 0:
        common.fatal("--sync-interval should be positive")  # NSQ panics in time.NewTicker
    files = file_options(parsed)
    try:
        # NSQ finds this per topic and only logs it; it cannot work for any topic, so stop.
        compute_filename_format(files, "topic")
    except ValueError as err:
        common.fatal(str(err))
    return ToFileOptions(
        channel=str(parsed["channel"]),
        topics=topics,
        topic_pattern=str(parsed["topic-pattern"]),
        topic_refresh=_seconds(parsed, "topic-refresh"),
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        http_connect_timeout=_seconds(parsed, "http-client-connect-timeout"),
        http_request_timeout=_seconds(parsed, "http-client-request-timeout"),
        file=files,
        router=RouterOptions(
            max_in_flight=_int(parsed, "max-in-flight"),
            sync_interval=_seconds(parsed, "sync-interval"),
            skip_empty_files=bool(parsed["skip-empty-files"]),
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parsed = common.parse(flag_set(), argv)
    if parsed.args:
        common.fatal(f"unknown arguments: [{' '.join(parsed.args)}]")
    try:
        level = logs.parse_level(str(parsed["log-level"]))
    except ValueError:
        common.fatal("--log-level is invalid")
    if common.handle_version(parsed, APP):
        return 0
    opts = options(parsed)
    log = logs.setup(APP, str(parsed["log-prefix"]), level)
    common.setup_logging()
    cfg = common.client_config(
        APP,
        common.strings(parsed, "consumer-opt"),
        max_in_flight=_int(parsed, "max-in-flight"),
        strict=False,
    )
    return common.run(lambda shutdown: serve(opts, cfg, stop=shutdown.wait(), log=log))


if __name__ == "__main__":
    raise SystemExit(main())

"""``nsq_to_http``: turn each message of a topic/channel into an HTTP GET or POST.

NSQ v1.3.0's ``apps/nsq_to_http``: same flags, checks and messages; the requests, modes and
status lines are :mod:`nsqpy.tools.http_sink`, the consumer loop :mod:`nsqpy.tools.to_http`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from nsqpy._internal.duration import SECOND
from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy.cli import common
from nsqpy.protocol.names import is_valid_name
from nsqpy.tools.http_sink import DEFAULT_CONTENT_TYPE, SinkOptions, parse_headers
from nsqpy.tools.to_http import ToHttpOptions, serve

APP: Final = "nsq_to_http"
POST_USAGE: Final = (
    "HTTP address to make a POST request to.  data will be in the body "
    "(may be given multiple times)"
)
GET_USAGE: Final = (
    "HTTP address to make a GET request to. '%s' will be printf replaced with data "
    "(may be given multiple times)"
)
MODE_USAGE: Final = (
    "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy"
)


def flag_set(argv: Sequence[str] | None = None) -> FlagSet:
    fs = common.new_flag_set(APP, argv)
    common.add_version_flag(fs)
    fs.add_string("topic", "", "nsq topic")
    fs.add_string("channel", "nsq_to_http", "nsq channel")
    fs.add_int("max-in-flight", 200, "max number of messages to allow in flight")
    fs.add_int("n", 100, "number of concurrent publishers")
    fs.add_string("mode", "hostpool", MODE_USAGE)
    fs.add_float("sample", 1.0, "% of messages to publish (float b/w 0 -> 1)")
    fs.add_duration("http-client-connect-timeout", 2 * SECOND, "timeout for HTTP connect")
    fs.add_duration("http-client-request-timeout", 20 * SECOND, "timeout for HTTP request")
    fs.add_int(
        "status-every",
        250,
        "the # of requests between logging status (per handler), 0 disables",
    )
    fs.add_string("content-type", DEFAULT_CONTENT_TYPE, "the Content-Type used for POST requests")
    fs.add_string_array("post", POST_USAGE)
    fs.add_string_array("header", "Custom header for HTTP requests (may be given multiple times)")
    fs.add_string_array("get", GET_USAGE)
    common.add_source_flags(fs)
    common.add_config_opt(fs, "consumer-opt", common.CONSUMER_OPT_USAGE)
    return fs


def _int(parsed: ParsedFlags, name: str) -> int:
    value = parsed[name]
    return value if isinstance(value, int) else 0


def _seconds(parsed: ParsedFlags, name: str) -> float:
    value = parsed[name]
    return value / SECOND if isinstance(value, int) else 0.0


def _endpoints(parsed: ParsedFlags) -> tuple[list[str], bool]:
    """The ``--get``/``--post`` checks, in NSQ's order: (addresses, is POST)."""
    gets, posts = common.strings(parsed, "get"), common.strings(parsed, "post")
    if not gets and not posts:
        common.fatal("--get or --post required")
    if gets and posts:
        common.fatal("use --get or --post not both")
    if any(get.count("%s") != 1 for get in gets):
        common.fatal("invalid GET address - must be a printf string")
    return (posts, True) if posts else (gets, False)


def options(parsed: ParsedFlags) -> ToHttpOptions:
    """The checks of NSQ's nsq_to_http ``main()``, in its order; each failure is fatal."""
    try:
        headers = parse_headers(common.strings(parsed, "header"))
    except ValueError:
        common.fatal("--header value format should be 'key=value'")  # sic: it takes key:value
    topic, channel = str(parsed["topic"]), str(parsed["channel"])
    if not topic or not channel:
        common.fatal("--topic and --channel are required")
    content_type = str(parsed["content-type"])
    if content_type != DEFAULT_CONTENT_TYPE:
        if not common.strings(parsed, "post"):
            common.fatal("--content-type only used with --post")
        if not content_type:
            common.fatal("--content-type requires a value when used")
    nsqd = common.strings(parsed, "nsqd-tcp-address")
    lookupd = common.strings(parsed, "lookupd-http-address")
    error = common.source_error(nsqd, lookupd)
    if error is not None:
        common.fatal(error)
    addresses, post = _endpoints(parsed)
    sample = parsed["sample"]
    assert isinstance(sample, float)
    if sample > 1.0 or sample < 0.0:
        common.fatal("ERROR: --sample must be between 0.0 and 1.0")
    # go-nsq's NewConsumer refuses these next, with its own wording.
    if not is_valid_name(topic):
        common.fatal("invalid topic name")
    if not is_valid_name(channel):
        common.fatal("invalid channel name")
    return ToHttpOptions(
        topic=topic,
        channel=channel,
        sink=SinkOptions(
            addresses=addresses,
            post=post,
            mode=str(parsed["mode"]),
            content_type=content_type,
            headers=headers,
            sample=sample,
            status_every=_int(parsed, "status-every"),
        ),
        nsqd_tcp_addresses=nsqd,
        lookupd_http_addresses=lookupd,
        concurrency=_int(parsed, "n"),
        connect_timeout=_seconds(parsed, "http-client-connect-timeout"),
        request_timeout=_seconds(parsed, "http-client-request-timeout"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    started = common.begin(flag_set(argv), argv, APP, options)
    if started is None:
        return 0
    parsed, opts = started
    cfg = common.client_config(
        APP, common.strings(parsed, "consumer-opt"), max_in_flight=_int(parsed, "max-in-flight")
    )
    return common.run(lambda shutdown: serve(opts, cfg, stop=shutdown.wait(), log=common.logf))


if __name__ == "__main__":
    raise SystemExit(main())

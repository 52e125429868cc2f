"""``nsq_to_nsq``: consume topics and re-publish every message to destination nsqd.

NSQ v1.3.0's ``apps/nsq_to_nsq``: same flags, checks, messages and status lines; the work is
:func:`nsqpy.tools.relay.relay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from nsqpy._internal.goflag import FlagSet, ParsedFlags
from nsqpy.cli import common
from nsqpy.protocol.names import is_valid_name
from nsqpy.tools.json_filter import JSONFilter
from nsqpy.tools.relay import RelayError, RelayOptions, relay

APP: Final = "nsq_to_nsq"
_SEE: Final = f"(may be given multiple times, see {common.GODOC_CONFIG})"


def flag_set(argv: Sequence[str] | None = None) -> FlagSet:
    fs = common.new_flag_set(APP, argv)
    common.add_version_flag(fs)
    fs.add_string("channel", "nsq_to_nsq", "nsq channel")
    fs.add_string(
        "destination-topic",
        "",
        "use this destination topic for all consumed topics (default is consumed topic name)",
    )
    fs.add_int("max-in-flight", 200, "max number of messages to allow in flight")
    fs.add_int(
        "status-every",
        250,
        "the # of requests between logging status (per destination), 0 disables",
    )
    fs.add_string(
        "mode",
        "hostpool",
        "the upstream request mode options: round-robin, hostpool (default), epsilon-greedy",
    )
    common.add_source_flags(fs)
    fs.add_string_array(
        "destination-nsqd-tcp-address", "destination nsqd TCP address (may be given multiple times)"
    )
    fs.add_string_array("topic", "nsq topic (may be given multiple times)")
    fs.add_string_array(
        "whitelist-json-field", "for JSON messages: pass this field (may be given multiple times)"
    )
    fs.add_string(
        "require-json-field", "", "for JSON messages: only pass messages that contain this field"
    )
    fs.add_string(
        "require-json-value",
        "",
        "for JSON messages: only pass messages in which the required field has this value",
    )
    common.add_config_opt(fs, "consumer-opt", f"option to passthrough to nsq.Consumer {_SEE}")
    common.add_config_opt(fs, "producer-opt", f"option to passthrough to nsq.Producer {_SEE}")
    return fs


def _check(parsed: ParsedFlags) -> None:
    """The checks of NSQ's nsq_to_nsq ``main()``, in its order; each failure is fatal."""
    topics, channel = common.strings(parsed, "topic"), str(parsed["channel"])
    if not topics or not channel:
        common.fatal("--topic and --channel are required")
    if not all(is_valid_name(t) for t in topics):
        common.fatal("--topic is invalid")
    destination = str(parsed["destination-topic"])
    if destination and not is_valid_name(destination):
        common.fatal("--destination-topic is invalid")
    if not is_valid_name(channel):
        common.fatal("--channel is invalid")
    error = common.source_error(
        common.strings(parsed, "nsqd-tcp-address"), common.strings(parsed, "lookupd-http-address")
    )
    if error is not None:
        common.fatal(error)
    if not common.strings(parsed, "destination-nsqd-tcp-address"):
        common.fatal("--destination-nsqd-tcp-address required")


def _int(parsed: ParsedFlags, name: str) -> int:
    value = parsed[name]
    return value if isinstance(value, int) else 0


def options(parsed: ParsedFlags) -> RelayOptions:
    _check(parsed)
    return RelayOptions(
        topics=common.strings(parsed, "topic"),
        channel=str(parsed["channel"]),
        destination_nsqd_tcp_addresses=common.strings(parsed, "destination-nsqd-tcp-address"),
        consumer_config=common.client_config(
            APP,
            common.strings(parsed, "consumer-opt"),
            max_in_flight=_int(parsed, "max-in-flight"),
        ),
        producer_config=common.client_config(APP, common.strings(parsed, "producer-opt")),
        destination_topic=str(parsed["destination-topic"]),
        nsqd_tcp_addresses=common.strings(parsed, "nsqd-tcp-address"),
        lookupd_http_addresses=common.strings(parsed, "lookupd-http-address"),
        mode=str(parsed["mode"]),
        status_every=_int(parsed, "status-every"),
        json_filter=JSONFilter(
            require_field=str(parsed["require-json-field"]),
            require_value=str(parsed["require-json-value"]),
            whitelist=tuple(common.strings(parsed, "whitelist-json-field")),
        ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    started = common.begin(flag_set(argv), argv, APP, options)
    if started is None:
        return 0
    _, opts = started
    return common.run(common.until_done(lambda: relay(opts, common.logf), RelayError))


if __name__ == "__main__":
    raise SystemExit(main())

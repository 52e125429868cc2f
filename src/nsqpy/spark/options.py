"""The ``nsq`` data source's options: parsed and validated without pyspark.

Spark hands a data source its options as a ``CaseInsensitiveDict`` whose keys are stored
lower-cased. Turning it into a plain ``dict`` and then looking up ``"maxInFlight"`` silently
finds nothing, so every lookup here lower-cases both sides (``_Lookup``). Values are strings;
durations use Go syntax (``120s``, ``500ms``) like every other nsqpy flag, booleans Go's
``strconv.ParseBool`` forms (``true``/``false``/``1``/``0``...).

Unknown options are rejected by name: a misspelt ``maxRecordPerBatch`` would otherwise be
ignored and the query would run with the default. Every message starts with ``nsq source:`` or
``nsq sink:`` and names the option, since it becomes the first line of Spark's error (source.py).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from nsqpy._internal.duration import MINUTE, SECOND, parse_go_duration
from nsqpy._internal.gostrconv import GoNumError, parse_go_bool, parse_go_int
from nsqpy.client.config import Config
from nsqpy.client.connection import split_address
from nsqpy.protocol.names import is_valid_name

#: ``nsq.<name>`` options go to ``Config.set(name, value)``.
PASSTHROUGH_PREFIX: Final = "nsq."
#: nsqd's default --max-msg-timeout: a longer msgTimeout is refused at IDENTIFY.
MAX_MSG_TIMEOUT: Final = 15 * MINUTE / SECOND
#: nsqd's minimum msg_timeout for IDENTIFY (1 s).
MIN_MSG_TIMEOUT: Final = 1.0
#: nsqd's default --max-body-size is 5 MiB; stay well under it with the MPUB framing.
DEFAULT_MPUB_MAX_BYTES: Final = 4 * 1024 * 1024
#: Keep each micro-batch's payload far below spark.rpc.message.maxSize (128 MiB).
DEFAULT_MAX_BYTES_PER_BATCH: Final = 64 * 1024 * 1024
#: Arrow binary columns use int32 offsets: one batch must stay far below 2 GiB.
MAX_BYTES_PER_BATCH: Final = 1024 * 1024 * 1024
#: How a stream reads (docs/spark.md, "Two ways to read"): leases when every nsqd has them
#: (``auto``), always (``lease``), or through the driver (``driver``).
MODES: Final = ("auto", "lease", "driver")
#: How long a micro-batch's leases wait for their commit before nsqd requeues them.
DEFAULT_LEASE_TTL: Final = 10 * MINUTE / SECOND

#: go-nsq options the source sets itself: passing them through would break its accounting.
_OWNED_BY_SOURCE: Final = {
    "max_in_flight": "maxInFlight",
    "msg_timeout": "msgTimeout",
    "max_attempts": "(none: the source never gives up on a message, see docs/spark.md)",
}

#: Options Spark itself may add to a data source's options (not ours to reject).
_SPARK_KEYS: Final = frozenset({"path", "paths", "checkpointlocation", "queryname"})

READ_NAMES: Final = (
    "nsqd", "lookupd", "topic", "channel", "maxInFlight", "maxRecordsPerBatch",
    "maxBytesPerBatch", "minRecordsPerBatch", "maxTriggerDelay", "msgTimeout",
    "numPartitions", "pollTimeout", "commitTick", "requeueOnStop", "maxRecords",
    "idleTimeout", "mode", "leaseTTL",
)  # fmt: skip
WRITE_NAMES: Final = ("nsqd", "topic", "mpubBatch", "mpubMaxBytes")
READ_KEYS: Final = frozenset(k.lower() for k in READ_NAMES)
WRITE_KEYS: Final = frozenset(k.lower() for k in WRITE_NAMES)
#: Who speaks in the messages: the reader or the writer.
SOURCE: Final = "nsq source"
SINK: Final = "nsq sink"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Everything the streaming and the batch reader need; picklable, immutable."""

    topic: str
    channel: str
    nsqd: tuple[str, ...] = ()
    lookupd: tuple[str, ...] = ()
    max_in_flight: int = 60_000
    max_records_per_batch: int = 20_000
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES_PER_BATCH
    min_records_per_batch: int = 0
    max_trigger_delay: float = 15 * 60.0
    msg_timeout: float = 120.0
    num_partitions: int = 2
    poll_timeout: float = 1.0
    commit_tick: bool = True
    requeue_on_stop: bool = True
    max_records: int = 100_000
    idle_timeout: float = 1.0
    mode: str = "auto"
    lease_ttl: float = DEFAULT_LEASE_TTL
    client_options: tuple[tuple[str, str], ...] = ()

    def client_config(self) -> Config:
        """The consumer's Config: passthrough options, then the ones the source owns."""
        config = Config()
        for name, text in self.client_options:
            config.set(name, text)
        config.max_in_flight = self.max_in_flight
        config.msg_timeout = self.msg_timeout
        # go-nsq's default (5) would FIN and drop a message redelivered a 6th time, e.g. after
        # a few driver crashes: data loss the user never asked for.
        config.max_attempts = 0
        return config


@dataclass(frozen=True, slots=True)
class WriteOptions:
    nsqd: tuple[str, ...]
    topic: str | None = None
    mpub_batch: int = 500
    mpub_max_bytes: int = DEFAULT_MPUB_MAX_BYTES
    client_options: tuple[tuple[str, str], ...] = field(default=())

    def client_config(self) -> Config:
        config = Config()
        for name, text in self.client_options:
            config.set(name, text)
        return config


_READ_DEFAULTS: Final = ReadOptions(topic="-", channel="-")
_WRITE_DEFAULTS: Final = WriteOptions(nsqd=())


class _Lookup:
    """Case-insensitive read access to Spark's option mapping (never ``dict()`` it).

    ``who`` (``nsq source`` or ``nsq sink``) starts every error message.
    """

    def __init__(self, options: Mapping[str, str], who: str) -> None:
        self._values = {str(k).lower(): str(v) for k, v in options.items()}
        self.who = who

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return None if value is None else value.strip()

    def passthrough(self) -> tuple[tuple[str, str], ...]:
        n = len(PASSTHROUGH_PREFIX)
        return tuple(
            (k[n:], v) for k, v in sorted(self._values.items()) if k.startswith(PASSTHROUGH_PREFIX)
        )


# --- entry points ----------------------------------------------------------------------------


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Validate the options of ``spark.read(Stream).format("nsq")``; ValueError names the option."""
    opts = _Lookup(options, SOURCE)
    _reject_unknown(opts, READ_NAMES, WRITE_NAMES)
    nsqd, lookupd = _nsqd_list(opts, "nsqd"), _lookupd_list(opts)
    if not nsqd and not lookupd:
        raise ValueError(f"{SOURCE}: option 'nsqd' (host:port,...) or 'lookupd' is required")
    max_in_flight = _int(opts, "maxInFlight", _READ_DEFAULTS.max_in_flight, 1)
    max_bytes = _int(opts, "maxBytesPerBatch", _READ_DEFAULTS.max_bytes_per_batch, 1)
    if max_bytes > MAX_BYTES_PER_BATCH:
        raise ValueError(f"{SOURCE}: option 'maxBytesPerBatch' must be <= 1 GiB, got {max_bytes}")
    msg_timeout = _duration(opts, "msgTimeout", _READ_DEFAULTS.msg_timeout)
    if not MIN_MSG_TIMEOUT <= msg_timeout <= MAX_MSG_TIMEOUT:
        raise ValueError(
            f"{SOURCE}: option 'msgTimeout' must be between 1s and 15m "
            f"(nsqd's --max-msg-timeout), got {opts.get('msgTimeout')!r}"
        )
    client_options = _client_options(opts, reading=True)
    mode, lease_ttl = _mode(opts), _duration(opts, "leaseTTL", DEFAULT_LEASE_TTL)
    if not MIN_MSG_TIMEOUT <= lease_ttl <= MAX_MSG_TIMEOUT:
        raise ValueError(
            f"{SOURCE}: option 'leaseTTL' must be between 1s and 15m "
            f"(nsqd's --max-msg-timeout), got {opts.get('leaseTTL')!r}"
        )
    min_records = _int(opts, "minRecordsPerBatch", 0, 0)
    if mode == "lease" and min_records:
        raise ValueError(
            f"{SOURCE}: option 'minRecordsPerBatch' needs mode 'driver' (or 'auto', which then "
            "reads driver-side): a lease cannot be held back once taken"
        )
    return ReadOptions(
        topic=_name(opts, "topic"),
        channel=_name(opts, "channel"),
        nsqd=nsqd,
        lookupd=lookupd,
        max_in_flight=max_in_flight,
        # one knob for the common case: a third of the window per batch leaves room for the
        # batch being written and the one waiting for its commit (see docs/spark.md)
        max_records_per_batch=_int(
            opts, "maxRecordsPerBatch", max(1, max_in_flight // 3), 1
        ),
        max_bytes_per_batch=max_bytes,
        min_records_per_batch=min_records,
        max_trigger_delay=_duration(opts, "maxTriggerDelay", _READ_DEFAULTS.max_trigger_delay),
        msg_timeout=msg_timeout,
        num_partitions=_int(opts, "numPartitions", _READ_DEFAULTS.num_partitions, 1),
        poll_timeout=_duration(opts, "pollTimeout", _READ_DEFAULTS.poll_timeout),
        commit_tick=_bool(opts, "commitTick", True),
        requeue_on_stop=_bool(opts, "requeueOnStop", True),
        max_records=_int(opts, "maxRecords", _READ_DEFAULTS.max_records, 1),
        idle_timeout=_duration(opts, "idleTimeout", _READ_DEFAULTS.idle_timeout),
        mode=mode,
        lease_ttl=lease_ttl,
        client_options=client_options,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate the options of ``df.write(Stream).format("nsq")``."""
    opts = _Lookup(options, SINK)
    _reject_unknown(opts, WRITE_NAMES, READ_NAMES)
    nsqd = _nsqd_list(opts, "nsqd")
    if not nsqd:
        raise ValueError(f"{SINK}: option 'nsqd' (host:port,...) is required")
    topic = _name(opts, "topic") if opts.get("topic") else None
    return WriteOptions(
        nsqd=nsqd,
        topic=topic,
        mpub_batch=_int(opts, "mpubBatch", _WRITE_DEFAULTS.mpub_batch, 1),
        mpub_max_bytes=_int(opts, "mpubMaxBytes", _WRITE_DEFAULTS.mpub_max_bytes, 16),
        client_options=_client_options(opts, reading=False),
    )


# --- single values ---------------------------------------------------------------------------


def _reject_unknown(opts: _Lookup, names: tuple[str, ...], other: tuple[str, ...]) -> None:
    """Refuse keys that are not ours, naming the option meant when it looks misspelt."""
    known = {name.lower(): name for name in names}
    for key in opts:
        if key in known or key in _SPARK_KEYS or key.startswith(PASSTHROUGH_PREFIX):
            continue
        role = "writing" if opts.who == SOURCE else "reading"
        if key in {name.lower() for name in other}:
            hint = f": it is an option for {role} only"
        elif close := difflib.get_close_matches(key, known, n=1, cutoff=0.75):
            hint = f"; did you mean {known[close[0]]!r}?"
        else:
            hint = ""
        raise ValueError(
            f"{opts.who}: unknown option {key!r}{hint} "
            "(option names are case-insensitive; docs/spark.md lists them)"
        )


def _name(opts: _Lookup, name: str) -> str:
    value = opts.get(name)
    if not value:
        raise ValueError(f"{opts.who}: option {name!r} is required")
    if not is_valid_name(value):
        raise ValueError(
            f"{opts.who}: option {name!r}: invalid NSQ name {value!r} "
            "(1-64 characters of [.a-zA-Z0-9_-], optionally ending in #ephemeral)"
        )
    return value


def _nsqd_list(opts: _Lookup, name: str) -> tuple[str, ...]:
    out = []
    for address in _split(opts.get(name)):
        try:
            split_address(address)
        except ValueError:
            raise ValueError(
                f"{opts.who}: option {name!r}: invalid address {address!r} (want host:port)"
            ) from None
        out.append(address)
    return tuple(out)


def _lookupd_list(opts: _Lookup) -> tuple[str, ...]:
    out = []
    for address in _split(opts.get("lookupd")):
        url = address if "://" in address else "http://" + address
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
            raise ValueError(
                f"{opts.who}: option 'lookupd': invalid HTTP address {address!r} "
                "(want host:port or http://host:port)"
            )
        out.append(address)
    return tuple(out)


def _split(value: str | None) -> list[str]:
    return [a.strip() for a in (value or "").split(",") if a.strip()]


def _int(opts: _Lookup, name: str, default: int, minimum: int) -> int:
    text = opts.get(name)
    if text is None or text == "":
        return default
    try:
        value = parse_go_int(text)
    except GoNumError:
        raise ValueError(f"{opts.who}: option {name!r}: not an integer: {text!r}") from None
    if value < minimum:
        raise ValueError(f"{opts.who}: option {name!r} must be >= {minimum}, got {value}")
    return value


def _duration(opts: _Lookup, name: str, default: float) -> float:
    text = opts.get(name)
    if text is None or text == "":
        return default
    try:
        ns = parse_go_duration(text)
    except ValueError:
        raise ValueError(
            f"{opts.who}: option {name!r}: invalid duration {text!r} "
            "(Go syntax, e.g. 120s, 500ms, 2m)"
        ) from None
    if ns < 0:
        raise ValueError(f"{opts.who}: option {name!r} must not be negative, got {text!r}")
    seconds = ns / SECOND
    if not math.isfinite(seconds):
        raise ValueError(f"{opts.who}: option {name!r}: duration out of range: {text!r}")
    return seconds


def _mode(opts: _Lookup) -> str:
    text = (opts.get("mode") or "auto").lower()
    if text not in MODES:
        raise ValueError(f"{opts.who}: option 'mode' must be one of {', '.join(MODES)}, got "
                         f"{opts.get('mode')!r}")  # fmt: skip
    return text


def _bool(opts: _Lookup, name: str, default: bool) -> bool:
    text = opts.get(name)
    if text is None or text == "":
        return default
    try:
        return parse_go_bool(text)
    except GoNumError:
        raise ValueError(
            f"{opts.who}: option {name!r}: not a boolean: {text!r} (true/false)"
        ) from None


def _client_options(opts: _Lookup, *, reading: bool) -> tuple[tuple[str, str], ...]:
    """``nsq.*`` options, each checked by applying it to a throw-away Config."""
    pairs = opts.passthrough()
    probe = Config()
    for name, text in pairs:
        owner = _OWNED_BY_SOURCE.get(name)
        if reading and owner is not None:
            raise ValueError(f"{opts.who}: option 'nsq.{name}' is set by the source; use {owner}")
        try:
            probe.set(name, text)
        except ValueError as exc:
            raise ValueError(f"{opts.who}: option 'nsq.{name}': {exc}") from None
    return pairs

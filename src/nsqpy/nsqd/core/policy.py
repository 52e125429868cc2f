"""Dead letters and message TTL: what a topic or channel sets, and what applies to a channel.

nsqd has neither (NSQ #974, #1396, #591); nsqpy adds them without changing anything for who
does not ask. Three settings, each held by a topic (as a default for its channels), by a
channel, or node-wide by a flag:

=================  ================  =========================================================
setting            node flag         meaning
=================  ================  =========================================================
max_attempts       --max-attempts    a message about to be delivered for the (N+1)th time goes
                                     to the dead-letter topic instead (0: never, NSQ's way)
message_ttl        --message-ttl     a message older than this (by its timestamp) is not
                                     delivered: dead-lettered if there is a dead-letter topic,
                                     else dropped (0: never)
dead_letter_topic  --dead-letter-    where dead letters go; by default ``<topic><suffix>``
                   suffix            (``.dead``), kept before ``#ephemeral``
=================  ================  =========================================================

A channel's own setting wins over its topic's, which wins over the node's. Node defaults do
not apply to dead-letter topics themselves (names ending in the suffix, or named as a
dead-letter topic by some topic or channel), so dead letters do not cascade on their own.
Without ``max_attempts`` a channel has a dead-letter topic only if one is set explicitly; so
TTL alone drops expired messages, as RabbitMQ does without a dead-letter exchange.

Everything here is pure: the HTTP adapter parses with ``parse_update``, nsqd.dat stores
``Settings.to_json()``, the broker calls ``resolve``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Final

from nsqpy._internal.duration import format_go_duration, parse_go_duration
from nsqpy.protocol.names import EPHEMERAL_SUFFIX, is_ephemeral, is_valid_name

KEYS: Final = ("max_attempts", "message_ttl", "dead_letter_topic")
#: Attempts travel as a uint16 on the wire, so a larger limit could never be reached.
MAX_ATTEMPTS_LIMIT: Final = 65535
DEFAULT_SUFFIX: Final = ".dead"
_SUFFIX: Final = re.compile(r"[.a-zA-Z0-9_-]{1,63}")


class SettingsError(ValueError):
    """A setting that cannot be taken; ``str(err)`` is the 400 body's message."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


@dataclass(frozen=True, slots=True)
class Settings:
    """What one topic or channel sets itself; ``None`` inherits (channel → topic → node)."""

    max_attempts: int | None = None
    message_ttl: int | None = None  # ns
    dead_letter_topic: str | None = None

    @property
    def empty(self) -> bool:
        return self.max_attempts is None and self.message_ttl is None and not self.dead_letter_topic

    def to_json(self) -> dict[str, object]:
        """Every key, ``null`` where inherited; ``message_ttl`` as a Go duration string."""
        return {
            "max_attempts": self.max_attempts,
            "message_ttl": None
            if self.message_ttl is None
            else format_go_duration(self.message_ttl),
            "dead_letter_topic": self.dead_letter_topic,
        }

    def set_fields(self) -> dict[str, object]:
        """Only the keys that are set (nsqd.dat's extra fields)."""
        return {k: v for k, v in self.to_json().items() if v is not None}

    def updated(self, changes: dict[str, object]) -> Settings:
        """A copy with ``changes`` (from ``parse_update``) applied."""
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class NodeDefaults:
    """The node-wide flags."""

    max_attempts: int = 0
    message_ttl: int = 0
    dead_letter_suffix: str = DEFAULT_SUFFIX


@dataclass(frozen=True, slots=True)
class Effective:
    """What applies to one channel. ``dead_letter_topic`` is "" when diverted messages are
    dropped; ``problem`` says why ``max_attempts`` had to be turned off (else "")."""

    max_attempts: int = 0
    message_ttl: int = 0
    dead_letter_topic: str = ""
    problem: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "max_attempts": self.max_attempts,
            "message_ttl": format_go_duration(self.message_ttl),
            "dead_letter_topic": self.dead_letter_topic,
        }


OFF: Final = Effective()


def split_ephemeral(name: str) -> tuple[str, str]:
    """``("foo", "#ephemeral")`` for ``foo#ephemeral``; ``(name, "")`` otherwise."""
    if is_ephemeral(name):
        return name[: -len(EPHEMERAL_SUFFIX)], EPHEMERAL_SUFFIX
    return name, ""


def default_dead_letter_topic(topic: str, suffix: str) -> str:
    """``<topic><suffix>``, the suffix going before ``#ephemeral``; "" if that is no valid
    topic name (too long)."""
    base, ephemeral = split_ephemeral(topic)
    name = base + suffix + ephemeral
    return name if is_valid_name(name) else ""


def has_dead_letter_suffix(topic: str, suffix: str) -> bool:
    return split_ephemeral(topic)[0].endswith(suffix)


def check_suffix(suffix: str) -> None:
    """``--dead-letter-suffix`` must keep topic names valid: 1-63 of ``[.a-zA-Z0-9_-]``."""
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(
            f"--dead-letter-suffix {json.dumps(suffix)} must be 1 to 63 characters of "
            "[.a-zA-Z0-9_-]"
        )


def resolve(
    node: NodeDefaults,
    topic: str,
    topic_settings: Settings,
    channel_settings: Settings,
    *,
    exempt: bool = False,
) -> Effective:
    """What applies to a channel of ``topic``: its own settings, else its topic's, else the
    node's (unless ``exempt``: the topic is itself a dead-letter topic)."""
    max_attempts = _pick(
        channel_settings.max_attempts, topic_settings.max_attempts, node.max_attempts, exempt
    )
    ttl = _pick(channel_settings.message_ttl, topic_settings.message_ttl, node.message_ttl, exempt)
    explicit = channel_settings.dead_letter_topic or topic_settings.dead_letter_topic
    if explicit:
        return Effective(max_attempts, ttl, explicit)
    if not max_attempts:
        return Effective(0, ttl, "")
    derived = default_dead_letter_topic(topic, node.dead_letter_suffix)
    if derived:
        return Effective(max_attempts, ttl, derived)
    problem = (
        f"the default dead-letter topic for {json.dumps(topic)} would be "
        f"{json.dumps(split_ephemeral(topic)[0] + node.dead_letter_suffix)}, which is not a valid "
        "topic name: set dead_letter_topic"
    )
    return Effective(0, ttl, "", problem)


def _pick(own: int | None, topic: int | None, node: int, exempt: bool) -> int:
    if own is not None:
        return own
    if topic is not None:
        return topic
    return 0 if exempt else node


# -- parsing what a user sends ------------------------------------------------------------------


def parse_update(body: bytes, source_topic: str) -> dict[str, object]:
    """Validate a ``POST /topic/config`` or ``/channel/config`` body, a JSON object with any
    of ``KEYS``; ``null`` (or ``""`` for the topic) removes the setting. Returns the changes
    for ``Settings.updated``; raises SettingsError and changes nothing on any bad key."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise SettingsError("INVALID_BODY", "the body must be a JSON object") from None
    if not isinstance(doc, dict):
        raise SettingsError("INVALID_BODY", "the body must be a JSON object")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise SettingsError(
            "INVALID_BODY",
            f"unknown key {json.dumps(unknown[0])} (known: {', '.join(KEYS)})",
        )
    changes: dict[str, object] = {}
    if "max_attempts" in doc:
        changes["max_attempts"] = _max_attempts(doc["max_attempts"])
    if "message_ttl" in doc:
        changes["message_ttl"] = _message_ttl(doc["message_ttl"])
    if "dead_letter_topic" in doc:
        changes["dead_letter_topic"] = _dead_letter_topic(doc["dead_letter_topic"], source_topic)
    return changes


def _max_attempts(value: object) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_ATTEMPTS_LIMIT
    ):
        raise SettingsError(
            "INVALID_MAX_ATTEMPTS",
            f"max_attempts must be an integer from 0 to {MAX_ATTEMPTS_LIMIT} (0: never "
            f"dead-letter) or null, not {json.dumps(value)}",
        )
    return value


def _message_ttl(value: object) -> int | None:
    if value is None:
        return None
    ns: int | None = None
    if isinstance(value, str):
        try:
            ns = parse_go_duration(value)
        except ValueError:
            ns = None
    if ns is not None and ns >= 0:
        return ns
    want = "not negative" if ns is not None else 'a Go duration string such as "90s" or "1h30m"'
    raise SettingsError(
        "INVALID_MESSAGE_TTL",
        f'message_ttl must be {want} ("0s": no TTL) or null, not {json.dumps(value)}',
    )


def _dead_letter_topic(value: object, source_topic: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not is_valid_name(value):
        raise SettingsError(
            "INVALID_DEAD_LETTER_TOPIC",
            f"dead_letter_topic {json.dumps(value)} is not a valid topic name "
            "(1-64 characters of [.a-zA-Z0-9_-], optionally ending in #ephemeral)",
        )
    if value == source_topic:
        raise SettingsError(
            "INVALID_DEAD_LETTER_TOPIC",
            f"dead_letter_topic {json.dumps(value)} is the source topic itself",
        )
    return value


def settings_from_json(doc: object, source_topic: str) -> Settings:
    """nsqd.dat's extra fields for one topic or channel. Raises SettingsError for a bad
    value, so the caller can log it and load the entry without its settings."""
    if not isinstance(doc, dict):
        return Settings()
    fields = {k: doc[k] for k in KEYS if doc.get(k) is not None}
    if not fields:
        return Settings()
    return Settings().updated(parse_update(json.dumps(fields).encode(), source_topic))

"""Dead-letter and TTL settings as nsqpy's nsqd reports them, and the bodies that change them.

nsqd's ``/topic/config`` and ``/channel/config`` speak JSON with ``message_ttl`` as a Go
duration string; here it is seconds (a float), with nsqd's own text kept beside it. A setting
is ``None`` where the topic or channel inherits it (channel → topic → node); ``effective`` is
what applies.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from nsqpy._internal.duration import SECOND, format_go_duration, parse_go_duration


class Unset(enum.Enum):
    """Type of ``UNSET``: an enum member, so type checkers can tell it from ``None``."""

    UNSET = enum.auto()


#: "Leave this setting as it is" (``None`` clears it).
UNSET: Final = Unset.UNSET

#: What ``message_ttl`` accepts: seconds, a Go duration string ("90s", "1h30m") or a timedelta.
TTL = float | str | timedelta


@dataclass(frozen=True, slots=True)
class EffectiveConfig:
    """What applies. ``dead_letter_topic`` is "" when there is none (expired messages are then
    dropped); ``message_ttl`` 0 and ``max_attempts`` 0 mean off."""

    max_attempts: int
    message_ttl: float
    dead_letter_topic: str
    message_ttl_text: str


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A topic's (``channel`` None) or channel's own settings, ``None`` where inherited.

    For a topic, ``effective`` is what a channel of it with no settings of its own gets.
    """

    topic: str
    channel: str | None
    max_attempts: int | None
    message_ttl: float | None
    dead_letter_topic: str | None
    message_ttl_text: str | None
    effective: EffectiveConfig

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> QueueConfig:
        ttl = doc["message_ttl"]
        eff = doc["effective"]
        return cls(
            topic=doc["topic_name"],
            channel=doc.get("channel_name"),
            max_attempts=doc["max_attempts"],
            message_ttl=None if ttl is None else _seconds(ttl),
            dead_letter_topic=doc["dead_letter_topic"],
            message_ttl_text=ttl,
            effective=EffectiveConfig(
                max_attempts=eff["max_attempts"],
                message_ttl=_seconds(eff["message_ttl"]),
                dead_letter_topic=eff["dead_letter_topic"],
                message_ttl_text=eff["message_ttl"],
            ),
        )


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """``redriven`` letters went back to their channel; ``kept`` stayed in the dead-letter topic
    (they came from another channel, or theirs no longer exists)."""

    dead_letter_topic: str
    redriven: int
    kept: int

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RedriveResult:
        return cls(doc["dead_letter_topic"], doc["redriven"], doc["kept"])


def settings_body(
    max_attempts: int | Unset | None,
    message_ttl: TTL | Unset | None,
    dead_letter_topic: str | Unset | None,
) -> dict[str, object]:
    """The POST body: only the keys given, ``null`` for those to clear."""
    body: dict[str, object] = {}
    if max_attempts is not UNSET:
        body["max_attempts"] = max_attempts
    if message_ttl is not UNSET:
        body["message_ttl"] = None if message_ttl is None else go_duration(message_ttl)
    if dead_letter_topic is not UNSET:
        body["dead_letter_topic"] = dead_letter_topic
    return body


def go_duration(value: TTL) -> str:
    """Seconds or a timedelta as Go duration text (90 → "1m30s"); a string is sent as it is,
    so nsqd alone decides what it accepts."""
    if isinstance(value, str):
        return value
    if isinstance(value, timedelta):
        # whole microseconds, exactly: no trip through a float
        return format_go_duration(value // timedelta(microseconds=1) * 1000)
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"message_ttl must be a finite number of seconds, not {value!r}")
    return format_go_duration(round(value * SECOND))


def _seconds(text: str) -> float:
    return parse_go_duration(text) / SECOND

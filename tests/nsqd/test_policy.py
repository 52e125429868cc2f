"""Dead-letter and TTL settings: parsing what users send, and what applies to a channel."""

from __future__ import annotations

import json

import pytest

from nsqpy._internal.duration import HOUR, MINUTE, SECOND
from nsqpy.nsqd.core.policy import (
    NodeDefaults,
    Settings,
    SettingsError,
    check_suffix,
    default_dead_letter_topic,
    parse_update,
    resolve,
    settings_from_json,
)


def update(doc: object, topic: str = "orders") -> dict[str, object]:
    return parse_update(json.dumps(doc).encode(), topic)


def test_a_full_update_and_nulls_that_clear() -> None:
    assert update({"max_attempts": 5, "message_ttl": "1h30m", "dead_letter_topic": "failed"}) == {
        "max_attempts": 5,
        "message_ttl": HOUR + 30 * MINUTE,
        "dead_letter_topic": "failed",
    }
    cleared = {"max_attempts": None, "message_ttl": None, "dead_letter_topic": None}
    assert update(cleared) == cleared
    assert update({"dead_letter_topic": ""}) == {"dead_letter_topic": None}
    assert update({}) == {}
    assert update({"max_attempts": 0, "message_ttl": "0s"}) == {"max_attempts": 0, "message_ttl": 0}


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        (b"", "INVALID_BODY", "JSON object"),
        (b"not json", "INVALID_BODY", "JSON object"),
        (b"[1]", "INVALID_BODY", "JSON object"),
        (b'{"max_attempts": 1, "colour": "red"}', "INVALID_BODY", 'unknown key "colour"'),
        (b'{"max_attempts": -1}', "INVALID_MAX_ATTEMPTS", "not -1"),
        (b'{"max_attempts": "5"}', "INVALID_MAX_ATTEMPTS", 'not "5"'),
        (b'{"max_attempts": 2.5}', "INVALID_MAX_ATTEMPTS", "not 2.5"),
        (b'{"max_attempts": true}', "INVALID_MAX_ATTEMPTS", "not true"),
        (b'{"max_attempts": 65536}', "INVALID_MAX_ATTEMPTS", "from 0 to 65535"),
        (b'{"message_ttl": "soon"}', "INVALID_MESSAGE_TTL", "Go duration"),
        (b'{"message_ttl": "10"}', "INVALID_MESSAGE_TTL", "Go duration"),
        (b'{"message_ttl": 10}', "INVALID_MESSAGE_TTL", "not 10"),
        (b'{"message_ttl": "-5s"}', "INVALID_MESSAGE_TTL", "not negative"),
        (b'{"dead_letter_topic": "no spaces"}', "INVALID_DEAD_LETTER_TOPIC", "not a valid"),
        (b'{"dead_letter_topic": "' + b"x" * 65 + b'"}', "INVALID_DEAD_LETTER_TOPIC", "valid"),
        (b'{"dead_letter_topic": 7}', "INVALID_DEAD_LETTER_TOPIC", "not a valid"),
        (b'{"dead_letter_topic": "orders"}', "INVALID_DEAD_LETTER_TOPIC", "source topic"),
    ],
)
def test_bad_input_is_refused_with_a_code_and_a_reason(body: bytes, code: str, needle: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_update(body, "orders")
    assert info.value.code == code
    assert str(info.value).startswith(f"{code}: ")
    assert needle in str(info.value)


def test_one_bad_key_refuses_the_whole_update() -> None:
    with pytest.raises(SettingsError):
        update({"max_attempts": 3, "message_ttl": "forever"})


def test_settings_json_and_set_fields() -> None:
    settings = Settings(max_attempts=3, message_ttl=90 * SECOND)
    assert settings.to_json() == {
        "max_attempts": 3,
        "message_ttl": "1m30s",
        "dead_letter_topic": None,
    }
    assert settings.set_fields() == {"max_attempts": 3, "message_ttl": "1m30s"}
    assert settings_from_json(settings.set_fields(), "t") == settings
    assert Settings().empty and not settings.empty


def test_settings_from_json_refuses_bad_values() -> None:
    with pytest.raises(SettingsError):
        settings_from_json({"name": "c", "max_attempts": -2}, "t")
    assert settings_from_json({"name": "c", "paused": False}, "t") == Settings()


NODE = NodeDefaults(max_attempts=10, message_ttl=HOUR)


def test_the_channel_wins_over_the_topic_which_wins_over_the_node() -> None:
    assert resolve(NODE, "t", Settings(), Settings()).to_json() == {
        "max_attempts": 10,
        "message_ttl": "1h0m0s",
        "dead_letter_topic": "t.dead",
    }
    topic = Settings(max_attempts=4, dead_letter_topic="failures")
    channel = Settings(max_attempts=2, message_ttl=0)
    effective = resolve(NODE, "t", topic, channel)
    assert (effective.max_attempts, effective.message_ttl) == (2, 0)
    assert effective.dead_letter_topic == "failures"
    # an explicit 0 turns it off for the channel even though the node asks for 10
    assert resolve(NODE, "t", Settings(), Settings(max_attempts=0)).max_attempts == 0


def test_ttl_alone_has_no_dead_letter_topic_unless_one_is_set() -> None:
    node = NodeDefaults(message_ttl=SECOND)
    assert resolve(node, "t", Settings(), Settings()).dead_letter_topic == ""
    named = Settings(dead_letter_topic="expired")
    assert resolve(node, "t", named, Settings()).dead_letter_topic == "expired"


def test_dead_letter_topics_ignore_the_node_defaults() -> None:
    exempt = resolve(NODE, "t.dead", Settings(), Settings(), exempt=True)
    assert (exempt.max_attempts, exempt.message_ttl) == (0, 0)
    # what is set on the dead-letter topic itself still applies
    own = resolve(NODE, "t.dead", Settings(message_ttl=SECOND), Settings(), exempt=True)
    assert own.message_ttl == SECOND


def test_default_name_keeps_ephemeral_last_and_a_custom_suffix() -> None:
    assert default_dead_letter_topic("orders", ".dead") == "orders.dead"
    assert default_dead_letter_topic("orders#ephemeral", ".dead") == "orders.dead#ephemeral"
    assert default_dead_letter_topic("orders", "_dlq") == "orders_dlq"
    assert default_dead_letter_topic("x" * 60, ".dead") == ""  # 65 bytes: not a topic name


def test_a_default_name_too_long_turns_max_attempts_off_and_says_why() -> None:
    effective = resolve(NODE, "x" * 60, Settings(), Settings())
    assert effective.max_attempts == 0 and effective.dead_letter_topic == ""
    assert "not a valid topic name: set dead_letter_topic" in effective.problem
    named = resolve(NODE, "x" * 60, Settings(dead_letter_topic="long.dead"), Settings())
    assert named.max_attempts == 10 and not named.problem


@pytest.mark.parametrize("suffix", ["", "has space", "#ephemeral", "x" * 64, "é"])
def test_bad_suffixes(suffix: str) -> None:
    with pytest.raises(ValueError, match="--dead-letter-suffix"):
        check_suffix(suffix)


def test_good_suffixes() -> None:
    for suffix in (".dead", "_dlq", "-failed", "x" * 63):
        check_suffix(suffix)

"""nsq_to_nsq's JSON filters: ``--require-json-field``/``--require-json-value`` and
``--whitelist-json-field``, with the semantics of Go's ``encoding/json`` as NSQ uses it.

A body is decoded like ``json.Unmarshal`` into ``map[string]interface{}``: numbers become
float64, ``null`` is an empty map, anything else that is not an object is a decode error. A
whitelisted copy is re-encoded like ``json.Marshal`` of a map: keys sorted, integral top-level
numbers written as integers.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nsqpy._internal import gojson
from nsqpy._internal.gostrconv import GoNumError, parse_go_float

_INT64_MIN: Final = -(1 << 63)
_INT64_END: Final = 1 << 63


class Verdict(enum.Enum):
    """What to do with a message."""

    PASS = "pass"  # publish the (possibly filtered) body
    DROP = "drop"  # FIN without publishing
    BACKOFF = "backoff"  # REQ with backoff (the required field is missing)


class NotJSONObject(ValueError):
    """The body is not a JSON object (Go: ``Unable to decode json``)."""


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # Go cannot hold it in a float64 and fails the decode
        raise ValueError(f"number {text} out of range")
    return value


def _no_constants(name: str) -> object:
    raise ValueError(f"invalid character in {name}")  # Go has no NaN/Infinity literals


def _sorted_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Go marshals maps with their keys sorted; later duplicates win, as in Go's decoder.
    return dict(sorted(dict(pairs).items()))


def decode_object(body: bytes) -> dict[str, object]:
    """Decode like Go's ``json.Unmarshal`` into a map; NotJSONObject if it cannot."""
    text = body.decode("utf-8", errors="replace")  # Go replaces invalid UTF-8 with U+FFFD
    try:
        value = json.loads(
            text,
            parse_int=_finite,
            parse_float=_finite,
            parse_constant=_no_constants,
            object_pairs_hook=_sorted_object,
        )
    except ValueError as err:
        raise NotJSONObject(str(err)) from None
    if value is None:
        return {}  # Go leaves the map nil: every lookup misses
    if not isinstance(value, dict):
        raise NotJSONObject(f"cannot unmarshal {type(value).__name__} into a map")
    return value


@dataclass(frozen=True, slots=True)
class JSONFilter:
    """The filter flags; ``active`` says whether bodies need decoding at all."""

    require_field: str = ""
    require_value: str = ""
    whitelist: Sequence[str] = ()

    @property
    def active(self) -> bool:
        return bool(self.require_field) or bool(self.whitelist)

    def verdict(self, obj: dict[str, object]) -> Verdict:
        """Go's shouldPassMessage: PASS, DROP, or BACKOFF when the required field is missing
        and a value was required."""
        if not self.require_field:
            return Verdict.PASS
        if self.require_field not in obj:
            return Verdict.BACKOFF if self.require_value else Verdict.DROP
        if not self.require_value:
            return Verdict.PASS
        return Verdict.PASS if self._matches(obj[self.require_field]) else Verdict.DROP

    def _matches(self, value: object) -> bool:
        if isinstance(value, str):
            return value == self.require_value
        # A number matches when the required value parses as one (Go compares float64s);
        # any other type (bool, object, list, null) never matches.
        number = _as_number(self.require_value)
        return isinstance(value, float) and number is not None and value == number

    def filtered(self, obj: dict[str, object], raw: bytes) -> bytes:
        """The body to publish: unchanged without a whitelist, else the whitelisted fields."""
        if not self.whitelist:
            return raw
        kept: dict[str, object] = {}
        for key in self.whitelist:
            if key in obj:
                kept[key] = _integral(obj[key])
        return gojson.dumps(dict(sorted(kept.items())))


def _as_number(text: str) -> float | None:
    try:
        return parse_go_float(text)
    except GoNumError:
        return None


def _integral(value: object) -> object:
    """NSQ writes a top-level float64 that holds an int64 exactly as an integer."""
    if isinstance(value, float) and value.is_integer() and _INT64_MIN <= value < _INT64_END:
        return int(value)
    return value

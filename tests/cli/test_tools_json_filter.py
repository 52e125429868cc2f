"""nsq_to_nsq's JSON filters (nsqpy.tools.json_filter), against Go's encoding/json behaviour."""

from __future__ import annotations

import pytest

from nsqpy.tools.json_filter import JSONFilter, NotJSONObject, Verdict, decode_object

REQUIRE = JSONFilter(require_field="kind", require_value="keep")


def verdict(flt: JSONFilter, body: bytes) -> Verdict:
    return flt.verdict(decode_object(body))


def test_inactive_without_flags() -> None:
    assert not JSONFilter().active
    assert JSONFilter(require_field="a").active
    assert JSONFilter(whitelist=("a",)).active
    assert not JSONFilter(require_value="x").active  # a value alone filters nothing


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'"text"', b"12", b"NaN", b'{"a": Infinity}', b'{"a": 1e400}',
     b'{"a": 1'],
)  # fmt: skip
def test_bodies_that_are_not_a_json_object_fail_to_decode(body: bytes) -> None:
    with pytest.raises(NotJSONObject):
        decode_object(body)


def test_null_decodes_as_an_empty_map() -> None:
    assert decode_object(b"null") == {}
    assert verdict(JSONFilter(require_field="a"), b"null") is Verdict.DROP


def test_numbers_decode_as_float64_and_invalid_utf8_is_replaced() -> None:
    obj = decode_object(b'{"n": 3, "s": "a\xffb"}')
    assert obj == {"n": 3.0, "s": "a\ufffdb"}
    assert isinstance(obj["n"], float)


def test_require_field_and_value() -> None:
    assert verdict(REQUIRE, b'{"kind": "keep"}') is Verdict.PASS
    assert verdict(REQUIRE, b'{"kind": "drop"}') is Verdict.DROP
    # the field missing while a value is required: requeue with backoff
    assert verdict(REQUIRE, b'{"other": 1}') is Verdict.BACKOFF
    # a non-string value never equals a non-numeric required value
    assert verdict(REQUIRE, b'{"kind": true}') is Verdict.DROP
    assert verdict(REQUIRE, b'{"kind": ["keep"]}') is Verdict.DROP


def test_require_field_alone_passes_any_value_and_drops_when_missing() -> None:
    flt = JSONFilter(require_field="kind")
    assert verdict(flt, b'{"kind": null}') is Verdict.PASS
    assert verdict(flt, b'{"x": 1}') is Verdict.DROP


def test_numeric_required_value_compares_as_float64() -> None:
    flt = JSONFilter(require_field="n", require_value="5")
    assert verdict(flt, b'{"n": 5}') is Verdict.PASS
    assert verdict(flt, b'{"n": 5.0}') is Verdict.PASS
    assert verdict(flt, b'{"n": "5"}') is Verdict.PASS  # strings compare as text
    assert verdict(flt, b'{"n": "5.0"}') is Verdict.DROP
    assert verdict(flt, b'{"n": 6}') is Verdict.DROP
    assert verdict(flt, b'{"n": true}') is Verdict.DROP  # a bool is not a float64
    # Go's ParseFloat syntax for the flag value
    assert verdict(JSONFilter(require_field="n", require_value="0x10p0"), b'{"n": 16}') is (
        Verdict.PASS
    )


def test_whitelist_keeps_listed_fields_sorted_with_integral_numbers_as_ints() -> None:
    flt = JSONFilter(whitelist=("b", "a", "missing", "nested"))
    obj = decode_object(b'{"a": 2.0, "b": 1.5, "c": "gone", "nested": {"z": 1, "y": 2.0}}')
    assert flt.filtered(obj, b"raw") == b'{"a":2,"b":1.5,"nested":{"y":2,"z":1}}'


def test_whitelist_output_escapes_like_go() -> None:
    flt = JSONFilter(whitelist=("h",))
    obj = decode_object('{"h": "<a&b> é"}'.encode())
    assert flt.filtered(obj, b"") == '{"h":"\\u003ca\\u0026b\\u003e é"}'.encode()


def test_without_whitelist_the_raw_body_is_kept() -> None:
    raw = b'{ "kind" : "keep", "x": 1.0 }'
    assert REQUIRE.filtered(decode_object(raw), raw) is raw


def test_huge_integral_numbers_stay_floats() -> None:
    flt = JSONFilter(whitelist=("n",))
    assert flt.filtered(decode_object(b'{"n": 1e19}'), b"") == b'{"n":10000000000000000000}'
    assert flt.filtered(decode_object(b'{"n": -9007199254740993}'), b"") == (
        b'{"n":-9007199254740992}'  # float64 rounding, then an exact int64
    )

"""Go flag-package and go-options behaviour of nsqpy._internal.goflag."""

from __future__ import annotations

import datetime as dt
import math
import re

import pytest

from nsqpy._internal.duration import MILLISECOND, MINUTE, SECOND
from nsqpy._internal.goflag import (
    ConfigError,
    FlagError,
    FlagFatal,
    FlagKind,
    FlagSet,
    GoNumError,
    HelpRequested,
    ParsedFlags,
    format_go_float,
    format_go_value,
    go_log_line,
    go_quote,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)


def _mode(text: str, _current: object) -> object:
    """A bool-style custom flag like nsqd's --tls-required."""
    if text == "both":
        return 1
    return 2 if parse_go_bool(text) else 0


def _level(text: str, _current: object) -> object:
    if text not in ("low", "high"):
        raise ValueError(f"bad level {text!r}")
    return text


def make_set() -> FlagSet:
    fs = FlagSet("demo")
    fs.add_bool("verbose", False, "say more")
    fs.add_bool("color", True, "use colour")
    fs.add_string("name", "anon", "your name")
    fs.add_string("empty", "", "empty by default")
    fs.add_int("count", 3, "how many")
    fs.add_float("ratio", 0.5, "a ratio")
    fs.add_duration("wait", 2 * SECOND, "how long")
    fs.add_string_array("peer", "a peer (repeatable)", cfg="peers")
    fs.add_float_array("pct", "percentiles", cfg="percentiles")
    fs.add_value("level", "low", "a level", parser=_level, coerce_as=FlagKind.STRING)
    fs.add_value("mode", 0, "a mode", parser=_mode, coerce_as=FlagKind.INT, bool_style=True)
    fs.add_bool("version", False, "print version", cfg=None)
    return fs


def parse(*argv: str) -> ParsedFlags:
    return make_set().parse(list(argv))


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a parse that must fail like Go's ExitOnError; return the first stderr line."""
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    first, rest = captured.err.split("\n", 1)
    assert rest == make_set().usage()
    return first


# --- syntax -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["-name", "bob"],
        ["--name", "bob"],
        ["-name=bob"],
        ["--name=bob"],
    ],
)
def test_every_value_syntax(argv: list[str]) -> None:
    parsed = parse(*argv)
    assert parsed["name"] == "bob"
    assert parsed.is_set("name")
    assert parsed.args == ()


def test_defaults_when_nothing_given() -> None:
    parsed = parse()
    assert parsed.values == {
        "verbose": False,
        "color": True,
        "name": "anon",
        "empty": "",
        "count": 3,
        "ratio": 0.5,
        "wait": 2 * SECOND,
        "peer": [],
        "pct": [],
        "level": "low",
        "mode": 0,
        "version": False,
    }
    assert parsed.explicit == frozenset()


def test_value_may_look_like_a_flag_or_contain_equals() -> None:
    parsed = parse("-name", "-verbose", "-empty=a=b", "-count", "-7")
    assert parsed["name"] == "-verbose"
    assert parsed["empty"] == "a=b"
    assert parsed["count"] == -7
    assert not parsed.is_set("verbose")


def test_empty_value_with_equals() -> None:
    assert parse("-name=")["name"] == ""


def test_bare_bool_is_true_and_needs_equals_to_disable() -> None:
    assert parse("-verbose")["verbose"] is True
    assert parse("--color=false")["color"] is False
    # "-color false" does not consume "false": it is the first positional argument.
    parsed = parse("-color", "false", "-verbose")
    assert parsed["color"] is True
    assert parsed["verbose"] is False
    assert parsed.args == ("false", "-verbose")


@pytest.mark.parametrize("word", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true_words(word: str) -> None:
    assert parse(f"-verbose={word}")["verbose"] is True


@pytest.mark.parametrize("word", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false_words(word: str) -> None:
    assert parse(f"-color={word}")["color"] is False


def test_parsing_stops_at_first_positional() -> None:
    parsed = parse("-count=1", "file", "-count=2")
    assert parsed["count"] == 1
    assert parsed.args == ("file", "-count=2")


def test_double_dash_ends_flags_and_is_dropped() -> None:
    parsed = parse("-verbose", "--", "-count=2", "x")
    assert parsed["count"] == 3
    assert parsed.args == ("-count=2", "x")


def test_single_dash_is_positional() -> None:
    assert parse("-", "-verbose").args == ("-", "-verbose")


def test_last_scalar_wins() -> None:
    assert parse("-count=1", "--count", "5")["count"] == 5


def test_explicit_records_given_flags_even_at_default_value() -> None:
    parsed = parse("-count=3", "-color=true")
    assert parsed.explicit == frozenset({"count", "color"})


# --- value kinds ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", 10),
        ("-10", -10),
        ("+10", 10),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0o17", 15),
        ("017", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("0x_ff", 255),
        ("0", 0),
        ("9223372036854775807", (1 << 63) - 1),
        ("-9223372036854775808", -(1 << 63)),
    ],
)
def test_int_uses_base_zero_rules(text: str, value: int) -> None:
    assert parse(f"-count={text}")["count"] == value


def test_duration_and_float_values() -> None:
    parsed = parse("-wait=1m30s", "-ratio", "1e-3")
    assert parsed["wait"] == MINUTE + 30 * SECOND
    assert parsed["ratio"] == 0.001
    assert parse("-wait=0")["wait"] == 0


def test_string_array_repeats_without_comma_split() -> None:
    parsed = parse("-peer", "a:1,b:2", "--peer=c:3", "-peer=")
    assert parsed["peer"] == ["a:1,b:2", "c:3", ""]


def test_float_array_repeats_splits_and_sorts_descending() -> None:
    parsed = parse("-pct=0.5,1.0", "--pct", "0.99", "-pct=0.75,0.1")
    assert parsed["pct"] == [1.0, 0.99, 0.75, 0.5, 0.1]


def test_float_array_bad_value_is_log_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("-pct=0.5,abc")
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d Could not parse: abc\n", err)


def test_float_array_error_is_raised_without_exit() -> None:
    with pytest.raises(FlagFatal, match=r"^Could not parse: $"):
        make_set().parse_args(["-pct=0.5,"])


def test_defaults_are_not_shared_between_parses() -> None:
    fs = make_set()
    fs.parse(["-peer=a", "-pct=0.5"])
    parsed = fs.parse([])
    assert parsed["peer"] == []
    assert parsed["pct"] == []


def test_custom_value_flag() -> None:
    assert parse("-level=high")["level"] == "high"
    assert parse("--level", "low")["level"] == "low"


@pytest.mark.parametrize(
    ("argv", "value", "rest"),
    [
        (["-mode"], 2, ()),
        (["-mode=true"], 2, ()),
        (["-mode=false"], 0, ()),
        (["--mode=both"], 1, ()),
        (["-mode", "both"], 2, ("both",)),  # bool-style: never takes the next argument
    ],
)
def test_bool_style_value_flag(argv: list[str], value: int, rest: tuple[str, ...]) -> None:
    parsed = parse(*argv)
    assert parsed["mode"] == value
    assert parsed.args == rest


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-nope"], "flag provided but not defined: -nope"),
        (["--nope=1"], "flag provided but not defined: -nope"),
        (["-count=abc"], 'invalid value "abc" for flag -count: parse error'),
        (["-count", "1.5"], 'invalid value "1.5" for flag -count: parse error'),
        (["-count="], 'invalid value "" for flag -count: parse error'),
        (["-count=08"], 'invalid value "08" for flag -count: parse error'),
        (["-count=1__0"], 'invalid value "1__0" for flag -count: parse error'),
        (
            ["-count=9223372036854775808"],
            'invalid value "9223372036854775808" for flag -count: value out of range',
        ),
        (["-ratio=x"], 'invalid value "x" for flag -ratio: parse error'),
        (["-ratio=1e999"], 'invalid value "1e999" for flag -ratio: value out of range'),
        (["-wait=10"], 'invalid value "10" for flag -wait: parse error'),
        (["-wait=1d"], 'invalid value "1d" for flag -wait: parse error'),
        (["-verbose=yes"], 'invalid boolean value "yes" for -verbose: parse error'),
        (
            ["-mode=maybe"],
            'invalid boolean value "maybe" for -mode: '
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (["-level=mid"], "invalid value \"mid\" for flag -level: bad level 'mid'"),
        (["-name"], "flag needs an argument: -name"),
        (["-verbose", "--count"], "flag needs an argument: -count"),
        (["---name=x"], "bad flag syntax: ---name=x"),
        (["-=x"], "bad flag syntax: -=x"),
        (["--=x"], "bad flag syntax: --=x"),
        (["-x"], "flag provided but not defined: -x"),
    ],
)
def test_usage_errors_print_message_and_usage_then_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert usage_error(capsys, *argv) == message


def test_error_quotes_like_go(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage_error(capsys, '-count=a"b\n') == (
        'invalid value "a\\"b\\n" for flag -count: parse error'
    )


def test_parse_args_raises_instead_of_exiting() -> None:
    with pytest.raises(FlagError, match=r"^flag provided but not defined: -zzz$"):
        make_set().parse_args(["-zzz"])
    with pytest.raises(HelpRequested):
        make_set().parse_args(["-h"])


@pytest.mark.parametrize("argv", [["-h"], ["-help"], ["--help"], ["--h"], ["-help=1"]])
def test_help_prints_usage_and_exits_0(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == make_set().usage()


def test_a_defined_help_flag_is_an_ordinary_flag() -> None:
    fs = FlagSet("x")
    fs.add_bool("h", False, "host mode")
    assert fs.parse(["-h"])["h"] is True


def test_redefining_a_flag_is_an_error() -> None:
    fs = FlagSet("x")
    fs.add_bool("a", False, "")
    with pytest.raises(ValueError, match="flag redefined: a"):
        fs.add_int("a", 0, "")


# --- usage ------------------------------------------------------------------------------------


def test_usage_layout_matches_go() -> None:
    fs = FlagSet("tool")
    fs.add_string("zeta", "", "last, no default shown")
    fs.add_string("addr", "0.0.0.0:1", "listen `address`")
    fs.add_bool("x", False, "one-letter bool")
    fs.add_bool("on", True, "defaults on")
    fs.add_int("n", 0, "an int\nsecond line")
    fs.add_int("size", 7, "a size")
    fs.add_float("f", 2.5, "a float")
    fs.add_duration("every", 90 * SECOND, "an interval")
    fs.add_duration("zero", 0, "zero interval")
    fs.add_string_array("peer", "peers")
    fs.add_float_array("pct", "percentiles")
    fs.add_value(
        "lvl", "info", "level", parser=_level, coerce_as=FlagKind.STRING, default_text="INFO"
    )
    fs.add_value("req", 0, "required?", parser=_mode, coerce_as=FlagKind.INT, bool_style=True)
    assert fs.usage() == (
        "Usage of tool:\n"
        "  -addr address\n"
        '    \tlisten address (default "0.0.0.0:1")\n'
        "  -every duration\n"
        "    \tan interval (default 1m30s)\n"
        "  -f float\n"
        "    \ta float (default 2.5)\n"
        "  -lvl value\n"
        "    \tlevel (default INFO)\n"
        "  -n int\n"
        "    \tan int\n"
        "    \tsecond line\n"
        "  -on\n"
        "    \tdefaults on (default true)\n"
        "  -pct value\n"
        "    \tpercentiles\n"
        "  -peer value\n"
        "    \tpeers\n"
        "  -req\n"
        "    \trequired?\n"
        "  -size int\n"
        "    \ta size (default 7)\n"
        "  -x\tone-letter bool\n"
        "  -zero duration\n"
        "    \tzero interval\n"
        "  -zeta string\n"
        "    \tlast, no default shown\n"
    )


# --- config resolution (go-options) -----------------------------------------------------------


def resolve(argv: list[str], cfg: dict[str, object]) -> dict[str, object]:
    fs = make_set()
    return fs.resolve(fs.parse(argv), cfg)


def test_resolve_priority_flag_then_config_then_default() -> None:
    out = resolve(["-count=9"], {"count": 5, "name": "cfg", "unknown_key": 1})
    assert out["count"] == 9  # command line wins
    assert out["name"] == "cfg"  # config beats default
    assert out["ratio"] == 0.5  # default
    assert "unknown_key" not in out
    assert "version" not in out  # cfg=None flags are not resolvable


def test_flag_given_at_its_default_still_beats_config() -> None:
    assert resolve(["-count=3"], {"count": 5})["count"] == 3


def test_config_keys_use_cfg_name_or_underscored_flag_name() -> None:
    fs = FlagSet("k")
    fs.add_int("max-size", 1, "")
    fs.add_string_array("peer-addr", "", cfg="peer_addresses")
    out = fs.resolve(fs.parse([]), {"max_size": 2, "peer_addresses": ["a"], "peer_addr": ["x"]})
    assert out == {"max_size": 2, "peer_addresses": ["a"]}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("wait", 1500, 1500 * MILLISECOND),  # TOML integer = milliseconds
        ("wait", "1m", MINUTE),
        ("wait", "0", 0),
        ("count", "42", 42),
        ("count", 42, 42),
        ("count", "-7", -7),
        ("ratio", 0.25, 0.25),
        ("ratio", "0.75", 0.75),
        ("verbose", True, True),
        ("verbose", "t", True),
        ("verbose", "False", False),
        ("verbose", 0, True),  # go-options quirk: integer 0 means true
        ("verbose", 1, False),
        ("peers", ["a:1", "b:2"], ["a:1", "b:2"]),
        ("peers", "a:1,b:2", ["a:1", "b:2"]),
        ("peers", "", [""]),
        ("peers", [], []),
        ("peers", 5, []),  # go-options yields an empty slice for other types
        ("percentiles", [0.5, 0.99], [0.5, 0.99]),  # not sorted when from a config file
        ("percentiles", "0.5, 0.99", [0.5, 0.99]),
        ("level", "high", "high"),
        ("mode", "1", 1),
    ],
)
def test_config_coercion(key: str, value: object, expected: object) -> None:
    assert resolve([], {key: value})[key] == expected


@pytest.mark.parametrize(
    ("key", "value", "detail"),
    [
        ("wait", "100", 'time: missing unit in duration "100"'),
        ("wait", 1.5, "invalid time.Duration value type float64"),
        ("wait", True, "invalid time.Duration value type bool"),
        ("count", "0x10", 'strconv.ParseInt: parsing "0x10": invalid syntax'),
        ("count", 1.5, "invalid int64 value type float64"),
        ("ratio", 1, "invalid float64 value type int64"),
        ("verbose", "yes", 'strconv.ParseBool: parsing "yes": invalid syntax'),
        ("verbose", 1.0, "invalid bool value type float64"),
        ("name", 5, "invalid string value type int64"),
        ("peers", [1, 2], "interface conversion: interface {} is not string"),
        ("percentiles", [1, 0.5], "interface conversion: interface {} is not float64"),
        ("percentiles", "0.5,x", 'strconv.ParseFloat: parsing "x": invalid syntax'),
    ],
)
def test_config_coercion_errors(key: str, value: object, detail: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve([], {key: value})
    message = str(info.value)
    assert message.startswith(f"ERROR: Resolve failed to coerce value {format_go_value(value)} (")
    assert message.endswith(f") for field {key} - {detail}")


def test_config_error_shows_current_default() -> None:
    with pytest.raises(ConfigError, match=r"value 100 \(2s\) for field wait"):
        resolve([], {"wait": "100"})


# --- Go strconv / fmt helpers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "invalid syntax"),
        ("-", "invalid syntax"),
        ("0x", "invalid syntax"),
        ("_1", "invalid syntax"),
        ("1_", "invalid syntax"),
        ("0b2", "invalid syntax"),
        (" 1", "invalid syntax"),
        ("1.0", "invalid syntax"),
        ("\u0661", "invalid syntax"),  # non-ASCII digits are not digits to Go
        ("-9223372036854775809", "value out of range"),
        ("18446744073709551616", "value out of range"),
    ],
)
def test_parse_go_int_errors(text: str, reason: str) -> None:
    with pytest.raises(GoNumError) as info:
        parse_go_int(text)
    assert info.value.reason == reason
    assert str(info.value) == f"strconv.ParseInt: parsing {go_quote(text)}: {reason}"


def test_parse_go_int_base_ten_refuses_prefixes_and_underscores() -> None:
    assert parse_go_int("017", 10) == 17
    for text in ("0x10", "1_000"):
        with pytest.raises(GoNumError):
            parse_go_int(text, 10)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("-2.5", -2.5),
        ("+.5", 0.5),
        ("1.", 1.0),
        ("1e3", 1000.0),
        ("1E-2", 0.01),
        ("1_000.5", 1000.5),
        ("0x1p-2", 0.25),
        ("0X1.8P1", 3.0),
        ("0x_1p4", 16.0),
        ("Inf", math.inf),
        ("-infinity", -math.inf),
        ("+INF", math.inf),
        ("1e-400", 0.0),
    ],
)
def test_parse_go_float(text: str, value: float) -> None:
    assert parse_go_float(text) == value


def test_parse_go_float_nan() -> None:
    assert math.isnan(parse_go_float("NaN"))


@pytest.mark.parametrize(
    "text", ["", ".", "e1", "1e", "1e+", " 1", "1 ", "0x1", "0x1.8", "+nan", "infx", "1__0", "1,5"]
)
def test_parse_go_float_syntax_errors(text: str) -> None:
    with pytest.raises(GoNumError, match="invalid syntax"):
        parse_go_float(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (0.99, "0.99"),
        (-1.5, "-1.5"),
        (100000.0, "100000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e-7, "1.5e-07"),
        (1e100, "1e+100"),
        (0.1 + 0.2, "0.30000000000000004"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_format_go_float(value: float, text: str) -> None:
    assert format_go_float(value) == text


def test_format_go_value() -> None:
    assert format_go_value(True) == "true"
    assert format_go_value(["a", 1, 0.5]) == "[a 1 0.5]"
    assert format_go_value({"b": 1, "a": "x"}) == "map[a:x b:1]"
    assert format_go_value("raw") == "raw"


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\t\x00\x7f\u00e9\u00a0\U0001f600') == (
        '"a\\"b\\\\c\\n\\t\\x00\\x7f\u00e9\\u00a0\U0001f600"'
    )


def test_go_log_line() -> None:
    now = dt.datetime(2024, 1, 2, 3, 4, 5, 6789)
    assert go_log_line("boom", now=now) == "2024/01/02 03:04:05 boom"
    assert go_log_line("x", prefix="[p] ", micros=True, now=now) == (
        "[p] 2024/01/02 03:04:05.006789 x"
    )

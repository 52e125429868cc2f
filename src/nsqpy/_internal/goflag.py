"""Go ``flag`` package semantics and go-options style config resolution.

NSQ's daemons and utilities are Go programs, so being CLI-compatible means reproducing Go's
``flag`` package exactly: ``-f v``/``--f=v`` syntax, bare booleans, parsing that stops at the
first positional argument, Go's error wording, exit status 2 for usage errors and the
``Usage of <name>:`` help layout. Values parse with Go's ``strconv`` rules (``0x10``, ``017``
and ``1_000`` are ints, surrounding spaces are errors), which is why small re-implementations
of ``ParseBool``/``ParseInt``/``ParseFloat`` live here too.

``FlagSet.resolve`` then merges a parsed TOML config file the way ``mreiferson/go-options``
v1.0.0 (pinned by NSQ v1.3.0) does: a flag given on the command line beats the config key,
which beats the default. Config values are coerced with go-options' rules, quirks included.
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

from nsqpy._internal.duration import MILLISECOND, format_go_duration, parse_go_duration
from nsqpy._internal.gostrconv import (
    RANGE,
    SYNTAX,
    GoNumError,
    format_go_float,
    format_go_value,
    go_quote,
    go_type_name,
    parse_go_bool,
    parse_go_float,
    parse_go_int,
)

# ---------------------------------------------------------------------------------------------
# Flag definitions
# ---------------------------------------------------------------------------------------------


class FlagKind(enum.Enum):
    """How a flag's text is parsed (and, for config files, coerced)."""

    BOOL = "bool"
    STRING = "string"
    INT = "int"
    FLOAT = "float"
    DURATION = "duration"  # value is int nanoseconds
    STRING_ARRAY = "string-array"  # repeatable, one value per occurrence
    FLOAT_ARRAY = "float-array"  # repeatable, comma-split, sorted descending
    VALUE = "value"  # custom parser (Go flag.Var)
    BOOL_VALUE = "bool-value"  # custom parser that also accepts a bare flag as "true"


#: A custom flag parser: (text, current value) -> new value; ValueError(reason) on failure.
ValueParser = Callable[[str, object], object]

_TYPE_NAMES: Final = {
    FlagKind.STRING: "string",
    FlagKind.INT: "int",
    FlagKind.FLOAT: "float",
    FlagKind.DURATION: "duration",
}


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag. ``cfg`` is its config-file key: "" derives it from the name ('-' → '_'),
    None means the flag cannot be set from a config file (e.g. --version)."""

    name: str
    kind: FlagKind
    default: object
    usage: str
    cfg: str | None = ""
    parser: ValueParser | None = None  # VALUE / BOOL_VALUE only
    default_text: str | None = None  # VALUE / BOOL_VALUE: Go's String() of a non-zero default
    coerce_as: FlagKind | None = None  # VALUE / BOOL_VALUE: how config values are coerced

    @property
    def config_key(self) -> str | None:
        if self.cfg is None:
            return None
        return self.cfg or self.name.replace("-", "_")

    @property
    def is_bool(self) -> bool:
        return self.kind in (FlagKind.BOOL, FlagKind.BOOL_VALUE)


class FlagError(Exception):
    """A command-line usage error; Go prints it plus the usage and exits 2."""


class HelpRequested(Exception):
    """-h / -help / --help was given and is not a defined flag; Go prints usage, exits 0."""


class FlagFatal(Exception):
    """A flag value aborted the program via log.Fatalf (NSQ's FloatArray); exits 1."""


class ConfigError(ValueError):
    """A config-file value go-options could not coerce (Go: log.Fatalf, exit 1)."""


@dataclass(frozen=True, slots=True)
class ParsedFlags:
    """Result of parsing: every flag's value, which ones were given, and what remains."""

    values: Mapping[str, object]
    explicit: frozenset[str]
    args: tuple[str, ...]

    def __getitem__(self, name: str) -> object:
        return self.values[name]

    def is_set(self, name: str) -> bool:
        """True if the flag appeared on the command line (go-options' precedence test)."""
        return name in self.explicit


class _SetError(Exception):
    """A flag value failed to parse; carries Go's short reason ("parse error", ...)."""


def _num_reason(err: GoNumError) -> str:
    # Go's flag package hides strconv detail behind two fixed reasons.
    return "value out of range" if err.reason == RANGE else "parse error"


def _append_floats(current: object, text: str) -> list[float]:
    values = [v for v in _as_list(current) if isinstance(v, float)]
    for piece in text.split(","):
        try:
            values.append(parse_go_float(piece))
        except GoNumError:
            # NSQ's FloatArray.Set calls log.Fatalf here instead of returning an error.
            raise FlagFatal(f"Could not parse: {piece}") from None
    return sorted(values, reverse=True)


def _as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _apply(flag: Flag, current: object, text: str) -> object:
    """Parse ``text`` for ``flag``; raise _SetError with Go's reason on failure."""
    kind = flag.kind
    try:
        if kind is FlagKind.BOOL:
            return parse_go_bool(text)
        if kind is FlagKind.INT:
            return parse_go_int(text)
        if kind is FlagKind.FLOAT:
            return parse_go_float(text)
    except GoNumError as err:
        raise _SetError(_num_reason(err)) from None
    if kind is FlagKind.DURATION:
        try:
            return parse_go_duration(text)
        except ValueError:
            raise _SetError("parse error") from None
    if kind is FlagKind.STRING_ARRAY:
        return [*_as_list(current), text]
    if kind is FlagKind.FLOAT_ARRAY:
        return _append_floats(current, text)
    if flag.parser is not None:
        try:
            return flag.parser(text, current)
        except ValueError as err:
            raise _SetError(str(err)) from None
    return text


def _initial(flag: Flag) -> object:
    # Arrays are copied so repeated parses never share (and grow) one default list.
    return list(flag.default) if isinstance(flag.default, list) else flag.default


# ---------------------------------------------------------------------------------------------
# FlagSet
# ---------------------------------------------------------------------------------------------


class FlagSet:
    """A named set of flags, parsed with Go's ``flag.ExitOnError`` behaviour."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._flags: dict[str, Flag] = {}

    # -- definition ---------------------------------------------------------------------------

    def add(self, flag: Flag) -> Flag:
        """Register ``flag``; a duplicate name is a programming error, as in Go."""
        if flag.name in self._flags:
            raise ValueError(f"{self.name} flag redefined: {flag.name}")
        self._flags[flag.name] = flag
        return flag

    def add_bool(self, name: str, default: bool, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.BOOL, default, usage, cfg))

    def add_string(self, name: str, default: str, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.STRING, default, usage, cfg))

    def add_int(self, name: str, default: int, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.INT, default, usage, cfg))

    def add_float(self, name: str, default: float, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.FLOAT, default, usage, cfg))

    def add_duration(self, name: str, default_ns: int, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.DURATION, default_ns, usage, cfg))

    def add_string_array(self, name: str, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.STRING_ARRAY, [], usage, cfg))

    def add_float_array(self, name: str, usage: str, *, cfg: str | None = "") -> Flag:
        return self.add(Flag(name, FlagKind.FLOAT_ARRAY, [], usage, cfg))

    def add_value(
        self,
        name: str,
        default: object,
        usage: str,
        *,
        parser: ValueParser,
        coerce_as: FlagKind,
        default_text: str | None = None,
        cfg: str | None = "",
        bool_style: bool = False,
    ) -> Flag:
        """A custom-typed flag (Go ``flag.Var``); ``bool_style`` allows a bare ``-name``."""
        kind = FlagKind.BOOL_VALUE if bool_style else FlagKind.VALUE
        return self.add(Flag(name, kind, default, usage, cfg, parser, default_text, coerce_as))

    def lookup(self, name: str) -> Flag | None:
        return self._flags.get(name)

    @property
    def flags(self) -> list[Flag]:
        """All flags in definition order."""
        return list(self._flags.values())

    # -- parsing ------------------------------------------------------------------------------

    def parse_args(self, argv: Sequence[str]) -> ParsedFlags:
        """Parse without exiting: raises FlagError, HelpRequested or FlagFatal."""
        values = {flag.name: _initial(flag) for flag in self._flags.values()}
        explicit: set[str] = set()
        args, pos = list(argv), 0
        while pos < len(args):
            arg = args[pos]
            if len(arg) < 2 or arg[0] != "-":
                break  # first positional argument ends the flags
            if arg == "--":
                pos += 1
                break
            pos += 1
            name, has_value, value = self._split(arg)
            flag = self._known(name)
            if not has_value and not flag.is_bool:
                if pos >= len(args):
                    raise FlagError(f"flag needs an argument: -{name}")
                value, pos = args[pos], pos + 1
            values[name] = self._set(flag, values[name], value, has_value)
            explicit.add(name)
        return ParsedFlags(values, frozenset(explicit), tuple(args[pos:]))

    def parse(self, argv: Sequence[str]) -> ParsedFlags:
        """Parse like Go's ExitOnError: usage errors exit 2, help exits 0, fatals exit 1."""
        try:
            return self.parse_args(argv)
        except HelpRequested:
            print(self.usage(), end="", file=sys.stderr)
            sys.exit(0)
        except FlagError as err:
            print(err, file=sys.stderr)
            print(self.usage(), end="", file=sys.stderr)
            sys.exit(2)
        except FlagFatal as err:
            exit_fatal(str(err))

    @staticmethod
    def _split(arg: str) -> tuple[str, bool, str]:
        """Split ``-name[=value]`` / ``--name[=value]`` into (name, has_value, value)."""
        body = arg[2:] if arg[1] == "-" else arg[1:]
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, eq, value = body.partition("=")
        return name, bool(eq), value

    def _known(self, name: str) -> Flag:
        flag = self._flags.get(name)
        if flag is not None:
            return flag
        if name in ("h", "help"):
            raise HelpRequested
        raise FlagError(f"flag provided but not defined: -{name}")

    @staticmethod
    def _set(flag: Flag, current: object, value: str, has_value: bool) -> object:
        text = value if has_value or not flag.is_bool else "true"
        try:
            return _apply(flag, current, text)
        except _SetError as err:
            if flag.is_bool and not has_value:
                raise FlagError(f"invalid boolean flag {flag.name}: {err}") from None
            if flag.is_bool:
                raise FlagError(
                    f"invalid boolean value {go_quote(value)} for -{flag.name}: {err}"
                ) from None
            raise FlagError(
                f"invalid value {go_quote(value)} for flag -{flag.name}: {err}"
            ) from None

    # -- help ---------------------------------------------------------------------------------

    def usage(self) -> str:
        """Go's default usage text: ``Usage of <name>:`` then every flag, sorted by name."""
        lines = [f"Usage of {self.name}:\n"]
        lines.extend(_describe(flag) for flag in sorted(self._flags.values(), key=_by_name))
        return "".join(lines)

    # -- config files -------------------------------------------------------------------------

    def resolve(self, parsed: ParsedFlags, cfg: Mapping[str, object]) -> dict[str, object]:
        """Merge config-file values: command line > config key > default (go-options).

        Returns every config-settable flag's value keyed by its config key. Unknown config
        keys are ignored. Raises ConfigError, worded like go-options, if coercion fails.
        """
        resolved: dict[str, object] = {}
        for flag in self._flags.values():
            key = flag.config_key
            if key is None:
                continue
            if parsed.is_set(flag.name) or key not in cfg:
                resolved[key] = parsed[flag.name]
            else:
                resolved[key] = _coerce_or_fail(flag, key, cfg[key])
        return resolved


def _by_name(flag: Flag) -> str:
    return flag.name


def _unquote_usage(flag: Flag) -> tuple[str, str]:
    """Go's UnquoteUsage: a `back-quoted` word in the usage names the argument."""
    match = re.search(r"`([^`]*)`", flag.usage)
    if match:
        return match.group(1), flag.usage[: match.start()] + match.group(1) + flag.usage[
            match.end() :
        ]
    if flag.is_bool:
        return "", flag.usage
    return _TYPE_NAMES.get(flag.kind, "value"), flag.usage


def _default_display(flag: Flag) -> str | None:
    """The ``(default …)`` text, or None when the default is the type's zero value."""
    kind, default = flag.kind, flag.default
    if kind in (FlagKind.VALUE, FlagKind.BOOL_VALUE):
        return flag.default_text
    if kind is FlagKind.STRING:
        return go_quote(str(default)) if default else None
    if kind is FlagKind.BOOL:
        return "true" if default else None
    if kind is FlagKind.DURATION and isinstance(default, int):
        return format_go_duration(default) if default else None
    if kind is FlagKind.FLOAT and isinstance(default, float | int):
        return format_go_float(float(default)) if default else None
    if kind is FlagKind.FLOAT_ARRAY:
        return ",".join(f"{v:f}" for v in _as_list(default)) or None
    if kind is FlagKind.STRING_ARRAY:
        return ",".join(str(v) for v in _as_list(default)) or None
    return str(default) if default else None


def _describe(flag: Flag) -> str:
    head = f"  -{flag.name}"
    arg_name, usage = _unquote_usage(flag)
    if arg_name:
        head += " " + arg_name
    # Go keeps one-letter flags on a single line; everything else gets its own help line.
    head += "\t" if len(head) <= 4 else "\n    \t"
    text = head + usage.replace("\n", "\n    \t")
    default = _default_display(flag)
    if default is not None:
        text += f" (default {default})"
    return text + "\n"


# ---------------------------------------------------------------------------------------------
# Config-file coercion (go-options v1.0.0 rules)
# ---------------------------------------------------------------------------------------------


def _type_error(go_kind: str, value: object) -> ValueError:
    return ValueError(f"invalid {go_kind} value type {go_type_name(value)}")


def _coerce_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_go_bool(value)
    if isinstance(value, int):
        # go-options really maps integer 0 to true and anything else to false.
        return value == 0
    raise _type_error("bool", value)


def _coerce_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_go_int(value, 10)
    raise _type_error("int64", value)


def _coerce_float(value: object) -> float:
    # Go's coercion accepts only float64 (TOML floats) and strings, not integers.
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return parse_go_float(value)
    raise _type_error("float64", value)


def _coerce_string(value: object) -> str:
    if isinstance(value, str):
        return value
    raise _type_error("string", value)


def _coerce_duration(value: object) -> int:
    if isinstance(value, str):
        return parse_go_duration(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value * MILLISECOND  # a bare TOML integer means milliseconds
    raise _type_error("time.Duration", value)


def _coerce_strings(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split(",")
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise ValueError("interface conversion: interface {} is not string")
        return [str(item) for item in value]
    return []  # go-options silently yields an empty slice for other types


def _coerce_floats(value: object) -> list[float]:
    if isinstance(value, str):
        return [parse_go_float(piece.strip()) for piece in value.split(",")]
    if isinstance(value, list):
        if not all(isinstance(item, float) for item in value):
            raise ValueError("interface conversion: interface {} is not float64")
        return [float(item) for item in value]
    return []


_COERCERS: Final[dict[FlagKind, Callable[[object], object]]] = {
    FlagKind.BOOL: _coerce_bool,
    FlagKind.STRING: _coerce_string,
    FlagKind.INT: _coerce_int,
    FlagKind.FLOAT: _coerce_float,
    FlagKind.DURATION: _coerce_duration,
    FlagKind.STRING_ARRAY: _coerce_strings,
    FlagKind.FLOAT_ARRAY: _coerce_floats,
}


def coerce_config_value(flag: Flag, value: object) -> object:
    """Convert a decoded TOML value to ``flag``'s type; ValueError on failure."""
    kind = flag.coerce_as if flag.coerce_as is not None else flag.kind
    coercer = _COERCERS.get(kind)
    if coercer is None:
        raise ValueError(f"invalid value type {go_type_name(value)}")
    return coercer(value)


def _display_value(flag: Flag) -> str:
    if flag.kind is FlagKind.DURATION and isinstance(flag.default, int):
        return format_go_duration(flag.default)
    return format_go_value(flag.default)


def _coerce_or_fail(flag: Flag, key: str, value: object) -> object:
    try:
        return coerce_config_value(flag, value)
    except ValueError as err:
        raise ConfigError(
            f"ERROR: Resolve failed to coerce value {format_go_value(value)} "
            f"({_display_value(flag)}) for field {key} - {err}"
        ) from None


# ---------------------------------------------------------------------------------------------
# Go log-style fatal exits
# ---------------------------------------------------------------------------------------------


def go_log_line(
    message: str, *, prefix: str = "", micros: bool = False, now: _dt.datetime | None = None
) -> str:
    """One line as Go's ``log`` package writes it: prefix, local date and time, message."""
    stamp = (now or _dt.datetime.now()).strftime(
        "%Y/%m/%d %H:%M:%S.%f" if micros else "%Y/%m/%d %H:%M:%S"
    )
    return f"{prefix}{stamp} {message}"


def exit_fatal(message: str, *, prefix: str = "", micros: bool = False) -> NoReturn:
    """Go's ``log.Fatalf``: write the line to stderr and exit with status 1."""
    print(go_log_line(message, prefix=prefix, micros=micros), file=sys.stderr)
    sys.exit(1)


__all__ = [
    "RANGE",
    "SYNTAX",
    "ConfigError",
    "Flag",
    "FlagError",
    "FlagFatal",
    "FlagKind",
    "FlagSet",
    "GoNumError",
    "HelpRequested",
    "ParsedFlags",
    "ValueParser",
    "coerce_config_value",
    "exit_fatal",
    "format_go_float",
    "format_go_value",
    "go_log_line",
    "go_quote",
    "parse_go_bool",
    "parse_go_float",
    "parse_go_int",
]


# ---------------------------------------------------------------------------------------------
# A daemon's command line: flags, --version, --config
# ---------------------------------------------------------------------------------------------


def load_config_file(path: str) -> dict[str, object]:
    """Read a TOML config file; ValueError carries NSQ's message on failure."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"failed to load config file {path} - {err}") from None


def normalise_config_value(
    cfg: dict[str, object], key: str, parse: Callable[[str], object]
) -> None:
    """Check one config-file value with ``parse``; ValueError ``failed parsing <key> <v>``."""
    if key not in cfg:
        return
    text = format_go_value(cfg[key])
    try:
        cfg[key] = parse(text)
    except ValueError:
        raise ValueError(f"failed parsing {key} {text}") from None


def parse_command_line(
    fs: FlagSet,
    argv: Sequence[str],
    *,
    version: str,
    validate_config: Callable[[dict[str, object]], dict[str, object]],
    fatal: Callable[[str], NoReturn],
) -> tuple[ParsedFlags, dict[str, object]]:
    """Flags, then ``--version`` (print, exit 0), then the ``--config`` file, validated.

    Usage errors exit 2 (``fs.parse``); a bad config file goes to ``fatal``.
    """
    parsed = fs.parse(argv)
    if parsed["version"]:
        print(version)
        raise SystemExit(0)
    path = str(parsed["config"])
    try:
        return parsed, validate_config(load_config_file(path) if path else {})
    except ValueError as err:
        fatal(str(err))

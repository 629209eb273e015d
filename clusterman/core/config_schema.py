"""Turn a parsed YAML mapping into a frozen dataclass, or fail naming the file and the key.

Each YAML block is described by one dataclass; its field annotations are the schema. A field's
metadata may add:
  aliases  -- other spellings accepted for the key (e.g. Escalator's names beside Clusterman's),
              each with the function that converts its units to the field's (or None)
  parser   -- a function that turns the raw YAML value into the field's value, used instead of
              the annotation-driven type check (for shapes such as lists of one-key maps)
  check    -- a predicate with a message, e.g. ``positive``; a failing value is an error
  alias_check -- the check for a value given under an alias instead (Escalator's percents have
              Escalator's bounds: ``scale_up_threshold_percent: 150`` is valid, ``setpoint: 1.5`` not)
A dataclass's ``IGNORED_KEYS`` maps keys other tools write in its block (Clusterman's
``sensu_config``) to why clusterman does not act on them: accepted, and logged once per file and
key with that reason, never silently dropped and never mistaken for a typo.
Unknown keys, wrong types and missing required keys raise ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import sys
import types
import typing
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import MISSING
from dataclasses import dataclass
from typing import Any
from typing import TypeVar

from clusterman.errors import UserError

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A configuration problem a person can fix: the message names the file and the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Check:
    predicate: Callable[[Any], bool]
    message: str


def field(
    default: Any = MISSING,
    *,
    default_factory: Any = MISSING,
    aliases: Mapping[str, Callable[[Any], Any] | None] | None = None,
    parser: Callable[[Any], Any] | None = None,
    check: Check | None = None,
    alias_check: Check | None = None,
    doc: str = "",
) -> Any:
    """A dataclass field with the schema's extra metadata."""
    metadata = {"aliases": dict(aliases or {}), "parser": parser, "check": check, "doc": doc}
    if alias_check is not None:
        metadata["alias_check"] = alias_check
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


positive = Check(lambda v: v > 0, "must be greater than 0")
non_negative = Check(lambda v: v >= 0, "must be at least 0")
fraction = Check(lambda v: 0 < v <= 1, "must be a fraction in (0, 1]")
unit_interval = Check(lambda v: 0 <= v <= 1, "must be a fraction in [0, 1]")


def parse(cls: type[T], raw: Any, source: str, path: str = "", ignored: Mapping[str, str] | None = None) -> T:
    """Build ``cls`` from ``raw`` (a mapping), checking every key against the dataclass fields.

    ``ignored`` maps keys that other tools put in the same block (e.g. Clusterman's
    ``sensu_config``) to why they are not used: accepted, logged (``log_ignored``), and dropped.
    """
    ignored = ignored or {}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(source, path, f"expected a mapping, got {describe(raw)}")
    hints = typing.get_type_hints(cls)
    by_name: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        by_name[f.name] = f
        for alias in f.metadata.get("aliases", {}):
            by_name[alias] = f

    values: dict[str, Any] = {}
    seen_as: dict[str, str] = {}
    for key, value in raw.items():
        key_path = _join(path, str(key))
        if not isinstance(key, str):
            raise ConfigError(source, key_path, "keys must be strings")
        found = by_name.get(key)
        if found is None:
            if key in ignored:
                log_ignored(source, key_path, ignored[key])
                continue
            known = sorted(k for k in by_name)
            raise ConfigError(source, key_path, f"unknown key (known keys: {', '.join(known)})")
        f = found
        if f.name in seen_as:
            raise ConfigError(source, key_path, f"given twice (also as {_join(path, seen_as[f.name])})")
        seen_as[f.name] = key
        parser = f.metadata.get("parser")
        if parser is not None:
            try:
                converted = parser(value)
            except (ValueError, TypeError) as e:
                raise ConfigError(source, key_path, str(e)) from e
        else:
            converted = _coerce(hints[f.name], value, source, key_path)
        # An alias may carry its own units (e.g. Escalator's percents): convert to the field's.
        alias_convert = f.metadata.get("aliases", {}).get(key) if key != f.name else None
        if alias_convert is not None and converted is not None:
            converted = alias_convert(converted)
        check: Check | None = f.metadata.get("check")
        if key != f.name and "alias_check" in f.metadata:
            check = f.metadata["alias_check"]
        if check is not None and converted is not None and not check.predicate(converted):
            raise ConfigError(source, key_path, f"{check.message}, got {value!r}")
        values[f.name] = converted

    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.init and f.name not in values and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(source, _join(path, f.name), "required key is missing")
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(source, path or "(top level)", str(e)) from e


def _coerce(tp: Any, value: Any, source: str, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # Optional[X]: X's own error, with its own key path
            return _coerce(options[0], value, source, path)
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, source, path)
            except ConfigError as e:
                errors.append(e.problem)
        raise ConfigError(source, path, " or ".join(errors))
    if tp in _SCALARS:
        try:
            return _SCALARS[tp](value)
        except ValueError as e:
            raise ConfigError(source, path, str(e)) from None
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # YAML reads `branch_or_tag: 1.0` as a number; a version is a string
        raise ConfigError(source, path, f"expected a string, got {describe(value)}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = [m.value for m in tp]
        if value in allowed:
            return tp(value)
        raise ConfigError(source, path, f"expected one of {', '.join(map(str, allowed))}, got {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(source, path, f"expected a list, got {describe(value)}")
        item_type = args[0]
        return tuple(_coerce(item_type, v, source, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(source, path, f"expected a mapping, got {describe(value)}")
        value_type = args[1] if args else Any
        return {str(k): _coerce(value_type, v, source, _join(path, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return parse(tp, value, source, path, getattr(tp, "IGNORED_KEYS", None))
    raise TypeError(f"schema type {tp!r} at {path} is not supported")


_logged: set[tuple[str, str]] = set()


def log_ignored(source: str, key_path: str, reason: str) -> None:
    """One line per file and key for the life of the process: files are read again every run."""
    if (source, key_path) not in _logged:
        _logged.add((source, key_path))
        log.info("%s: %s is ignored: %s", source, key_path, reason)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# The value checks shared by every validator of user documents (this schema for YAML, and
# ``clusterman plan``'s JSON reader): one wording for one problem. Each raises ValueError with the
# problem; the caller adds the file and the field.


class TooLongNumber:
    """An integer with more digits than Python converts (``sys.get_int_max_str_digits``): a JSON
    reader's ``parse_int`` returns this instead of failing with no file or field named."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"a number of {self.digits} digits"


def describe(value: Any, mapping: str = "a mapping") -> str:
    """``value`` in a message; JSON readers call a mapping "an object"."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return mapping
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, TooLongNumber):
        return f"{value!r} (too long)"
    return f"{type(value).__name__} {value!r}"


def _too_long(value: Any) -> None:
    if isinstance(value, TooLongNumber):
        raise ValueError(f"{value!r} is too long (at most {sys.get_int_max_str_digits()} digits)")


def as_number(value: Any) -> float:
    _too_long(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {describe(value)}")
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def as_whole(value: Any) -> int:
    _too_long(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"expected a whole number, got {describe(value)}")


def as_flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"expected true or false, got {describe(value)}")


def checked(value: T, check: Check | None) -> T:
    if check is not None and not check.predicate(value):
        raise ValueError(f"{check.message}, got {value!r}")
    return value


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: as_flag, int: as_whole, float: as_number}

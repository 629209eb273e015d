"""Kubernetes label selectors, as ``kubectl -l`` and the API server read them, checked and matched here.

A selector is requirements joined by commas, all of which must hold:

  key, !key                  the label is there, is not there
  key=value, key==value      it is there with that value
  key!=value                 it is not there, or has another value
  key in (a,b), key notin (a,b)
  key>3, key<3               it is there and is an integer above or below 3

A key is an optional DNS subdomain prefix and ``/``, then a name of at most 63 characters
(letters, digits, ``-``, ``_``, ``.``, starting and ending with a letter or digit); a value is
empty or follows the name's rule. ``parse`` refuses anything else with ``ValueError`` naming the
part, as the API server answers 400, so a NodeMigration's selectors are refused before they
select anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_NAME_RE = re.compile(rf"^{_NAME}$")
_PREFIX_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SET = re.compile(r"^(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_COMPARE = re.compile(r"^(?P<key>[^\s!=<>(),]+)\s*(?P<op>==|=|!=|>|<)\s*(?P<value>[^\s!=<>(),]*)$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # exists, !, =, !=, in, notin, >, <
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "exists":
            return value is not None
        if self.operator == "!":
            return value is None
        if self.operator in ("!=", "notin"):
            return value not in self.values
        if value is None:
            return False
        if self.operator in ("=", "in"):
            return value in self.values
        try:
            number = int(value)
        except ValueError:
            return False
        return number > int(self.values[0]) if self.operator == ">" else number < int(self.values[0])


@dataclass(frozen=True)
class LabelSelector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return self.text


def parse(text: str) -> LabelSelector:
    """One selector (an empty one selects everything); ValueError naming what is wrong."""
    requirements = tuple(_requirement(part.strip()) for part in _split(text) if part.strip())
    if text.strip() and not requirements:
        raise ValueError(f"label selector {text!r}: no requirement")
    return LabelSelector(text.strip(), requirements)


def matches_all(selectors: tuple[LabelSelector, ...], labels: Mapping[str, str]) -> bool:
    return all(s.matches(labels) for s in selectors)


def _split(text: str) -> list[str]:
    """Requirements at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
            if depth > 1:
                raise ValueError(f"label selector {text!r}: nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"label selector {text!r}: ')' without '('")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"label selector {text!r}: '(' without ')'")
    parts.append(text[start:])
    if len(parts) > 1 and any(not p.strip() for p in parts):
        raise ValueError(f"label selector {text!r}: an empty requirement between commas")
    return parts


def _requirement(part: str) -> Requirement:
    found = _SET.match(part)
    if found:
        values = tuple(v.strip() for v in found["values"].split(","))
        for value in values:
            _check_value(value, part)
        return Requirement(_check_key(found["key"], part), found["op"], values)
    found = _COMPARE.match(part)
    if found:
        op = "=" if found["op"] == "==" else found["op"]
        value = found["value"]
        if op in (">", "<"):
            if not re.fullmatch(r"-?\d+", value):
                raise ValueError(f"label selector requirement {part!r}: {op} needs an integer, got {value!r}")
        else:
            _check_value(value, part)
        return Requirement(_check_key(found["key"], part), op, (value,))
    if part.startswith("!"):
        return Requirement(_check_key(part[1:].strip(), part), "!")
    if re.fullmatch(r"[^\s!=<>(),]+", part):
        return Requirement(_check_key(part, part), "exists")
    raise ValueError(f"label selector requirement {part!r}: expected key, !key, key=value, key!=value, key in (...)")


def _check_key(key: str, part: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX_RE.match(prefix)):
        raise ValueError(f"label selector requirement {part!r}: {prefix!r} is not a DNS subdomain prefix")
    if not _NAME_RE.match(name):
        raise ValueError(
            f"label selector requirement {part!r}: {name!r} is not a label name "
            "(at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return key


def _check_value(value: str, part: str) -> None:
    if value and not _NAME_RE.match(value):
        raise ValueError(
            f"label selector requirement {part!r}: {value!r} is not a label value "
            "(empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )

"""A node migration's condition: what every node of the pool must satisfy when the migration ends.

Clusterman's ``NodeMigration`` resource says it as ``trait operator target`` (``kernel ge 5.15``,
``instance_type notin m5.large,m5.xlarge``, ``uptime lt 30d``). A node that does not satisfy it is
replaced; a node whose trait cannot be read (a kernel the scheduler does not report) is left
alone and counted apart.

The traits, where they come from, and the operators each takes (Clusterman's table):

  kernel         the node's kernel version (Kubernetes ``status.nodeInfo.kernelVersion``)   all
  lsbrelease     the release in the node's OS image (``status.nodeInfo.osImage``:
                 ``Ubuntu 22.04.3 LTS`` gives 22.04.3)                                       all
  instance_type  the instance's type, case-blind                                eq ne in notin
  uptime         how old the node was when the migration was created (Clusterman measures
                 uptime now against the target plus the time since creation: the same)  gt ge lt le

Versions compare by their parts, numbers as numbers: ``5.15 < 5.15.0-1034-aws < 5.15.1 < 5.19``.
The leading release (``5.15.0``) is compared with trailing zeros dropped, as Python's
``packaging`` compares releases, so ``22.04 == 22.04.0``. What follows it (``-1034-aws``, a
distribution's build) ranks *above* the bare release, and its numbers as numbers, letters as text
(numbers above letters). This differs from Clusterman, which reads kernels as semantic versions:
there ``5.15.0-1034-aws`` is a pre-release, *below* ``5.15.0``, so ``kernel ge 5.15.0`` replaced
every Ubuntu kernel of that release, and a kernel such as Amazon Linux's
``4.14.268-205.500.amzn2.x86_64`` (not a semantic version) stopped the migration with an error.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from clusterman.core.durations import parse_duration
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node


class Trait(enum.Enum):
    KERNEL = "kernel"
    LSBRELEASE = "lsbrelease"
    INSTANCE_TYPE = "instance_type"
    UPTIME = "uptime"


class Operator(enum.Enum):
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    IN = "in"
    NOTIN = "notin"


ORDERED = frozenset({Operator.GT, Operator.GE, Operator.LT, Operator.LE})
LISTS = frozenset({Operator.IN, Operator.NOTIN})
OPERATORS_OF: dict[Trait, frozenset[Operator]] = {
    Trait.KERNEL: frozenset(Operator),
    Trait.LSBRELEASE: frozenset(Operator),
    Trait.INSTANCE_TYPE: frozenset({Operator.EQ, Operator.NE, Operator.IN, Operator.NOTIN}),
    Trait.UPTIME: ORDERED,
}

VersionKey = tuple[tuple[int, ...], tuple[tuple[int, int, str], ...]]
Value = VersionKey | str | float

_RELEASE = re.compile(r"^(\d+(?:\.\d+)*)")
_OS_RELEASE = re.compile(r"(?:^|\W)(\d+\.\d+(?:\.\d+)?)(?:\W|$)")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")


def version_key(text: str) -> VersionKey:
    """How a version sorts (the module's docstring); ValueError when it does not start with a number."""
    found = _RELEASE.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a version: it must start with a number, as 5.15 or 5.15.0-1034-aws")
    release = [int(part) for part in found[1].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    rest = tuple(
        (1, int(token), "") if token.isdigit() else (0, 0, token)
        for token in re.findall(r"\d+|[A-Za-z]+", text.strip()[found.end() :])
    )
    return tuple(release), rest


def os_release(os_image: str) -> str:
    """The release in an OS image's name (``Ubuntu 22.04.3 LTS`` -> ``22.04.3``), or "" when there is none."""
    found = _OS_RELEASE.search(os_image)
    return found[1] if found else ""


def _release_target(text: str) -> VersionKey:
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError(f"{text!r} is not an OS release such as 22.04 or 22.04.3")
    return version_key(text)


def _instance_type_target(text: str) -> str:
    value = text.lower()
    if not _INSTANCE_TYPE.match(value):
        raise ValueError(f"{text!r} is not an instance type such as m5.large")
    return value


def _uptime_target(text: str) -> float:
    return parse_duration(text)


_TARGET_READERS: dict[Trait, Callable[[str], Value]] = {
    Trait.KERNEL: version_key,
    Trait.LSBRELEASE: _release_target,
    Trait.INSTANCE_TYPE: _instance_type_target,
    Trait.UPTIME: _uptime_target,
}


@dataclass(frozen=True)
class Condition:
    trait: Trait
    operator: Operator
    target: str  # as written (a list for in / notin: comma-separated)
    values: tuple[Value, ...]  # the target read: one value, or the list's

    @staticmethod
    def parse(trait: str, operator: str, target: str) -> Condition:
        """Clusterman's three words, checked; ValueError naming what is wrong."""
        try:
            t = Trait(str(trait))
        except ValueError:
            raise ValueError(f"trait {trait!r}: expected one of {', '.join(x.value for x in Trait)}") from None
        try:
            op = Operator(str(operator))
        except ValueError:
            raise ValueError(f"operator {operator!r}: expected one of {', '.join(x.value for x in Operator)}") from None
        if op not in OPERATORS_OF[t]:
            allowed = ", ".join(o.value for o in Operator if o in OPERATORS_OF[t])
            raise ValueError(f"operator {op.value} does not apply to {t.value} (it takes {allowed})")
        if not isinstance(target, str) or not target.strip():
            raise ValueError(f"target {target!r}: expected a non-empty string")
        parts = [p.strip() for p in target.split(",")] if op in LISTS else [target.strip()]
        if any(not p for p in parts):
            raise ValueError(f"target {target!r}: an empty item in the list")
        reader = _TARGET_READERS[t]
        try:
            values = tuple(reader(p) for p in parts)
        except ValueError as e:
            raise ValueError(f"target of {t.value}: {e}") from None
        return Condition(t, op, target.strip(), values)

    def trait_of(self, node: Node, created: float) -> Value | None:
        """The node's value of the trait (uptime: at ``created``), or None when it cannot be read."""
        if self.trait is Trait.KERNEL:
            try:
                return version_key(node.kernel) if node.kernel else None
            except ValueError:
                return None
        if self.trait is Trait.LSBRELEASE:
            release = os_release(node.os_image)
            return version_key(release) if release else None
        if self.trait is Trait.INSTANCE_TYPE:
            return node.instance_type.lower() or None
        return None if node.launched_at == NO_TIME else created - node.launched_at

    def holds(self, node: Node, created: float) -> bool | None:
        """Whether ``node`` satisfies the condition (None: its trait cannot be read)."""
        value = self.trait_of(node, created)
        if value is None:
            return None
        op, values = self.operator, self.values
        if op is Operator.IN:
            return value in values
        if op is Operator.NOTIN:
            return value not in values
        target = values[0]
        if op is Operator.EQ:
            return value == target
        if op is Operator.NE:
            return value != target
        return _ordered(op, value, target)

    def __str__(self) -> str:
        return f"{self.trait.value} {self.operator.value} {self.target}"


def _ordered(op: Operator, value: Value, target: Value) -> bool:
    left, right = value, target
    if op is Operator.GT:
        return left > right  # type: ignore[operator]
    if op is Operator.GE:
        return left >= right  # type: ignore[operator]
    if op is Operator.LT:
        return left < right  # type: ignore[operator]
    return left <= right  # type: ignore[operator]

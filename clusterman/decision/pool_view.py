"""One pass over a snapshot: which nodes count for what, and the exact totals the decision needs.

The node sets (docs/scaling.md, "Which nodes count"):
  ready     capacity: the denominator of utilisation, and the nodes a scale-down may taint
  tainted   leaving: no capacity, but their work still needs a home, so it stays demand
  orphan    launched, not joined: in-flight capacity, terminated past the orphan timeout
  cordoned  set aside by an operator: neither capacity nor demand, never touched
  unknown   not in any of the pool's groups (or in a group the snapshot does not list): ignored
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction

from clusterman.core.accounting import account_node
from clusterman.core.model import Node
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.errors import UserError


class SnapshotError(UserError, ValueError):
    """A snapshot the decision cannot trust (a connector bug or a bad file): names the object and field."""


@dataclass
class PoolView:
    groups: dict[str, ResourceGroup]
    ready: list[Node] = field(default_factory=list)
    tainted: list[Node] = field(default_factory=list)
    orphans: list[Node] = field(default_factory=list)
    cordoned: list[Node] = field(default_factory=list)
    ignored: int = 0
    ready_weight: dict[str, Fraction] = field(default_factory=dict)  # per group, weight units
    capacity: dict[str, Fraction] = field(default_factory=dict)  # over ready nodes, per resource
    slack: dict[str, Fraction] = field(default_factory=dict)  # idle reservations on ready nodes
    # per chunk of the snapshot with ready or tainted nodes, the largest request of any of their
    # tasks, per resource (``NodeUsage.largest``): the slot reserve's slot size (slots.py)
    largest: list[tuple[float, ...]] = field(default_factory=list)

    # cached: a view is built once by view_of and only read after; the decision asks for these often
    @functools.cached_property
    def ready_total(self) -> Fraction:
        return sum(self.ready_weight.values(), ZERO)

    @functools.cached_property
    def target(self) -> Fraction:
        """Clusterman's T: the sum of the targets of the groups that are not stale."""
        return sum((exact(g.target_capacity) for g in self.groups.values() if not g.stale), ZERO)

    @functools.cached_property
    def live_groups(self) -> tuple[ResourceGroup, ...]:
        return tuple(sorted((g for g in self.groups.values() if not g.stale), key=lambda g: g.id))

    def unit_resources(self) -> dict[str, Fraction]:
        """Resources per weight unit measured on joined nodes that are not ready (for a pool with no
        ready capacity); empty when there are none."""
        nodes = self.tainted + self.cordoned
        weight = exact(math.fsum(n.weight for n in nodes))
        if not weight:
            return {}
        totals = _sum_allocatable(nodes)
        return {r: totals[r] / weight for r in RESOURCE_NAMES}


def view_of(snapshot: PoolSnapshot) -> PoolView:
    groups: dict[str, ResourceGroup] = {}
    for g in snapshot.groups:
        _check_group(g)
        if g.id in groups:
            raise SnapshotError(f"group {g.id}: listed twice")
        groups[g.id] = g
    view = PoolView(groups)
    ready_weight: dict[str, float] = dict.fromkeys(groups, 0.0)
    cpus = mem = disk = gpus = 0.0
    reserving: list[Node] = []
    for part in snapshot.figures:
        if part.bad_weight is not None:
            node = part.bad_weight
            raise SnapshotError(f"node {node.id}: weight must be a finite number > 0, got {node.weight!r}")
        view.ready += part.ready
        view.tainted += part.tainted
        view.orphans += part.orphans
        view.cordoned += part.cordoned
        view.ignored += part.ignored
        for group_id, w in part.ready_weight:
            ready_weight[group_id] += w
        c, m, d, u = part.allocatable
        cpus, mem, disk, gpus = cpus + c, mem + m, disk + d, gpus + u
        reserving += part.reserving
        if part.largest is not None:
            view.largest.append(part.largest)
    view.ready_weight = {g: exact(w) for g, w in ready_weight.items()}
    view.capacity = _exact_totals({"cpus": cpus, "mem": mem, "disk": disk, "gpus": gpus}, view.ready)
    view.slack = _slack(reserving)
    return view


def _sum_allocatable(nodes: list[Node]) -> dict[str, Fraction]:
    cpus = mem = disk = gpus = 0.0
    for node in nodes:
        a = node.allocatable
        cpus += a.cpus
        mem += a.mem
        disk += a.disk
        gpus += a.gpus
    return _exact_totals({"cpus": cpus, "mem": mem, "disk": disk, "gpus": gpus}, nodes)


def _exact_totals(totals: dict[str, float], nodes: list[Node]) -> dict[str, Fraction]:
    """The totals as exact fractions; a total that is not a finite number >= 0 names the node to blame."""
    for name, total in totals.items():
        if not (math.isfinite(total) and total >= 0):
            bad = next(n for n in nodes if not (math.isfinite(n.allocatable[name]) and n.allocatable[name] >= 0))
            raise SnapshotError(f"node {bad.id}: allocatable.{name} must be a finite number >= 0")
    return {name: exact(total) for name, total in totals.items()}


def _slack(reserving: list[Node]) -> dict[str, Fraction]:
    """Reserved-but-idle capacity on the ready nodes that hold reservations (docs/accounting.md)."""
    total = Resources()
    for node in reserving:
        total = total + account_node(node).slack
    return {name: exact(v) for name, v in total.items()}


def _check_group(g: ResourceGroup) -> None:
    for name in ("target_capacity", "min_capacity"):
        value = getattr(g, name)
        if not (math.isfinite(value) and value >= 0):
            raise SnapshotError(f"group {g.id}: {name} must be a finite number >= 0, got {value!r}")
    if math.isnan(g.max_capacity) or g.max_capacity < g.min_capacity:
        raise SnapshotError(
            f"group {g.id}: max_capacity ({g.max_capacity!r}) is below min_capacity ({g.min_capacity!r})"
        )

"""Utilisation per resource: the load the pool must carry over the capacity of its ready nodes.

load = demand + slack (docs/accounting.md, rule 4), for the resources the request has an opinion
on and the config does not exclude; capacity = allocatable of ready nodes. The most constrained
resource (the highest ratio) decides, as in Clusterman and Escalator.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import ResourceRequest
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import show
from clusterman.decision.pool_view import PoolView


@dataclass(frozen=True)
class Utilisation:
    demand: dict[str, Fraction]  # the request, resources with an opinion and not excluded
    load: dict[str, Fraction]  # demand + slack on ready nodes
    capacity: dict[str, Fraction]  # of ready nodes, every resource
    ratios: dict[str, Fraction]  # load / capacity, where capacity > 0
    most_constrained: str  # "" when no resource can be measured
    notes: tuple[str, ...] = ()

    @property
    def has_opinion(self) -> bool:
        return bool(self.load)

    @property
    def all_zero(self) -> bool:
        return self.has_opinion and not any(self.load.values())

    @property
    def value(self) -> Fraction:
        return self.ratios.get(self.most_constrained, ZERO)


def measure(view: PoolView, request: ResourceRequest, excluded: frozenset[str]) -> Utilisation:
    opinions = {r: v for r, v in request.opinions().items() if r not in excluded}
    demand = {r: exact(v) for r, v in opinions.items()}
    slack = view.slack
    load = {r: demand[r] + slack[r] if slack.get(r) else demand[r] for r in demand}  # no Fraction sum for 0
    ratios: dict[str, Fraction] = {}
    notes = []
    for r in RESOURCE_NAMES:
        if r not in load:
            continue
        cap = view.capacity.get(r, ZERO)
        if cap > 0:
            ratios[r] = load[r] / cap
        elif load[r] > 0 and view.ready:
            notes.append(f"{r} {show(load[r])} requested but ready nodes have none: not scaled on")
    most = max(ratios, key=lambda r: ratios[r]) if ratios else ""  # first of RESOURCE_NAMES on ties
    return Utilisation(demand, load, dict(view.capacity), ratios, most, tuple(notes))

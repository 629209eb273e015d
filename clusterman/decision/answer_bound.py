"""The most a signal may ask for, per resource: far above any real demand, far below garbage.

The wire refuses an amount that is not a finite number >= 0. ``1e308`` cpus is one, and taken as
demand it sized the pool to ``max_capacity`` in one run and printed a 309-digit figure. So an
answer is refused the same way (its app falls back to the default signal; the default signal's
own answer, refused, leaves the target as it is) when an amount is over ``ANSWER_BOUND`` times
what the pool holds at ``max_capacity``: that many weight units of the largest unit the pool
knows (its ready nodes' resources per weight unit, its groups' node size, ``cpus_per_weight``).
A resource no unit holds (gpus in a pool without them), or a pool whose unit is not known yet, is
bounded by ``NO_POOL_HOLDS`` alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field

from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import ResourceRequest
from clusterman.decision.policy import ScalingPolicy

ANSWER_BOUND = 100  # times what the pool holds at max_capacity
NO_POOL_HOLDS = 1e12  # of any resource in its unit: a trillion CPUs, an exabyte of memory or disk


@dataclass(frozen=True)
class AnswerBounds:
    """Per resource, the most an answer may ask for, and why (for the refusal's line)."""

    most: dict[str, float] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def refusal(self, request: ResourceRequest) -> str:
        """Why ``request`` is garbage ("" when it is not)."""
        for name, amount in request.opinions().items():
            most = self.most.get(name, NO_POOL_HOLDS)
            if amount > most:
                why = self.why.get(name, "more than any pool holds")
                return f"{name}={amount:.3g} is over {most:.6g}, {why}: refused as garbage"
        return ""


NO_BOUNDS = AnswerBounds()  # only what no pool holds


def answer_bounds(snapshot: PoolSnapshot, policy: ScalingPolicy) -> AnswerBounds:
    """The bounds for one run's answers, from its snapshot (the snapshot's figures, summed once)."""
    units: list[tuple[float, ...]] = []
    weight = math.fsum(w for part in snapshot.figures for _, w in part.ready_weight)
    if math.isfinite(weight) and weight > 0:
        totals = [math.fsum(part.allocatable[i] for part in snapshot.figures) for i in range(len(RESOURCE_NAMES))]
        units.append(tuple(t / weight for t in totals))
    units += [tuple(g.node_resources) for g in snapshot.groups if any(g.node_resources)]
    if any(policy.unit_resources):
        units.append(tuple(policy.unit_resources))
    top = float(policy.max_capacity)
    most, why = {}, {}
    for i, name in enumerate(RESOURCE_NAMES):
        unit = max((u[i] for u in units if math.isfinite(u[i])), default=0.0)
        if unit <= 0 or not math.isfinite(top):
            continue
        most[name] = min(NO_POOL_HOLDS, ANSWER_BOUND * top * unit)
        why[name] = f"{ANSWER_BOUND} times the pool at max_capacity {top:g} ({unit:.6g} {name} a weight unit)"
    return AnswerBounds(most, why)

"""Spread the pool's new target over its resource groups (Clusterman's rule, docs/scaling.md).

Stale groups go to 0. Then, one weight unit at a time until the live groups sum to ceil(target):
a scale-up adds to the live group with the smallest target, a scale-down takes from the one with
the largest, ties by group id, skipping groups that would pass their own max (or min). When every
group is at its bound the total falls short, and the caller is told what it got.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from fractions import Fraction

from clusterman.autoscaler.exact import ceil
from clusterman.autoscaler.exact import exact
from clusterman.cluster.model import ResourceGroup


def distribute(groups: Iterable[ResourceGroup], target: Fraction) -> dict[str, Fraction]:
    """New target per group id (every group, stale ones at 0)."""
    targets: dict[str, Fraction] = {}
    bounds: dict[str, tuple[Fraction, Fraction | None]] = {}
    for g in groups:
        if g.stale:
            targets[g.id] = Fraction(0)
            continue
        targets[g.id] = exact(g.target_capacity)
        bounds[g.id] = (exact(g.min_capacity), None if math.isinf(g.max_capacity) else exact(g.max_capacity))
    goal = ceil(target)
    total = sum((targets[i] for i in bounds), Fraction(0))
    if total < goal:
        _step(targets, bounds, goal - total, up=True)
    elif total > goal:
        _step(targets, bounds, total - goal, up=False)
    return targets


def _step(
    targets: dict[str, Fraction], bounds: dict[str, tuple[Fraction, Fraction | None]], gap: Fraction, up: bool
) -> None:
    """Move one unit at a time while ``gap`` > 0; a heap keeps each step O(log groups)."""
    sign = 1 if up else -1

    def movable(gid: str) -> bool:
        low, high = bounds[gid]
        after = targets[gid] + sign
        return (high is None or after <= high) if up else after >= low

    heap = [(sign * targets[gid], gid) for gid in bounds if movable(gid)]
    heapq.heapify(heap)
    while gap > 0 and heap:
        _, gid = heapq.heappop(heap)
        targets[gid] += sign
        gap -= 1
        if movable(gid):
            heapq.heappush(heap, (sign * targets[gid], gid))

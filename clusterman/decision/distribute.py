"""Spread the pool's new target over its resource groups (Clusterman's rule, docs/scaling.md).

Stale groups go to 0. Then, one weight unit at a time until the live groups sum to ceil(target):
a scale-up adds to the live group with the smallest target, a scale-down takes from the one with
the largest, ties by group id, skipping groups that would pass their own max (or min). When every
group is at its bound the total falls short, and the caller is told what it got. Counted in
integer millionths (``exact.micro``), so a large step count stays fast.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from fractions import Fraction

from clusterman.core.model import ResourceGroup
from clusterman.decision.exact import MICRO
from clusterman.decision.exact import ceil
from clusterman.decision.exact import exact
from clusterman.decision.exact import from_micro
from clusterman.decision.exact import micro


def distribute(groups: Iterable[ResourceGroup], target: Fraction) -> dict[str, Fraction]:
    """New target per group id (every group, stale ones at 0)."""
    targets: dict[str, int] = {}
    bounds: dict[str, tuple[int, float]] = {}
    for g in groups:
        targets[g.id] = 0 if g.stale else micro(exact(g.target_capacity))
        if not g.stale:
            bounds[g.id] = (
                micro(exact(g.min_capacity)),
                math.inf if math.isinf(g.max_capacity) else micro(exact(g.max_capacity)),
            )
    goal = ceil(target) * MICRO
    total = sum(targets[gid] for gid in bounds)
    if total != goal:
        _step(targets, bounds, goal - total)
    return {gid: from_micro(t) for gid, t in targets.items()}


def _step(targets: dict[str, int], bounds: dict[str, tuple[int, float]], gap: int) -> None:
    """Move one unit at a time toward ``gap`` (signed); a heap keeps each step O(log groups)."""
    sign = 1 if gap > 0 else -1
    unit = sign * MICRO

    def movable(gid: str) -> bool:
        low, high = bounds[gid]
        after = targets[gid] + unit
        return after <= high if sign > 0 else after >= low

    heap = [(sign * targets[gid], gid) for gid in bounds if movable(gid)]
    heapq.heapify(heap)
    remaining = abs(gap)
    while remaining > 0 and heap:
        _, gid = heapq.heappop(heap)
        targets[gid] += unit
        remaining -= MICRO
        if movable(gid):
            heapq.heappush(heap, (sign * targets[gid], gid))

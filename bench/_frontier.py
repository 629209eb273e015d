"""What no autoscaler beats on a scoreboard trace: the least cost of its unmet demand.

A trace's surprises (``_traces.surprises``: diurnal's bursts, flash's crowds) start at random
times. Capacity launched when a surprise is first seen joins ``join_minutes`` later, so for any
policy that cannot see them coming, the surprise's first minutes are served only by the spare
the pool already had. The frontier gives such a policy everything else for free: it knows the
rest of the demand exactly (the daily curve, the noise, a surprise once it is ``join_minutes``
old), packs pods perfectly (capacity is fluid, in whole 8-CPU nodes) and launches and removes
instantly, and knows when a surprise under way ends. It carries ``spare`` CPUs above what it
knows, none where no surprise can start (diurnal's bursts never overlap, so none starts while one
is under way):

  joined(t) = ceil((demand(t) − unseen(t) + spare) / 8) nodes, unseen(t) = what the surprises
              that started in the last ``join_minutes`` add at t

It takes surprises to come at a constant rate, as crowds and bursts do: it does not use that the
flash generator draws exactly four crowds, none in the first 12 hours or the last 2. A surprise
is then as likely in any other minute, and the demand one leaves unmet falls ever more slowly as
the spare grows, so a spare that varies over those minutes does no better on average than a
constant one of the same mean.
  paid(t)   = max of joined over [t, t + join_minutes]   (paid from launch, as the oracle)
  unmet     = Σ (demand(t) − 8 × joined(t))⁺

Its cost is measured against the scoreboard's oracle (``simulator/costs.py``: whole nodes for the
demand of each minute, launched one join delay ahead), here on the trace's own CPUs. A real pool
places whole pods on nodes, and forecasts, so it does worse on both counts: a cost this frontier
reaches only at more unmet demand than a run's is out of reach for that run's unmet demand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from bench._traces import EXCLUSIVE
from bench._traces import surprises
from bench._traces import trace
from clusterman.simulator.costs import max_ahead

NODE_CPUS = 8
JOIN_MINUTES = 3  # the scoreboard's join delay, 180 s


@dataclass(frozen=True)
class Point:
    spare: float  # CPUs carried above the known demand
    cost_vs_oracle: float
    unmet: float  # CPU-minutes
    minutes_short: int


def frontier(name: str, days: float, spares: Iterable[float]) -> list[Point]:
    """One point per spare, for the trace ``name`` over ``days`` (module docstring)."""
    demand = [v for _, v in trace(name, days)]
    unseen = [0.0] * len(demand)
    calm = [False] * len(demand)  # no surprise can start: one that never overlaps another is under way
    for start, adds in surprises(name, days):
        for k, cpus in enumerate(adds):
            if start + k < len(unseen):
                if k < JOIN_MINUTES:
                    unseen[start + k] += cpus
                else:
                    calm[start + k] = name in EXCLUSIVE
    oracle = math.fsum(max_ahead([_nodes(d) for d in demand], JOIN_MINUTES))
    points = []
    for spare in spares:
        joined = [_nodes(d - u + (0 if c else spare)) for d, u, c in zip(demand, unseen, calm, strict=True)]
        short = [d - NODE_CPUS * n for d, n in zip(demand, joined, strict=True)]
        points.append(
            Point(
                spare=spare,
                cost_vs_oracle=round(math.fsum(max_ahead(joined, JOIN_MINUTES)) / oracle, 3),
                unmet=round(math.fsum(s for s in short if s > 0), 1),
                minutes_short=sum(1 for s in short if s > 1e-9),
            )
        )
    return points


def cheapest(points: list[Point], unmet: float) -> Point | None:
    """The cheapest point with at most ``unmet`` CPU-minutes unmet; None when none is."""
    within = [p for p in points if p.unmet <= unmet]
    return min(within, key=lambda p: (p.cost_vs_oracle, p.spare)) if within else None


def _nodes(cpus: float) -> int:
    return max(0, math.ceil(cpus / NODE_CPUS - 1e-9))

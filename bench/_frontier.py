"""What no autoscaler whose nodes join in 3 minutes beats on a scoreboard trace: the least cost
of its unmet demand.

Capacity launched at minute t joins ``JOIN_MINUTES`` later, so the nodes serving minute t are
chosen with what was known at t − 3. The frontier's policy knows everything a policy could
learn from the trace's generator (``_traces.py``) without seeing the future: the daily curve and
the batch waves, the noise so far, a surprise once it is under way (and, generously, when it
ends), and the laws of what it cannot know yet:
  noise    the trace's AR(1) noise, three steps on: its mean is persistence³ × the noise at t − 3,
           its spread the three draws since (Gaussian)
  walk     the level's three Gaussian steps since t − 3 (the bounds at 120 and 600 left out, which
           overstates the spread near them: for walk the frontier is an estimate, not a bound)
  surprises  diurnal's bursts and flash's crowds: as likely in any minute (their rate over the
           trace), of a size uniform over the generator's range; none can start while a diurnal
           burst is under way (they never overlap)
Each minute it takes the number of 8-CPU nodes n that minimises n + w × E[(demand − 8n)⁺], the
expected unmet demand priced at w node-minutes per CPU-minute; pods pack perfectly (capacity is
fluid) and nodes launch and leave without delay. One weight w gives one point (its cost and the
unmet demand it leaves on this trace); a pool may mix weights over time, so the frontier is the
lower convex hull of the points.

Its cost is measured against the scoreboard's oracle (``simulator/costs.py``: whole nodes for the
demand of each minute, launched one join delay ahead), on the trace's own CPUs. A real pool
forecasts from less and places whole pods on nodes, so at a given unmet demand it pays at least
the frontier's cost, on average (one week's draws may favour a policy by a little). A pool
whose nodes join at random times can do better: asking for more than it needs, it gets the
first to join sooner (the scale-up hedge), so for it the frontier is a reference, not a bound.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from bench._traces import BURSTS
from bench._traces import CROWDS
from bench._traces import NOISE
from bench._traces import WALK_STEP
from bench._traces import Events
from bench._traces import draw
from bench._traces import noise
from clusterman.simulator.costs import max_ahead

NODE_CPUS = 8
# the traces whose laws it knows; steps' jumps it does not model (they would be surprises of their own)
SHAPES = ("diurnal", "flash", "batch", "growth", "walk", "noisy")
JOIN_MINUTES = 3  # the scoreboard's join delay, 180 s
# node-minutes an unmet CPU-minute is worth, 1 .. 16,384 (below 1/8 no node is worth its price)
WEIGHTS = tuple(2 ** (k / 2) for k in range(29))
SIZES = 8  # points taken of a surprise's size (midpoints of equal slices of its range)


@dataclass(frozen=True)
class Point:
    cost_vs_oracle: float
    unmet: float  # CPU-minutes
    spare: float  # mean CPUs joined above the demand


@dataclass(frozen=True)
class _Minute:
    """What is known of one minute's demand when its nodes are chosen."""

    mean: float  # the demand expected, surprises to come left out
    spread: float  # stddev of the Gaussian part (noise, walk)
    chance: float  # that a surprise starts in time to be in it unseen
    sizes: tuple[float, ...]  # its size, if one does


def frontier(name: str, days: float, weights: Iterable[float] = WEIGHTS, seed: int = 1) -> list[Point]:
    """The lower convex hull of the points of ``weights``, least unmet first, for the trace drawn
    with ``seed`` (module docstring)."""
    values, events = draw(name, days, seed)
    demand = [max(v, 0.0) for v in values]
    minutes = _minutes(name, days, demand, events, seed)
    oracle = math.fsum(max_ahead([_nodes(d) for d in demand], JOIN_MINUTES))
    savings = [_savings(m) for m in minutes]
    points = []
    for w in weights:
        joined = [lo + bisect.bisect_left(saved, -1 / w) for lo, saved in savings]
        short = [d - NODE_CPUS * n for d, n in zip(demand, joined, strict=True)]
        points.append(
            Point(
                cost_vs_oracle=math.fsum(max_ahead(joined, JOIN_MINUTES)) / oracle,
                unmet=math.fsum(s for s in short if s > 0),
                spare=-math.fsum(short) / len(short),
            )
        )
    return _hull(points)


def cheapest(points: list[Point], unmet: float) -> Point | None:
    """The least cost on the hull at ``unmet`` CPU-minutes unmet (between two points, the line
    that mixes them); None when every point leaves more."""
    if not points or unmet < points[0].unmet:
        return None
    if unmet >= points[-1].unmet:
        return points[-1]
    k = next(k for k in range(1, len(points)) if points[k].unmet > unmet)
    a, b = points[k - 1], points[k]  # a leaves at most unmet, b more
    share = (unmet - a.unmet) / (b.unmet - a.unmet)
    return Point(
        cost_vs_oracle=a.cost_vs_oracle + share * (b.cost_vs_oracle - a.cost_vs_oracle),
        unmet=unmet,
        spare=a.spare + share * (b.spare - a.spare),
    )


def _minutes(name: str, days: float, demand: list[float], events: Events, seed: int) -> list[_Minute]:
    share, keep = NOISE[name]
    wiggle = noise(name, days, seed)
    # the demand that is not noise times a level: diurnal's bursts come on top of the noise; flash's
    # crowds are in the level; the unseen part of either is what started in the last JOIN_MINUTES
    n = len(demand)
    on_top, calm = [0.0] * n, [False] * n
    unseen_top, unseen_level = [0.0] * n, [0.0] * n
    for start, adds in events:
        for k, cpus in enumerate(adds):
            t = start + k
            if name == "diurnal":
                on_top[t] += cpus
                calm[t] = k >= JOIN_MINUTES
                unseen_top[t] += cpus if k < JOIN_MINUTES else 0.0
            elif k < JOIN_MINUTES:
                unseen_level[t] += cpus / wiggle[t]
    level = [(d - a) / x for d, a, x in zip(demand, on_top, wiggle, strict=True)]
    step = share * math.sqrt(1 - keep * keep)
    noise_var = step * step * sum(keep ** (2 * k) for k in range(JOIN_MINUTES))
    walk_var = JOIN_MINUTES * WALK_STEP**2 if name == "walk" else 0.0
    chance, sizes = _surprise_law(name, n)
    out = []
    for t in range(n):
        back = max(t - JOIN_MINUTES, 0)
        x = 1 + keep**JOIN_MINUTES * (wiggle[back] - 1) if t >= JOIN_MINUTES else 1.0
        known = level[back] if name == "walk" else level[t] - unseen_level[t]
        mean = known * x + on_top[t] - unseen_top[t]
        spread = math.sqrt(known * known * noise_var + walk_var * (x * x + noise_var))
        scaled = tuple(s * x for s in sizes) if name == "flash" else sizes  # crowds come with the noise
        out.append(_Minute(mean, spread, 0.0 if calm[t] else chance, scaled))
    return out


def _surprise_law(name: str, minutes: int) -> tuple[float, tuple[float, ...]]:
    """The chance a surprise starts within a join delay, and the sizes it may have."""
    if name == "diurnal":
        rate, least, most = BURSTS
    elif name == "flash":
        count, least, most = CROWDS
        rate = count / minutes
    else:
        return 0.0, ()
    chance = 1 - (1 - rate) ** JOIN_MINUTES
    width = (most - least) / SIZES
    return chance, tuple(least + width * (k + 0.5) for k in range(SIZES))


def _savings(m: _Minute) -> tuple[int, list[float]]:
    """(lo, saved): saved[k] is minus the unmet demand node lo + k + 1 saves over node lo + k. The
    expected unmet demand is convex in the nodes, so the savings fall, and with weight w the
    policy takes the first node whose saving is below 1 / w (``bisect`` on the negated list).
    From lo no weight of at least 1 takes fewer nodes, up to one where none takes more."""
    lo = max(0, math.floor((m.mean - 4 * m.spread) / NODE_CPUS) - 1)
    hi = _nodes(m.mean + 10 * m.spread + (max(m.sizes) if m.sizes else 0.0)) + 1
    shorts = [_short(m, n) for n in range(lo, hi + 2)]
    return lo, [b - a for a, b in itertools.pairwise(shorts)]


def _short(m: _Minute, n: int) -> float:
    """E[(demand − 8n)⁺] for the minute's law."""
    room = NODE_CPUS * n - m.mean
    out = _above(room, m.spread)
    if m.chance > 0:
        out = (1 - m.chance) * out + m.chance * math.fsum(_above(room - s, m.spread) for s in m.sizes) / len(m.sizes)
    return out


def _above(room: float, spread: float) -> float:
    """E[(X − room)⁺] for X Gaussian with mean 0 and stddev ``spread``."""
    if spread <= 0:
        return max(-room, 0.0)
    z = room / spread
    return spread * (math.exp(-z * z / 2) / math.sqrt(2 * math.pi) - z * 0.5 * math.erfc(z / math.sqrt(2)))


def _hull(points: list[Point]) -> list[Point]:
    """The lower convex hull in (unmet, cost) where more unmet is cheaper, least unmet first: the
    points no mix of others beats."""
    hull: list[Point] = []
    for p in sorted(points, key=lambda p: (p.unmet, p.cost_vs_oracle)):
        while len(hull) >= 2 and _turn(hull[-2], hull[-1], p) <= 0:
            hull.pop()
        hull.append(p)
    cheapest = min(range(len(hull)), key=lambda k: (hull[k].cost_vs_oracle, hull[k].unmet))
    return hull[: cheapest + 1]  # past the cheapest, more unmet buys nothing


def _turn(a: Point, b: Point, c: Point) -> float:
    """> 0 when a, b, c turn counter-clockwise in (unmet, cost)."""
    return (b.unmet - a.unmet) * (c.cost_vs_oracle - a.cost_vs_oracle) - (b.cost_vs_oracle - a.cost_vs_oracle) * (
        c.unmet - a.unmet
    )


def _nodes(cpus: float) -> int:
    return max(0, math.ceil(cpus / NODE_CPUS - 1e-9))

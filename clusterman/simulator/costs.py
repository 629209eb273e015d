"""Cost and shortfall, minute by minute, and the oracle a run's cost is measured against.

Each simulated minute, after the autoscaler's run, the ledger charges every instance the groups
hold at its market's price (``prices.PriceBook``). An instance counts from launch to termination,
joined or not, since EC2 bills from launch. The ledger also notes:
  paid CPUs       the CPUs of those instances
  joined CPUs     the allocatable CPUs of nodes that joined the scheduler (ready or tainted)
  allocated CPUs  what running tasks asked for
  demand CPUs     allocated + pending: what the workload asked for
  unmet CPUs      pending: asked for and not running
Totals: cost; cost per paid CPU-hour and per allocated CPU-hour; the cost of unused capacity (each
minute's cost × the share of paid CPUs not allocated); unmet demand in CPU-minutes and the minutes
with any shortfall.

The oracle has exactly the instances the demand needs every minute, in the market cheapest at
that minute, and launches each one the join delay before it is needed: at minute t it pays for
the most instances needed in [t, t + join delay].
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.core.cloud_view import CloudView
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.simulator.prices import PriceBook

EPSILON = 1e-9


@dataclass(frozen=True)
class Totals:
    cost: float  # dollars
    unused_cost: float  # dollars paid for CPUs no task used
    paid_cpu_hours: float
    allocated_cpu_hours: float
    demand_cpu_hours: float
    unmet_cpu_minutes: float
    shortfall_minutes: float
    instances_launched: int
    instances_terminated: int
    peak_instances: int
    instance_hours: float

    @property
    def cost_per_cpu_hour(self) -> float:
        return self.cost / self.paid_cpu_hours if self.paid_cpu_hours else 0.0

    @property
    def cost_per_allocated_cpu_hour(self) -> float:
        return self.cost / self.allocated_cpu_hours if self.allocated_cpu_hours else 0.0


class Timeline:
    """One value per simulated minute for the plot, in compact arrays."""

    NAMES = ("time", "demand_cpus", "allocated_cpus", "joined_cpus", "paid_cpus", "cost_per_hour")

    def __init__(self) -> None:
        self.columns = {name: array("d") for name in self.NAMES}

    def add(self, *values: float) -> None:
        for column, value in zip(self.columns.values(), values, strict=True):
            column.append(value)

    def __getitem__(self, name: str) -> array[float]:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns["time"])


class Ledger:
    def __init__(
        self, markets_by_group: dict[str, Sequence[SimulatedMarket]], prices: PriceBook, step_seconds: int
    ) -> None:
        self._markets = {(g, m.instance_type, m.availability_zone): m for g, ms in markets_by_group.items() for m in ms}
        self.prices = prices
        self.step_hours = step_seconds / 3600
        self.series = Timeline()
        self.demand: list[array[float]] = [array("d") for _ in RESOURCE_NAMES]  # per resource, for the oracle
        self._view: CloudView | None = None
        self._counts: list[tuple[SimulatedMarket, int]] = []
        self._paid_cpus = 0.0
        self._ids: set[str] = set()
        self._cost = self._unused = self._paid = self._allocated = self._asked = 0.0
        self._unmet = self._short = self._instance_hours = 0.0
        self._launched = self._terminated = self._peak = 0

    def begin(self, view: CloudView) -> None:
        """The instances running when the story starts: charged from now on, never counted as launched."""
        self._observe(view)
        self._launched = 0

    def record(self, now: float, view: CloudView, joined_cpus: float, allocated: Resources, pending: Resources) -> None:
        """One minute from ``now``: ``view`` is what the groups hold after this minute's run."""
        if view is not self._view:
            self._observe(view)
        rate = sum(count * self.prices.price(market, now) for market, count in self._counts)
        cost = rate * self.step_hours
        paid, used = self._paid_cpus, allocated.cpus
        demand = allocated + pending
        self._cost += cost
        self._unused += cost * (max(paid - used, 0.0) / paid) if paid > 0 else cost
        self._paid += paid * self.step_hours
        self._allocated += used * self.step_hours
        self._asked += demand.cpus * self.step_hours
        self._instance_hours += len(self._ids) * self.step_hours
        minutes = self.step_hours * 60
        self._unmet += pending.cpus * minutes
        if any(amount > EPSILON for amount in pending):
            self._short += minutes
        self.series.add(now, demand.cpus, used, joined_cpus, paid, rate)
        for column, amount in zip(self.demand, demand, strict=True):
            column.append(amount)

    def _observe(self, view: CloudView) -> None:
        """The groups changed: count instances per market again (once per change, not per minute)."""
        self._view = view
        counts: dict[tuple[str, str, str], int] = {}
        for i in view.instances:
            key = (i.group_id, i.instance_type, i.market)
            counts[key] = counts.get(key, 0) + 1
        unknown = sorted(set(counts) - self._markets.keys())
        if unknown:
            raise ValueError(f"instances of markets the ledger does not know: {unknown}")
        self._counts = [(self._markets[key], n) for key, n in sorted(counts.items())]
        self._paid_cpus = sum(m.resources.cpus * n for m, n in self._counts)
        ids = {i.instance_id for i in view.instances}
        self._launched += len(ids - self._ids)
        self._terminated += len(self._ids - ids)
        self._ids = ids
        self._peak = max(self._peak, len(ids))

    def totals(self) -> Totals:
        return Totals(
            cost=self._cost,
            unused_cost=self._unused,
            paid_cpu_hours=self._paid,
            allocated_cpu_hours=self._allocated,
            demand_cpu_hours=self._asked,
            unmet_cpu_minutes=self._unmet,
            shortfall_minutes=self._short,
            instances_launched=self._launched,
            instances_terminated=self._terminated,
            peak_instances=self._peak,
            instance_hours=self._instance_hours,
        )


def oracle_cost(
    times: Sequence[float],
    demand: Sequence[Sequence[float]],
    markets: Iterable[SimulatedMarket],
    prices: PriceBook,
    join_delay_seconds: float,
    step_seconds: int,
) -> float:
    """The oracle's dollars over the run (module docstring). ``demand`` holds one column per resource."""
    lead = math.ceil(join_delay_seconds / step_seconds - EPSILON)
    per_step: list[float] | None = None
    for market in {(m.instance_type, m.availability_zone, m.spot): m for m in markets}.values():
        needed = [_instances_needed(market.resources, [column[k] for column in demand]) for k in range(len(times))]
        paid = max_ahead(needed, lead)
        cost = [n * prices.price(market, t) for n, t in zip(paid, times, strict=True)]
        per_step = cost if per_step is None else [min(a, b) for a, b in zip(per_step, cost, strict=True)]
    return math.fsum(per_step or ()) * step_seconds / 3600


def _instances_needed(size: Resources, demand: Sequence[float]) -> float:
    """Whole instances of ``size`` that hold ``demand``; infinite when it lacks an asked-for resource."""
    worst = 0
    for have, want in zip(size, demand, strict=True):
        if want <= EPSILON:
            continue
        if have <= 0:
            return math.inf
        worst = max(worst, math.ceil(want / have - EPSILON))
    return worst


def max_ahead(values: Sequence[float], lead: int) -> list[float]:
    """out[k] = max(values[k : k + lead + 1]), in one pass with a monotonic queue."""
    out = [0.0] * len(values)
    window: deque[int] = deque()
    for k in range(len(values) - 1, -1, -1):
        while window and values[window[-1]] <= values[k]:
            window.pop()
        window.append(k)
        while window[0] > k + lead:
            window.popleft()
        out[k] = values[window[0]]
    return out

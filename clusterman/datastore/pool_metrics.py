"""The pool's system metrics, from one snapshot (pure: the batch does the I/O).

Names, types and keys are Yelp Clusterman's where it has them, so signals and dashboards read
the same series (``name|cluster=<cluster>,pool=<pool>.<scheduler>``); docs/collector.md lists
them. Figures that move with the load are ``system_metrics`` (signals read them); figures that
describe the pool's shape are ``metadata``, as Clusterman files ``{r}_total`` and capacities.
Totals and allocations are over every node the scheduler reports (orphans add nothing), as
Clusterman counts them; the decision narrows to ready nodes itself.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Container

from clusterman.core.accounting import Accounting
from clusterman.core.accounting import account_snapshot
from clusterman.core.accounting import pending_demand
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.datastore.store import Point
from clusterman.datastore.store import Value
from clusterman.datastore.store import system_key

SYSTEM = MetricType.SYSTEM_METRICS
METADATA = MetricType.METADATA
_FIGURE_NAMES = {
    figure: tuple(f"{r}_{figure}" for r in RESOURCE_NAMES)
    for figure in ("allocated", "reserved", "slack", "revocable", "total", "pending")
}
_STATE_NAMES = {state: f"{state.value}_nodes" for state in NodeState}


def market_key(instance_type: str, market: str) -> str:
    """Clusterman's key for a market in ``fulfilled_capacity``: ``<m5.large, us-west-2a>``."""
    return f"<{instance_type}, {market}>"


def collect(
    snapshot: PoolSnapshot,
    identity: PoolIdentity,
    accounting: Accounting | None = None,
    names: Container[str] | None = None,
) -> list[Point]:
    """``accounting``: the snapshot's ``account_nodes``, when the caller already has it; ``names``:
    only these metrics (the simulator writes what the pool's signals read, every simulated minute)."""
    timestamp = int(snapshot.taken_at)
    points: list[Point] = []

    def wanted(*candidates: str) -> bool:
        return names is None or any(name in names for name in candidates)

    def add(metric_type: MetricType, name: str, value: Value) -> None:
        if names is None or name in names:
            key = system_key(name, identity.cluster, identity.pool_with_scheduler)
            points.append(Point(metric_type, key, timestamp, value))

    if accounting is None:
        accounting = account_snapshot(snapshot)
    figures: dict[str, tuple[MetricType, Callable[[], Resources]]] = {
        "allocated": (SYSTEM, lambda: accounting.allocated),
        "reserved": (SYSTEM, lambda: accounting.reserved),
        "slack": (SYSTEM, lambda: accounting.slack),
        "revocable": (SYSTEM, lambda: accounting.revocable_in_use),
        "total": (METADATA, lambda: accounting.capacity),
    }
    if identity.scheduler.traits.reports_pending:
        figures["pending"] = (SYSTEM, lambda: pending_demand(snapshot))
        if wanted("unschedulable_pods"):
            add(SYSTEM, "unschedulable_pods", sum(1 for t in snapshot.pending if t.asks_for_capacity))
    for figure, (metric_type, amounts_of) in figures.items():
        names_of = _FIGURE_NAMES[figure]
        if wanted(*names_of):  # worked out only when some resource of it is written
            amounts = amounts_of()
            for resource, name in zip(RESOURCE_NAMES, names_of, strict=True):
                add(metric_type, name, amounts[resource])

    if wanted(*_STATE_NAMES.values()):
        counts = snapshot.counts_by_state
        for state, name in _STATE_NAMES.items():
            add(METADATA, name, counts[state])

    if snapshot.groups:  # without the cloud's view there is no target to report, not a target of 0
        add(METADATA, "target_capacity", snapshot.target_capacity)
        if wanted("fulfilled_capacity", "non_orphan_fulfilled_capacity"):
            by_market, joined = snapshot.member_weights
            add(METADATA, "fulfilled_capacity", {market_key(*k): w for k, w in by_market.items()})
            add(METADATA, "non_orphan_fulfilled_capacity", joined)
    return points

"""The pool's system metrics, from one snapshot (pure: the batch does the I/O).

Names, types and keys are Yelp Clusterman's where it has them, so signals and dashboards read
the same series (``name|cluster=<cluster>,pool=<pool>.<scheduler>``); docs/collector.md lists
them. Figures that move with the load are ``system_metrics`` (signals read them); figures that
describe the pool's shape are ``metadata``, as Clusterman files ``{r}_total`` and capacities.
Totals and allocations are over every node the scheduler reports (orphans add nothing), as
Clusterman counts them; the decision narrows to ready nodes itself.
"""

from __future__ import annotations

from clusterman.cluster.accounting import account_nodes
from clusterman.cluster.accounting import pending_demand
from clusterman.cluster.model import NodeState
from clusterman.cluster.model import PoolSnapshot
from clusterman.config.model import MetricType
from clusterman.config.model import PoolIdentity
from clusterman.config.model import Scheduler
from clusterman.metrics.store import Point
from clusterman.metrics.store import Value
from clusterman.metrics.store import system_key
from clusterman.resources import RESOURCE_NAMES

SYSTEM = MetricType.SYSTEM_METRICS
METADATA = MetricType.METADATA
# Schedulers that report work they could not place (Mesos has no such queue to read).
REPORTS_PENDING = frozenset({Scheduler.KUBERNETES, Scheduler.SIMULATED})


def market_key(instance_type: str, market: str) -> str:
    """Clusterman's key for a market in ``fulfilled_capacity``: ``<m5.large, us-west-2a>``."""
    return f"<{instance_type}, {market}>"


def collect(snapshot: PoolSnapshot, identity: PoolIdentity) -> list[Point]:
    timestamp = int(snapshot.taken_at)
    points: list[Point] = []

    def add(metric_type: MetricType, name: str, value: Value) -> None:
        key = system_key(name, identity.cluster, identity.pool_with_scheduler)
        points.append(Point(metric_type, key, timestamp, value))

    accounting = account_nodes(snapshot.nodes)
    figures = {
        "allocated": (SYSTEM, accounting.allocated),
        "reserved": (SYSTEM, accounting.reserved),
        "slack": (SYSTEM, accounting.slack),
        "revocable": (SYSTEM, accounting.revocable_in_use),
        "total": (METADATA, accounting.capacity),
    }
    if identity.scheduler in REPORTS_PENDING:
        figures["pending"] = (SYSTEM, pending_demand(snapshot))
        add(SYSTEM, "unschedulable_pods", sum(1 for t in snapshot.pending if not t.daemon and not t.revocable))
    for figure, (metric_type, amounts) in figures.items():
        for resource in RESOURCE_NAMES:
            add(metric_type, f"{resource}_{figure}", amounts[resource])

    counts = snapshot.counts_by_state
    for state in NodeState:
        add(METADATA, f"{state.value}_nodes", counts[state])

    if snapshot.groups:  # without the cloud's view there is no target to report, not a target of 0
        add(METADATA, "target_capacity", snapshot.target_capacity)
        by_market: dict[str, float] = {}
        for node in snapshot.nodes:
            if node.group_id:
                key = market_key(node.instance_type, node.market)
                by_market[key] = by_market.get(key, 0.0) + node.weight
        add(METADATA, "fulfilled_capacity", by_market)
        add(
            METADATA,
            "non_orphan_fulfilled_capacity",
            sum(n.weight for n in snapshot.nodes if n.group_id and n.joined),
        )
    return points

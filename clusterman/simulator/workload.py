"""The simulated pool's work, from the metrics file: what the real pool ran and could not place.

Demand at time t, per resource r, is the pool's ``{r}_allocated`` plus its ``{r}_pending`` (when
the file has them; Mesos pools have no pending series), each read as a step function (a value
holds until the next point). It runs as identical tasks of one size (``DemandTrace``): as many as
the resource that needs the most tasks asks for, so the pool needs at least the capacity the
real one used. The task size is the pool's ``simulation.demand_task``, or by default one CPU of
the smallest instance's shape (its memory, disk and GPUs per CPU): tasks then fill a node evenly,
and the count follows whichever resource the nodes run out of first. A smaller task packs closer
to the demand and costs more steps to place.
"""

from __future__ import annotations

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.datastore.datafile import MetricsData
from clusterman.datastore.store import Value
from clusterman.datastore.store import system_key

FIGURES = ("allocated", "pending")


def demand_keys(identity: PoolIdentity) -> dict[str, tuple[str, str]]:
    """Store key -> (resource, figure) of every series demand is read from."""
    return {
        system_key(f"{r}_{figure}", identity.cluster, identity.pool_with_scheduler): (r, figure)
        for r in RESOURCE_NAMES
        for figure in FIGURES
    }


def demand_points(data: MetricsData, identity: PoolIdentity) -> list[tuple[float, Resources]]:
    """The pool's demand as a step function: one point at every timestamp any of its series has."""
    system = data.get(MetricType.SYSTEM_METRICS, {})
    series = [
        (RESOURCE_NAMES.index(resource), points)
        for key, (resource, _) in demand_keys(identity).items()
        if (points := system.get(key))
    ]
    times = sorted({t for _, points in series for t, _ in points})
    cursor = [0] * len(series)
    latest = [0.0] * len(series)
    out = []
    for t in times:
        amounts = [0.0] * len(RESOURCE_NAMES)
        for j, (resource, points) in enumerate(series):
            while cursor[j] < len(points) and points[cursor[j]][0] <= t:
                latest[j] = max(_number(points[cursor[j]][1]), 0.0)
                cursor[j] += 1
            amounts[resource] += latest[j]
        out.append((float(t), Resources(*amounts)))
    return out


def _number(value: Value) -> float:
    return value if isinstance(value, float) else sum(value.values())

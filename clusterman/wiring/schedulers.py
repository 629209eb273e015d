"""What the autoscaler builds for each scheduler, as one table: ``SCHEDULERS``.

A new scheduler is its adapters (a ``ClusterConnector`` and a ``NodeLifecycle`` in ``cluster/``),
their builders (``connectors.py``, ``lifecycles.py``), one row here, and its row of traits beside
the ``Scheduler`` enum (``core/config.py: SCHEDULER_TRAITS``: what follows from it, which layers
below the wiring read too). ``tests/test_extension_points.py`` checks that every ``Scheduler`` has
both rows. docs/architecture.md, "Adding a scheduler or a cloud kind".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.run.budget import SCHEDULER_TIMEOUT_SECONDS
from clusterman.wiring.connectors import kubernetes_connector
from clusterman.wiring.connectors import live_simulated_connector
from clusterman.wiring.connectors import mesos_connector
from clusterman.wiring.lifecycles import kubernetes_lifecycle
from clusterman.wiring.lifecycles import mesos_lifecycle
from clusterman.wiring.lifecycles import simulated_lifecycle

# (main, identity, pool, cloud, timeout_seconds, watch) -> the pool's connector
ConnectorBuilder = Callable[
    [MainConfig, PoolIdentity, PoolConfig, CloudViewSource | None, float, bool], ClusterConnector
]
# (main, identity, pool, the pool's connector, dry_run, timeout_seconds) -> the pool's node lifecycle
LifecycleBuilder = Callable[[MainConfig, PoolIdentity, PoolConfig, ClusterConnector | None, bool, float], NodeLifecycle]


@dataclass(frozen=True)
class SchedulerRow:
    scheduler: Scheduler
    connector: ConnectorBuilder
    lifecycle: LifecycleBuilder


SCHEDULERS: dict[Scheduler, SchedulerRow] = {
    row.scheduler: row
    for row in (
        SchedulerRow(Scheduler.KUBERNETES, kubernetes_connector, kubernetes_lifecycle),
        SchedulerRow(Scheduler.MESOS, mesos_connector, mesos_lifecycle),
        SchedulerRow(Scheduler.SIMULATED, live_simulated_connector, simulated_lifecycle),
    )
}


def scheduler_row(scheduler: Scheduler) -> SchedulerRow:
    """The row of ``scheduler``; one with none is a bug this says plainly (the test keeps it from shipping)."""
    row = SCHEDULERS.get(scheduler)
    if row is None:
        raise LookupError(f"no row for the scheduler {scheduler.value!r} in wiring/schedulers.py: SCHEDULERS")
    return row


def connector_for_pool(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    cloud: CloudViewSource | None = None,
    timeout_seconds: float = SCHEDULER_TIMEOUT_SECONDS,
    watch: bool = True,
) -> ClusterConnector:
    """``timeout_seconds``: each attempt of each call to the scheduler's API (see ``scheduler_timeout``).
    ``watch``: a Kubernetes pool is kept by watching (a program that reads it every run); False for a
    command that reads it once."""
    return scheduler_row(identity.scheduler).connector(main, identity, pool, cloud, timeout_seconds, watch)


def lifecycle_for_pool(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    *,
    connector: ClusterConnector | None = None,
    dry_run: bool = False,
    timeout_seconds: float = SCHEDULER_TIMEOUT_SECONDS,
) -> NodeLifecycle:
    """``timeout_seconds``: each attempt of each call to the scheduler's API (``scheduler_timeout``).
    A pool with ``draining_enabled: false`` (the default, as in Clusterman) terminates nodes
    without draining them."""
    build = scheduler_row(identity.scheduler).lifecycle
    lifecycle = build(main, identity, pool, connector, dry_run, timeout_seconds)
    return lifecycle if pool.draining_enabled else WithoutDraining(lifecycle)

"""Build a pool's node lifecycle from its srv-configs (no network: lifecycles connect on use).

The scheduler is the pool file's suffix, as for connectors (``connectors.py``). A simulated pool's
lifecycle acts on the scheduler inside its connector, so that connector is passed in. A pool with
``draining_enabled: false`` (the default, as in Clusterman) terminates nodes without draining them.
"""

from __future__ import annotations

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.cluster.mesos_lifecycle import MesosLifecycle
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.run.budget import SCHEDULER_TIMEOUT_SECONDS
from clusterman.wiring.connectors import kubeconfig_path
from clusterman.wiring.connectors import mesos_master
from clusterman.wiring.connectors import safe_to_evict_keys


def lifecycle_for_pool(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    *,
    connector: ClusterConnector | None = None,
    dry_run: bool = False,
    timeout_seconds: float = SCHEDULER_TIMEOUT_SECONDS,
) -> NodeLifecycle:
    """``timeout_seconds``: each attempt of each call to the scheduler's API (``scheduler_timeout``)."""
    lifecycle: NodeLifecycle
    if identity.scheduler is Scheduler.KUBERNETES:
        lifecycle = KubernetesLifecycle(
            kubeconfig_path(main, identity),
            dry_run=dry_run,
            safe_to_evict_keys=safe_to_evict_keys(main, identity, pool),
            timeout_seconds=timeout_seconds,
        )
    elif identity.scheduler is Scheduler.MESOS:
        lifecycle = MesosLifecycle(mesos_master(main, identity), dry_run=dry_run, timeout_seconds=timeout_seconds)
    else:
        if not isinstance(connector, SimulatedConnector):
            raise ValueError(f"the simulated pool {identity}: pass the pool's SimulatedConnector as connector=")
        lifecycle = SimulatedLifecycle(connector.scheduler, dry_run=dry_run)
    return lifecycle if pool.draining_enabled else WithoutDraining(lifecycle)

"""Build a pool's node lifecycle from its srv-configs (no network: lifecycles connect on use).

One builder per scheduler, each named in its row of ``schedulers.py``, as for connectors
(``connectors.py``). A simulated pool's lifecycle acts on the scheduler inside its connector, so
that connector is passed in.
"""

from __future__ import annotations

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.mesos_lifecycle import MesosLifecycle
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.wiring.connectors import kubeconfig_path
from clusterman.wiring.connectors import mesos_master
from clusterman.wiring.connectors import safe_to_evict_keys


def kubernetes_lifecycle(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    connector: ClusterConnector | None,
    dry_run: bool,
    timeout_seconds: float,
) -> NodeLifecycle:
    return KubernetesLifecycle(
        kubeconfig_path(main, identity),
        dry_run=dry_run,
        safe_to_evict_keys=safe_to_evict_keys(main, identity, pool),
        timeout_seconds=timeout_seconds,
    )


def mesos_lifecycle(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    connector: ClusterConnector | None,
    dry_run: bool,
    timeout_seconds: float,
) -> NodeLifecycle:
    return MesosLifecycle(mesos_master(main, identity), dry_run=dry_run, timeout_seconds=timeout_seconds)


def simulated_lifecycle(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    connector: ClusterConnector | None,
    dry_run: bool,
    timeout_seconds: float,
) -> NodeLifecycle:
    if not isinstance(connector, SimulatedConnector):
        raise ValueError(f"the simulated pool {identity}: pass the pool's SimulatedConnector as connector=")
    return SimulatedLifecycle(connector.scheduler, dry_run=dry_run)

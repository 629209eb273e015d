"""Build a pool's node lifecycle from its srv-configs (no network: lifecycles connect on use).

The scheduler is the pool file's suffix, as for connectors (``connectors.py``). A simulated pool's
lifecycle acts on the scheduler inside its connector, so that connector is passed in. A pool with
``draining_enabled: false`` (the default, as in Clusterman) terminates nodes without draining them.
"""

from __future__ import annotations

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.kubernetes import SAFE_TO_EVICT_ANNOTATION
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.cluster.mesos import master_url
from clusterman.cluster.mesos_lifecycle import MesosLifecycle
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.manager.budget import SCHEDULER_TIMEOUT_SECONDS
from clusterman.manager.connectors import _cluster


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
        kubeconfig = _cluster(main, identity).kubeconfig_path  # None: $KUBECONFIG or in-cluster
        keys = tuple(dict.fromkeys((SAFE_TO_EVICT_ANNOTATION, pool.safe_to_evict_key)))
        lifecycle = KubernetesLifecycle(
            kubeconfig, dry_run=dry_run, safe_to_evict_keys=keys, timeout_seconds=timeout_seconds
        )
    elif identity.scheduler is Scheduler.MESOS:
        fqdn = _cluster(main, identity).mesos_master_fqdn
        if not fqdn:
            raise ConfigError(f"clusters.{identity.cluster}", "mesos_master_fqdn", f"required for the pool {identity}")
        lifecycle = MesosLifecycle(master_url(fqdn), dry_run=dry_run, timeout_seconds=timeout_seconds)
    else:
        if not isinstance(connector, SimulatedConnector):
            raise ValueError(f"the simulated pool {identity}: pass the pool's SimulatedConnector as connector=")
        lifecycle = SimulatedLifecycle(connector.scheduler, dry_run=dry_run)
    return lifecycle if pool.draining_enabled else WithoutDraining(lifecycle)

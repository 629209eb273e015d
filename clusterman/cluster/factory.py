"""Build a pool's cluster connector from its srv-configs (no network: connectors connect on use).

The scheduler is the pool file's suffix (``<pool>.kubernetes``, ``.mesos``, ``.simulated``).
``cloud`` is the pool's resource groups (an adapter providing a CloudView); without one, a
Kubernetes or Mesos snapshot has no groups (see docs/cluster.md). A simulated pool whose groups are
all ``simulated`` gets an in-process SimulatedCloud built from its ``simulation`` block.
"""

from __future__ import annotations

from pathlib import Path

from clusterman.cluster.cloud_view import CloudViewSource
from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.kubernetes import SAFE_TO_EVICT_ANNOTATION
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.mesos import MesosConnector
from clusterman.cluster.mesos import MesosPool
from clusterman.cluster.mesos import master_url
from clusterman.cluster.simulated import SimulatedCloud
from clusterman.cluster.simulated import SimulatedConnector
from clusterman.cluster.simulated import SimulatedGroupSpec
from clusterman.cluster.simulated import SimulatedScheduler
from clusterman.cluster.simulated import TaskList
from clusterman.cluster.simulated import WorkItem
from clusterman.cluster.simulated import Workload
from clusterman.cluster.simulated_trace import load_trace
from clusterman.config.loader import pool_config_path
from clusterman.config.model import ClusterConfig
from clusterman.config.model import MainConfig
from clusterman.config.model import PoolConfig
from clusterman.config.model import PoolIdentity
from clusterman.config.model import Scheduler
from clusterman.config.schema import ConfigError
from clusterman.resources import Resources


def connector_for_pool(
    main: MainConfig, identity: PoolIdentity, pool: PoolConfig, cloud: CloudViewSource | None = None
) -> ClusterConnector:
    if identity.scheduler is Scheduler.KUBERNETES:
        kubeconfig = _cluster(main, identity).kubeconfig_path
        if not kubeconfig:
            raise ConfigError(f"clusters.{identity.cluster}", "kubeconfig_path", f"required for the pool {identity}")
        keys = (SAFE_TO_EVICT_ANNOTATION, pool.safe_to_evict_key)
        settings = KubernetesPool(
            pool=identity.pool,
            node_label_key=pool.node_label_key,
            pool_label_key=pool.pool_label_key,
            default_request=pool.default_pod_request,
            safe_to_evict_keys=tuple(dict.fromkeys(keys)),
        )
        return KubernetesConnector(settings, kubeconfig, cloud=cloud)
    if identity.scheduler is Scheduler.MESOS:
        fqdn = _cluster(main, identity).mesos_master_fqdn
        if not fqdn:
            raise ConfigError(f"clusters.{identity.cluster}", "mesos_master_fqdn", f"required for the pool {identity}")
        mesos = MesosPool(identity.pool, non_batch_framework_prefixes=pool.non_batch_framework_prefixes)
        return MesosConnector(mesos, master_url(fqdn), cloud=cloud)
    return simulated_connector(identity, pool, cloud, pool_config_path(main.cluster_config_directory, identity).parent)


def simulated_connector(
    identity: PoolIdentity, pool: PoolConfig, cloud: CloudViewSource | None = None, base_dir: Path = Path(".")
) -> SimulatedConnector:
    """``base_dir`` is where relative paths of the ``simulation`` block start (the pool file's directory)."""
    sim = pool.simulation
    if cloud is None:
        others = sorted({g.kind for g in pool.resource_groups if g.kind != "simulated"})
        if others or not pool.resource_groups:
            problem = (
                f"the simulated pool {identity} needs a cloud adapter for its {', '.join(others)} groups"
                if others
                else f"the simulated pool {identity} has no resource groups (add `- simulated: {{tag: ...}}`)"
            )
            raise ConfigError("resource_groups", "", problem)
        specs = [
            SimulatedGroupSpec(
                id=g.tag or f"{identity.pool}-{i}",
                node_resources=sim.node_resources,
                weight=sim.weight,
                instance_type=sim.instance_type,
                market=sim.market,
            )
            for i, g in enumerate(pool.resource_groups)
        ]
        initial = sim.initial_capacity if sim.initial_capacity is not None else pool.scaling_limits.min_capacity
        cloud = SimulatedCloud(specs, {specs[0].id: initial})
    items = [
        WorkItem(f"{identity.pool}-tasks{i}-{n:05d}", Resources(t.cpus, t.mem, t.disk, t.gpus))
        for i, t in enumerate(sim.tasks)
        for n in range(t.count)
    ]
    workload: Workload = TaskList(items)
    if sim.trace is not None:
        trace = sim.trace
        workload = load_trace(base_dir / trace.file, trace.metric, trace.task, trace.speedup)
    scheduler = SimulatedScheduler(
        workload,
        join_delay_seconds=sim.join_delay_seconds,
        join_delay_stdev_seconds=sim.join_delay_stdev_seconds,
        seed=sim.seed,
    )
    return SimulatedConnector(cloud, scheduler)


def _cluster(main: MainConfig, identity: PoolIdentity) -> ClusterConfig:
    cluster = main.clusters.get(identity.cluster)
    if cluster is None:
        raise ConfigError("clusters", identity.cluster, f"unknown cluster (known: {', '.join(sorted(main.clusters))})")
    return cluster

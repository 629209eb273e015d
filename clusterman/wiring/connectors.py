"""Build a pool's cluster connector from its srv-configs (no network: connectors connect on use).

One builder per scheduler, each named in its row of ``schedulers.py``, which picks the one for
the pool file's suffix (``<pool>.kubernetes``, ``.mesos``, ``.simulated``). ``cloud`` is the
pool's resource groups (an adapter providing a CloudView); without one, a Kubernetes or Mesos
snapshot has no groups (see docs/cluster.md). A simulated pool whose groups are all ``simulated``
gets in-process ``SimulatedGroup``s built from its ``simulation`` block.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cloud.simulated_group import default_task
from clusterman.cloud.simulated_group import groups_from_config
from clusterman.cloud.simulated_group import markets_from_config
from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.kubernetes import SAFE_TO_EVICT_ANNOTATION
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.mesos import MesosConnector
from clusterman.cluster.mesos import MesosPool
from clusterman.cluster.mesos import master_url
from clusterman.cluster.simulated_scheduler import LiveSimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.cluster.simulated_scheduler import TaskList
from clusterman.cluster.simulated_scheduler import WorkItem
from clusterman.cluster.simulated_scheduler import Workload
from clusterman.cluster.simulated_scheduler import Workloads
from clusterman.cluster.simulated_scheduler import node_allocatable
from clusterman.config.loader import cluster_config
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.config import ClusterConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config_schema import ConfigError
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources
from clusterman.wiring.trace_workload import load_trace


def kubernetes_connector(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    cloud: CloudViewSource | None,
    timeout_seconds: float,
    watch: bool,
) -> ClusterConnector:
    settings = KubernetesPool(
        pool=identity.pool,
        node_label_key=pool.node_label_key,
        pool_label_key=pool.pool_label_key,
        default_request=pool.default_pod_request,
        safe_to_evict_keys=safe_to_evict_keys(main, identity, pool),
    )
    return KubernetesConnector(
        settings, kubeconfig_path(main, identity), cloud=cloud, timeout_seconds=timeout_seconds, watch=watch
    )


def mesos_connector(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    cloud: CloudViewSource | None,
    timeout_seconds: float,
    watch: bool,
) -> ClusterConnector:
    mesos = MesosPool(identity.pool, non_batch_framework_prefixes=pool.non_batch_framework_prefixes)
    return MesosConnector(mesos, mesos_master(main, identity), cloud=cloud, timeout_seconds=timeout_seconds)


def live_simulated_connector(
    main: MainConfig,
    identity: PoolIdentity,
    pool: PoolConfig,
    cloud: CloudViewSource | None,
    timeout_seconds: float,
    watch: bool,
) -> ClusterConnector:
    """A simulated pool in a running autoscaler or collector (the local stack)."""
    return simulated_connector(identity, pool, cloud, live=True)


def simulated_connector(
    identity: PoolIdentity,
    pool: PoolConfig,
    cloud: CloudViewSource | None = None,
    *,
    clock: Callable[[], float] = time.time,
    source: str = "pool config",
    workload: Workload | None = None,
    live: bool = False,
) -> SimulatedConnector:
    """A simulated pool: its own ``simulated`` groups from the ``simulation`` block (on ``clock``)
    unless ``cloud`` is given, and a scheduler running the block's ``tasks``, its ``trace`` (a path
    the config loader made absolute), and ``workload``. ``live``: in a running
    autoscaler or collector, whose wall clock can be stepped back (a replay's time never is)."""
    sim = pool.simulation
    if cloud is None:
        cloud = GroupsCloudView(groups_from_config(identity, pool, clock, source))
    simulated = [g for g in cloud.groups if isinstance(g, SimulatedGroup)] if isinstance(cloud, GroupsCloudView) else []
    items = [
        WorkItem(f"{identity.pool}-tasks{i}-{n:05d}", Resources(t.cpus, t.mem, t.disk, t.gpus))
        for i, t in enumerate(sim.tasks)
        for n in range(t.count)
    ]
    workloads: list[Workload] = [TaskList(items)]
    if sim.trace is not None:
        task = sim.demand_task or default_task(markets_from_config(sim, source))
        workloads.append(load_trace(Path(sim.trace.file), sim.trace.metric, task, sim.trace.speedup))
    if workload is not None:
        workloads.append(workload)
    scheduler = SimulatedScheduler(
        workloads[0] if len(workloads) == 1 else Workloads(workloads),
        join_delay_seconds=sim.join_delay_seconds,
        join_delay_stdev_seconds=sim.join_delay_stdev_seconds,
        seed=sim.seed,
        allocatable=market_allocatable(m for g in simulated for m in g.markets),
        initial_nodes_joined=True,
        placement=sim.placement,
    )
    return (LiveSimulatedConnector if live else SimulatedConnector)(cloud, scheduler)


def market_allocatable(
    markets: Iterable[SimulatedMarket],
) -> Callable[[CloudInstance, ResourceGroup | None], Resources]:
    """A node's allocatable from its instance's market (type and zone), for simulated groups of
    mixed types; any other instance (a real adapter's) gets its group's size per weight unit."""
    sizes = {(m.instance_type, m.availability_zone): m.resources for m in markets}

    def allocatable(instance: CloudInstance, group: ResourceGroup | None) -> Resources:
        size = sizes.get((instance.instance_type, instance.market))
        return size if size is not None else node_allocatable(instance, group)

    return allocatable


def kubeconfig_path(main: MainConfig, identity: PoolIdentity) -> str | None:
    """The cluster's kubeconfig; None means $KUBECONFIG or the in-cluster account."""
    return cluster_config(main, identity.cluster).kubeconfig_path


def mesos_master(main: MainConfig, identity: PoolIdentity) -> str:
    """The URL of the cluster's Mesos master; a Mesos pool cannot run without one."""
    fqdn = cluster_config(main, identity.cluster).mesos_master_fqdn
    if not fqdn:
        raise ConfigError(f"clusters.{identity.cluster}", "mesos_master_fqdn", f"required for the pool {identity}")
    return master_url(fqdn)


def safe_to_evict_keys(main: MainConfig, identity: PoolIdentity, pool: PoolConfig) -> tuple[str, ...]:
    """The standard annotation, the cluster's (``pod_safe_to_evict_annotation``) and the pool's own
    key (``safe_to_evict_key``), each once: a pod with any of them false pins its node."""
    cluster = main.clusters.get(identity.cluster, ClusterConfig())
    return tuple(
        dict.fromkeys((SAFE_TO_EVICT_ANNOTATION, cluster.pod_safe_to_evict_annotation, pool.safe_to_evict_key))
    )

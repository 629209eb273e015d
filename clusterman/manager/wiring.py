"""Build a pool's autoscaling cycle from srv-configs: the adapters each scheduler and cloud needs.

This is the only place that turns config into connections; everything it builds connects on first
use, so building never touches the network.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from clusterman.aws.session import AwsSettings
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.discovery import Discovery
from clusterman.cloud.discovery import discover_groups
from clusterman.cloud.simulated import SimulatedCloud
from clusterman.cloud.view import GroupsCloudView
from clusterman.cluster.factory import connector_for_pool
from clusterman.cluster.lifecycle_factory import lifecycle_for_pool
from clusterman.cluster.model import PoolSnapshot
from clusterman.events.recorder import Recorder
from clusterman.manager.cycle import Cycle
from clusterman.manager.demand import DemandSource
from clusterman.manager.demand import InternalDemand
from clusterman.manager.demand import SignalDemand
from clusterman.manager.setup import PoolSetup
from clusterman.metrics.collector import collect
from clusterman.metrics.factory import open_store
from clusterman.metrics.store import MetricsStore
from clusterman.metrics.store import RetentionPass
from clusterman.signals.client import SignalClient
from clusterman.signals.client import allowed_uids_from_env
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.specs import SignalSpec
from clusterman.signals.specs import app_signal_specs
from clusterman.signals.specs import default_signal_spec
from clusterman.state.carried import StoredState
from clusterman.state.factory import open_state_store
from clusterman.state.pause import PauseStatus
from clusterman.state.pause import pause_status


def aws_clients(setup: PoolSetup) -> AwsClients:
    cluster = setup.main.clusters.get(setup.identity.cluster)
    region = cluster.aws_region if cluster is not None else None
    return AwsClients(AwsSettings.from_config(setup.main.aws, region))


def discovery_for(setup: PoolSetup, simulated: SimulatedCloud | None = None) -> Callable[[], Discovery]:
    """Finds the pool's resource groups when called (as every run does)."""
    uses_aws = any(entry.kind in ("asg", "sfr") for entry in setup.pool.resource_groups)
    aws = aws_clients(setup) if uses_aws else None

    def discover() -> Discovery:
        return discover_groups(
            setup.identity.cluster, setup.identity.pool, setup.pool.resource_groups, aws=aws, simulated=simulated
        )

    return discover


def cloud_for(setup: PoolSetup, simulated: SimulatedCloud | None = None) -> GroupsCloudView:
    return GroupsCloudView(discover=discovery_for(setup, simulated))


def demand_for(setup: PoolSetup, store: MetricsStore | None = None) -> DemandSource:
    if setup.internal:
        return InternalDemand()
    uids = allowed_uids_from_env()

    def client(spec: SignalSpec) -> SignalClient:
        return SignalClient(
            spec.address, setup.identity.cluster, setup.identity.pool, spec.config.parameters, allowed_uids=uids
        )

    evaluator = SignalEvaluator(
        setup.identity, default_signal_spec(setup.main), app_signal_specs(setup.pool, setup.identity), client
    )
    return SignalDemand(evaluator, store or open_store(setup.main, setup.pool, setup.identity))


def build_cycle(
    setup: PoolSetup,
    recorder: Recorder,
    *,
    dry_run: bool = False,
    simulated: SimulatedCloud | None = None,
    demand: DemandSource | None = None,
    collect_metrics: bool = False,
) -> Cycle:
    """``collect_metrics``: also write the pool's system metrics each run (for pools with no
    separate collector, such as a simulated scheduler, which lives only in this process)."""
    cloud = cloud_for(setup, simulated)
    connector = connector_for_pool(setup.main, setup.identity, setup.pool, cloud=cloud)
    lifecycle = lifecycle_for_pool(setup.main, setup.identity, setup.pool, connector=connector, dry_run=dry_run)
    state_store = open_state_store(setup.main)

    def paused(now: float) -> PauseStatus:
        return pause_status(state_store, setup.identity, now)

    store = open_store(setup.main, setup.pool, setup.identity) if collect_metrics else None
    retention = RetentionPass(store) if store is not None else None

    def write_metrics(snapshot: PoolSnapshot) -> None:
        assert store is not None and retention is not None
        store.write(collect(snapshot, setup.identity))
        retention(time.time())  # beside the write, on the wall clock: a write never deletes

    return Cycle(
        connector=connector,
        cloud=cloud,
        lifecycle=lifecycle,
        demand=demand or demand_for(setup, store),
        policy=setup.policy,
        recorder=recorder,
        pause_status=paused,
        dry_run=dry_run,
        write_metrics=write_metrics if collect_metrics else None,
        keeper=StoredState(state_store, setup.identity),
    )

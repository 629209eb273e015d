"""Build a pool's autoscaling cycle from srv-configs: the adapters each scheduler and cloud needs.

This is the only place that turns config into connections; everything it builds connects on first
use, so building never touches the network.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clusterman.aws.session import AwsSettings
from clusterman.cloud.clients import AwsClients
from clusterman.cloud.discovery import Discovery
from clusterman.cloud.discovery import discover_groups
from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.kinds import clouds_needed
from clusterman.cloud.simulated_group import SimulatedCloud
from clusterman.cluster.node_migrations import NodeMigrations
from clusterman.core.config import Scheduler
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import NoticeSource
from clusterman.core.notices import combined
from clusterman.datastore.pool_metrics import collect
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import RetentionPass
from clusterman.decision.decide import decide
from clusterman.events.recorder import Recorder
from clusterman.notices.inbox import Inbox
from clusterman.notices.inbox import InboxSource
from clusterman.run.budget import metrics_timeout
from clusterman.run.budget import scheduler_timeout
from clusterman.run.budget import signal_seconds
from clusterman.run.cycle import Cycle
from clusterman.run.cycle import Decider
from clusterman.run.demand_source import DemandSource
from clusterman.run.demand_source import InternalDemand
from clusterman.run.demand_source import SignalDemand
from clusterman.run.migration_source import MigrationSource
from clusterman.signals.client import SignalClient
from clusterman.signals.client import allowed_uids_from_env
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.specs import SignalSpec
from clusterman.signals.specs import app_signal_specs
from clusterman.signals.specs import default_signal_spec
from clusterman.state.carried import StoredState
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.node_migration import StoredMigration
from clusterman.state.pause import PauseStatus
from clusterman.state.pause import pause_status
from clusterman.state.store import StateStore
from clusterman.wiring.connectors import kubeconfig_path
from clusterman.wiring.metrics_store import open_store
from clusterman.wiring.schedulers import connector_for_pool
from clusterman.wiring.schedulers import lifecycle_for_pool
from clusterman.wiring.setup import PoolSetup
from clusterman.wiring.state_store import open_state_store


def aws_clients(setup: PoolSetup, budget_seconds: float | None = None) -> AwsClients:
    """``budget_seconds`` bounds each attempt of each call (never above botocore's own 60 s)."""
    cluster = setup.main.clusters.get(setup.identity.cluster)
    region = cluster.aws_region if cluster is not None else None
    timeout = None if budget_seconds is None else min(60.0, budget_seconds)
    return AwsClients(AwsSettings.from_config(setup.main.aws, region), timeout_seconds=timeout)


def clouds_for(
    setup: PoolSetup, simulated: SimulatedCloud | None = None, budget_seconds: float | None = None
) -> Clouds:
    """The clouds the pool's ``resource_groups`` live in, each connected to only when a kind needs it."""
    needed = clouds_needed(setup.pool.resource_groups)
    return Clouds(aws=aws_clients(setup, budget_seconds) if "aws" in needed else None, simulated=simulated)


def discovery_for(
    setup: PoolSetup, simulated: SimulatedCloud | None = None, budget_seconds: float | None = None
) -> Callable[[], Discovery]:
    """Finds the pool's resource groups when called (as every run does)."""
    clouds = clouds_for(setup, simulated, budget_seconds)
    migration = setup.pool.node_migration
    launches = migration.enabled and migration.trigger.drift  # what the groups launch now: drift's other side

    def discover() -> Discovery:
        return discover_groups(
            setup.identity.cluster, setup.identity.pool, setup.pool.resource_groups, clouds, launches=launches
        )

    return discover


def cloud_for(
    setup: PoolSetup, simulated: SimulatedCloud | None = None, budget_seconds: float | None = None
) -> GroupsCloudView:
    return GroupsCloudView(discover=discovery_for(setup, simulated, budget_seconds))


def demand_for(
    setup: PoolSetup, store: MetricsStore | None = None, budget_seconds: float | None = None
) -> DemandSource:
    """``budget_seconds``: the run's, shared out as ``run/budget.py`` says."""
    if setup.internal:
        return InternalDemand()
    uids = allowed_uids_from_env()
    waits: dict[str, Any] = (
        {} if budget_seconds is None else {"read_timeout": budget_seconds, "connect_timeout": min(10.0, budget_seconds)}
    )

    def client(spec: SignalSpec) -> SignalClient:
        return SignalClient(
            spec.address,
            setup.identity.cluster,
            setup.identity.pool,
            spec.config.parameters,
            allowed_uids=uids,
            **waits,
        )

    evaluator = SignalEvaluator(
        setup.identity,
        default_signal_spec(setup.main),
        app_signal_specs(setup.pool, setup.identity),
        client,
        signal_seconds=signal_seconds(budget_seconds),
    )
    return SignalDemand(
        evaluator,
        store or open_store(setup.main, setup.pool, setup.identity, metrics_timeout(budget_seconds)),
        setup.policy,
    )


def migration_for(
    setup: PoolSetup, state_store: StateStore, recorder: Recorder, *, dry_run: bool = False, timeout: float = 30.0
) -> MigrationSource | None:
    """The pool's node migration as a source of notices, when its file has a ``node_migration``
    block; NodeMigration resources are read for Kubernetes pools with ``trigger.event``."""
    settings = setup.pool.node_migration
    if not settings.enabled:
        return None
    resources = None
    if settings.trigger.event and setup.identity.scheduler is Scheduler.KUBERNETES:
        resources = NodeMigrations(kubeconfig_path(setup.main, setup.identity), timeout_seconds=timeout)
    return MigrationSource(
        setup.identity,
        settings,
        StoredMigration(state_store, setup.identity),
        recorder,
        resources=resources,
        pool_selector=f"{setup.pool.node_label_key}={setup.identity.pool}",
        budget_share=float(setup.policy.consolidation.max_disrupted_share),
        attempts_margin=setup.main.batches.node_migration.failed_attemps_margin,
        dry_run=dry_run,
    )


def build_cycle(
    setup: PoolSetup,
    recorder: Recorder,
    *,
    dry_run: bool = False,
    simulated: SimulatedCloud | None = None,
    demand: DemandSource | None = None,
    collect_metrics: bool = False,
    holder: Holder | None = None,
    lease_seconds: float = 0.0,
    budget_seconds: float | None = None,
    decider: Decider = decide,
    one_run: bool = False,
) -> Cycle:
    """``collect_metrics``: also write the pool's system metrics each run (for pools with no
    separate collector, such as a simulated scheduler, which lives only in this process).
    ``holder``: act only while holding the pool's lease for ``lease_seconds`` (a dry run, which
    changes nothing, takes no lease and never stands in the way of the real autoscaler).
    ``budget_seconds``: never act on a snapshot older than that; every wait of a run has its share
    of it (``run/budget.py``). ``one_run``: for a command that runs it once (``clusterman plan``):
    the pool is read once, not watched, and no notice is read (reading the inbox takes them)."""
    cloud = cloud_for(setup, simulated, budget_seconds)
    timeout = scheduler_timeout(budget_seconds)
    connector = connector_for_pool(
        setup.main, setup.identity, setup.pool, cloud=cloud, timeout_seconds=timeout, watch=not one_run
    )
    lifecycle = lifecycle_for_pool(
        setup.main, setup.identity, setup.pool, connector=connector, dry_run=dry_run, timeout_seconds=timeout
    )
    state_store = open_state_store(setup.main, budget_seconds)

    def paused(now: float) -> PauseStatus:
        return pause_status(state_store, setup.identity, now)

    store = (
        open_store(setup.main, setup.pool, setup.identity, metrics_timeout(budget_seconds)) if collect_metrics else None
    )
    retention = RetentionPass(store) if store is not None else None

    def write_metrics(snapshot: PoolSnapshot) -> None:
        assert store is not None and retention is not None
        store.write(collect(snapshot, setup.identity))
        retention(time.time())  # beside the write, on the wall clock: a write never deletes

    return Cycle(
        connector=connector,
        cloud=cloud,
        lifecycle=lifecycle,
        demand=demand or demand_for(setup, store, budget_seconds),
        policy=setup.policy,
        recorder=recorder,
        pause_status=paused,
        dry_run=dry_run,
        write_metrics=write_metrics if collect_metrics else None,
        keeper=StoredState(state_store, setup.identity),
        lease=PoolLease(state_store, setup.identity, holder, lease_seconds) if holder and not dry_run else None,
        budget_seconds=budget_seconds,
        notices=None
        if one_run
        else notices_for(
            setup, state_store, migration_for(setup, state_store, recorder, dry_run=dry_run, timeout=timeout)
        ),
        decider=decider,
    )


def notices_for(setup: PoolSetup, state_store: StateStore, migration: NoticeSource | None) -> NoticeSource | None:
    """Where the pool's run learns which nodes must go: its inbox, when its cluster has a queue the
    drainer reads (it files the cloud's notices and the hosts put on Clusterman's queues there), and
    its node migration; None when neither."""
    inbox = InboxSource(Inbox(state_store, setup.identity)) if setup.main.runs_drainer(setup.identity.cluster) else None
    return combined(inbox, migration)

"""One simulation: the real autoscaling cycle over simulated adapters, one minute at a time.

Wiring (the same pieces as the autoscaler batch, each simulated):
  resource groups  ``cloud.simulated_group.groups_from_config`` on the simulation's clock, read through
                   ``cloud.view.GroupsCloudView`` (any resource_groups kind stands for a group)
  scheduler        ``manager.connectors.simulated_connector``: the demand trace from the metrics files
                   (``workload``) beside the pool's ``simulation.tasks``; nodes join after the join
                   delay; ``SimulatedLifecycle`` taints and drains (``WithoutDraining`` unless
                   ``draining_enabled``)
  demand           the pool's signals over ``SignalDemand`` (``signals.py``), or ``InternalDemand``
                   for ``internal: true`` pools
  metrics          an in-memory store holding the files' series, where each minute the pool's own
                   system metrics (``metrics.collector.collect``) replace the real pool's
  the run          ``manager.cycle.Cycle`` every period, with the pool's ``ScalingPolicy``; its
                   recorder keeps no events and no metrics (``quiet_recorder.py``)
Each minute: move the clock, snapshot, write the pool's metrics, run the cycle when due, then charge
the minute (``costs.Ledger``). Every random choice comes from generators seeded by the run's seed,
so the same inputs and seed give the same run.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import groups_from_config
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import DemandTrace
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.core.accounting import account_snapshot
from clusterman.core.accounting import pending_demand
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import combined
from clusterman.core.resources import Resources
from clusterman.datastore.datafile import MetricsData
from clusterman.datastore.pool_metrics import collect
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import split_key
from clusterman.decision.decide import decide
from clusterman.decision.result import Action
from clusterman.run.cycle import Cycle
from clusterman.run.cycle import Decider
from clusterman.run.demand_source import DemandSource
from clusterman.run.demand_source import InternalDemand
from clusterman.run.migration_source import KeptInMemory
from clusterman.run.migration_source import MigrationSource
from clusterman.run.report import Outcome
from clusterman.run.report import RunReport
from clusterman.simulator.clock import SimClock
from clusterman.simulator.clock import Steps
from clusterman.simulator.costs import Ledger
from clusterman.simulator.costs import Timeline
from clusterman.simulator.costs import Totals
from clusterman.simulator.costs import oracle_cost
from clusterman.simulator.interruptions import InterruptionCounts
from clusterman.simulator.interruptions import Interruptions
from clusterman.simulator.prices import PriceBook
from clusterman.simulator.prices import spot_series
from clusterman.simulator.quiet_recorder import QuietRecorder
from clusterman.simulator.signals import RunnerProcesses
from clusterman.simulator.signals import SignalMode
from clusterman.simulator.signals import collected_names
from clusterman.simulator.signals import signal_demand
from clusterman.wiring.connectors import simulated_connector
from clusterman.wiring.setup import PoolSetup


@dataclass(frozen=True)
class Scenario:
    """One run's inputs, checked (``inputs.py``): the pool with the run's seed and join delay."""

    setup: PoolSetup
    source: str  # the pool file, for messages
    metrics: MetricsData
    demand: list[tuple[float, Resources]]  # the pool's demand from the files (``workload.demand_points``)
    steps: Steps
    demand_task: Resources
    signals: SignalMode = SignalMode.IN_PROCESS
    notes: tuple[str, ...] = ()  # what the command says about its inputs beside the summary


@dataclass
class History:
    """What the autoscaler did, run by run, counted (a run's full report is not kept)."""

    runs: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    scale_ups: int = 0
    scale_downs: int = 0
    tainted: int = 0
    untainted: int = 0
    terminated: int = 0
    errors: int = 0
    evictions: int = 0  # pods evicted by drains: each restarts elsewhere (or waits pending)
    consolidated: int = 0  # nodes consolidation drained, to remove or to keep

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.outcomes[report.outcome.value] += 1
        d, applied = report.decision, report.applied
        if report.outcome is not Outcome.ACTED or d is None or applied is None:
            return
        self.reasons[d.reason.value] += 1
        if d.target_capacity != d.current_target:
            if d.action is Action.SCALE_UP:
                self.scale_ups += 1
            else:
                self.scale_downs += 1
        self.tainted += sum(1 for r in applied.tainted.values() if r.ok)
        self.untainted += sum(1 for r in applied.untainted.values() if r.ok)
        self.terminated += len(applied.terminated)
        self.errors += len(applied.errors)
        self.evictions += sum(d.evicted for d in applied.drains.values())
        self.consolidated += len(d.consolidation.chosen)

    @property
    def scaling_actions(self) -> int:
        """Runs that changed the pool's target capacity."""
        return self.scale_ups + self.scale_downs


@dataclass(frozen=True)
class SimulationResult:
    scenario: Scenario
    totals: Totals
    oracle_cost: float
    timeline: Timeline
    history: History
    spot_priced: list[tuple[str, str]]  # markets priced by the file's spot series
    interruptions: InterruptionCounts | None = None  # Spot interruptions, when the pool has a rate


@dataclass
class Wiring:
    """The pieces of one run, as ``wire`` connects them."""

    groups: list[SimulatedGroup]
    cloud: GroupsCloudView
    connector: SimulatedConnector
    cycle: Cycle
    store: InMemoryStore
    collected: frozenset[str] | None  # the pool metrics written each minute (None: all; none for internal pools)
    runners: RunnerProcesses | None
    interruptions: Interruptions | None = None  # the cloud's Spot interruptions, when the pool has a rate

    def close(self) -> None:
        self.cycle.close()
        if self.runners is not None:
            self.runners.close()


def wire(scenario: Scenario, clock: SimClock, decider: Decider = decide) -> Wiring:
    setup = scenario.setup
    identity, pool = setup.identity, setup.pool
    groups = groups_from_config(identity, pool, clock, scenario.source, every_kind=True)
    cloud = GroupsCloudView(groups)
    trace = demand_trace(scenario) if scenario.demand else None
    connector = simulated_connector(identity, pool, cloud, workload=trace)
    lifecycle: NodeLifecycle = SimulatedLifecycle(connector.scheduler)
    if not pool.draining_enabled:
        lifecycle = WithoutDraining(lifecycle)
    store = metrics_store(scenario.metrics, identity)
    demand: DemandSource
    runners: RunnerProcesses | None = None
    collected: frozenset[str] | None = frozenset()
    if setup.internal:
        demand = InternalDemand()
    else:
        demand, runners = signal_demand(setup, store, scenario.signals)
        collected = collected_names(setup)
    recorder = QuietRecorder(identity.cluster, identity.pool)
    migration = None
    if pool.node_migration.enabled:  # max_uptime and drift: a simulation has no NodeMigration resources
        budget = float(setup.policy.consolidation.max_disrupted_share)
        migration = MigrationSource(identity, pool.node_migration, KeptInMemory(), recorder, budget_share=budget)
    interruptions = interruptions_for(scenario, groups, connector)
    notices = combined(interruptions, migration)
    cycle = Cycle(
        connector=connector,
        cloud=cloud,
        lifecycle=lifecycle,
        demand=demand,
        policy=setup.policy,
        recorder=recorder,
        record=False,
        decider=decider,
        notices=notices,
    )
    return Wiring(groups, cloud, connector, cycle, store, collected, runners, interruptions)


def interruptions_for(
    scenario: Scenario, groups: list[SimulatedGroup], connector: SimulatedConnector
) -> Interruptions | None:
    """The pool's Spot interruptions (``simulation.interruptions_per_node_hour``, or a market's own
    rate), or None when it has none."""
    sim = scenario.setup.pool.simulation
    rates = {
        (m.instance_type, m.availability_zone): m.interruptions_per_node_hour
        for m in sim.markets
        if m.interruptions_per_node_hour is not None
    }
    made = Interruptions(
        groups, connector.scheduler, rates, sim.interruptions_per_node_hour, scenario.steps.step_seconds, sim.seed,
        sim.interruption_handling, sim.lost_pods_return_seconds,
    )  # fmt: skip
    return made if made.active else None


def demand_trace(scenario: Scenario) -> DemandTrace:
    """The files' demand as tasks, of the pool's ``demand_task`` or ``demand_mix``, leaving as
    ``departures`` says (``cluster/simulated_scheduler.py``)."""
    sim = scenario.setup.pool.simulation
    return DemandTrace(
        scenario.demand,
        scenario.demand_task,
        mix=[(p.weight, Resources(p.cpus, p.mem, p.disk, p.gpus)) for p in sim.demand_mix],
        departures=sim.departures,
        lifetime_seconds=None if sim.task_lifetime_minutes is None else sim.task_lifetime_minutes * 60,
        seed=sim.seed,
    )


def simulate(
    scenario: Scenario,
    progress: Callable[[int, int], None] | None = None,
    on_run: Callable[[RunReport], None] | None = None,
    decider: Decider = decide,
) -> SimulationResult:
    """Run every minute of ``scenario``; ``on_run`` sees each autoscaler run's full report;
    ``decider``: the decision each run makes (another autoscaler's rules, for the scoreboard)."""
    steps, identity = scenario.steps, scenario.setup.identity
    clock = SimClock(steps.start)
    w = wire(scenario, clock, decider)
    prices = PriceBook(spot_series(scenario.metrics))
    ledger = Ledger({g.id: g.markets for g in w.groups}, prices, steps.step_seconds)
    history = History()
    period = max(int(scenario.setup.period_seconds), steps.step_seconds)
    pending = Pending()
    ledger.begin(w.cloud.cloud_view(steps.start))
    new_templates = sorted(steps.start + 60 * m for m in scenario.setup.pool.simulation.new_template_at_minutes)
    try:
        for k, now in enumerate(steps):
            clock.now = now
            while new_templates and now >= new_templates[0]:  # a new launch template: the nodes before it drift
                new_templates.pop(0)
                for group in w.groups:
                    group.new_template_version()
            if w.interruptions is not None:  # the cloud first: an instance it takes is gone from this minute
                w.interruptions.step(now, w.cloud.cloud_view(now))
            snapshot = w.connector.snapshot(now)
            accounting = account_snapshot(snapshot)
            if w.collected != frozenset():
                w.store.write(collect(snapshot, identity, accounting, w.collected))
            warned = w.interruptions is not None and w.interruptions.waiting()
            if (now - steps.start) % period == 0 or warned:  # a warning wakes the autoscaler at once
                report = w.cycle.run_once(now)
                history.add(report)
                if on_run is not None:
                    on_run(report)
            ledger.record(
                now, w.cloud.cloud_view(now), accounting.capacity.cpus, accounting.allocated, pending(snapshot)
            )
            if progress is not None:
                progress(k + 1, len(steps))
    finally:
        w.close()
    markets = [m for g in w.groups for m in g.markets]
    join_delay = scenario.setup.pool.simulation.join_delay_seconds
    oracle = oracle_cost(ledger.series["time"], ledger.demand, markets, prices, join_delay, steps.step_seconds)
    counts = w.interruptions.counts if w.interruptions is not None else None
    return SimulationResult(
        scenario, ledger.totals(), oracle, ledger.series, history, prices.priced_by_series(markets), counts
    )


class Pending:
    """The snapshot's pending demand, summed again only when the pending tasks changed."""

    def __init__(self) -> None:
        self._tasks: object = None
        self._sum = Resources()

    def __call__(self, snapshot: PoolSnapshot) -> Resources:
        if snapshot.pending is not self._tasks:
            self._tasks = snapshot.pending
            self._sum = pending_demand(snapshot)
        return self._sum


def metrics_store(data: MetricsData, identity: PoolIdentity) -> InMemoryStore:
    """The files' series for the signals, except the real pool's own system metrics and metadata:
    those are the simulated pool's now, written each minute as the collector would."""
    store = InMemoryStore()
    own = {"cluster": identity.cluster, "pool": identity.pool_with_scheduler}
    for metric_type, by_key in data.items():
        for key, series in by_key.items():
            if metric_type is not MetricType.APP_METRICS and split_key(key)[1] == own:
                continue
            store.load(metric_type, key, series)
    return store

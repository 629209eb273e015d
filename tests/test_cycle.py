"""One autoscaling run after another, on a simulated pool: the real decision, apply, and recording."""

from __future__ import annotations

import pytest

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.cluster.simulated_scheduler import TaskList
from clusterman.cluster.simulated_scheduler import WorkItem
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.model import NodeState
from clusterman.core.resources import Resources
from clusterman.datastore.store import MetricsError
from clusterman.decision.exact import exact
from clusterman.decision.policy import ScalingPolicy
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.publisher import EventPublisher
from clusterman.events.recorder import Recorder
from clusterman.events.ring import EventRing
from clusterman.run.cycle import Cycle
from clusterman.run.demand_source import InternalDemand
from clusterman.run.report import Outcome
from clusterman.state.carried import AUTOSCALER_STATE
from clusterman.state.carried import StoredState
from clusterman.state.pause import PauseStatus
from clusterman.state.pause import entity
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateError
from clusterman.state.store import StateItem

T0 = 1_700_000_000.0
NODE = Resources(cpus=4, mem=16000)


class Pool:
    """A simulated pool with the real cycle on top; ``minute()`` advances the clock and runs once."""

    def __init__(
        self,
        tasks: list[WorkItem],
        *,
        groups: int = 1,
        policy: ScalingPolicy | None = None,
        join_delay: float = 0,
        **kw,
    ) -> None:
        self.now = T0
        self.groups = [
            SimulatedGroup(f"g{i + 1}", [SimulatedMarket("m5.xlarge", "us-west-2a", 1, NODE)], lambda: self.now,
                           target_capacity=1, max_capacity=50)
            for i in range(groups)
        ]  # fmt: skip
        self.scheduler = SimulatedScheduler(TaskList(tasks), join_delay_seconds=join_delay)
        self.cloud = GroupsCloudView(self.groups)
        self.ring = EventRing(1000)
        self.publisher = EventPublisher(self.ring)
        self.publisher.start()
        self.recorder = Recorder(self.publisher, AutoscalerMetrics("c", "p"), "p", lambda: int(self.now * 1e9))
        self.cycle = Cycle(
            connector=SimulatedConnector(self.cloud, self.scheduler),
            cloud=self.cloud,
            lifecycle=SimulatedLifecycle(self.scheduler),
            demand=kw.pop("demand", InternalDemand()),
            policy=policy or limits(),
            recorder=self.recorder,
            **kw,
        )

    def minute(self):
        self.now += 60
        return self.cycle.run_once(self.now)

    def ready(self):
        return sum(1 for n in self.scheduler.nodes() if n.state is NodeState.READY)

    def events(self):
        self.publisher.flush()
        return list(self.ring.read(0, 1000).records)

    def close(self):
        self.publisher.stop()


def limits(**kw) -> ScalingPolicy:
    values = {"min_capacity": 1, "max_capacity": 20, "max_weight_to_add": 10, "max_weight_to_remove": 10,
              "target_capacity_margin": 0.05}  # fmt: skip
    values.update(kw)
    return ScalingPolicy(**{k: exact(v) for k, v in values.items()})


def work(count, cpus=1.0, end=float("inf")):
    return [WorkItem(f"t{i}", Resources(cpus=cpus, mem=100), start=T0, end=end) for i in range(count)]


@pytest.fixture
def pools():
    made = []

    def make(*args, **kw):
        made.append(Pool(*args, **kw))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_capacity_follows_demand_up_and_down(pools):
    pool = pools(work(10, end=T0 + 600))
    first = pool.minute()
    assert first.outcome is Outcome.ACTED and first.decision is not None
    # 10 cpus asked on one 4-cpu node: 250% -> ceil(1 x 2.5 / 0.7) = 4 nodes
    assert first.decision.target_capacity == 4
    for _ in range(3):
        pool.minute()
    assert pool.ready() == 4 and not pool.scheduler.pending()
    for _ in range(15):  # the tasks end at +600 s; the pool shrinks back to its minimum
        pool.minute()
    assert pool.groups[0].read().group.target_capacity == 1
    assert pool.ready() == 1
    details = {e.event.detail.name for e in pool.events()}
    assert {"DECISION_UTILISATION", "GROUP_TARGET", "NODE_TAINT", "NODE_TERMINATE"} <= details


def test_a_run_that_records_nothing_decides_and_acts_the_same(pools):
    """``record=False`` (the simulator's) skips building the run's events, not its decisions."""
    loud, quiet = pools(work(10, end=T0 + 600)), pools(work(10, end=T0 + 600), record=False)
    for _ in range(20):
        a, b = loud.minute(), quiet.minute()
        assert a.decision == b.decision and a.applied == b.applied
    assert quiet.groups[0].read().group.target_capacity == loud.groups[0].read().group.target_capacity == 1
    recorded = {e.event.detail.name.split("_")[0] for e in quiet.events()}
    assert {"DECISION", "NODE", "GROUP"} <= {e.event.detail.name.split("_")[0] for e in loud.events()}
    assert not recorded & {"DECISION", "NODE", "GROUP", "SIGNAL"}


def test_the_line_and_the_event_of_a_run_agree_while_capacity_joins(pools):
    """10 cpus on one 4-cpu node: target 1 -> 4; nodes take 5 minutes to join, and the work ends
    meanwhile: the target goes down while the ready capacity is still 1. The action, the arrow,
    the event's change and its amount all count from the target."""
    pool = pools(work(10, end=T0 + 90), join_delay=300)
    reports = [pool.minute() for _ in range(3)]
    events = [e.event for e in pool.events() if e.event.type.name == "DECISION"]
    lowered = [r for r in reports if r.decision and r.decision.action.value == "scale_down"]
    assert lowered and lowered[0].decision.current_capacity < lowered[0].decision.target_capacity
    for report, event in zip(reports, events, strict=True):
        d = report.decision
        assert d is not None
        line = report.line()
        assert f"target {d.current_target} -> {d.target_capacity}" in line
        change = {"scale_up": "ADD", "scale_down": "REMOVE", "none": "NONE"}[d.action.value]
        assert event.change.name == change, line
        assert dict(event.resource).get("capacity", 0) == abs(d.target_capacity - d.current_target), line
        arrow = line.rpartition(" → ")[2].split()[0].rstrip(";")
        assert arrow == (f"{int(d.delta):+d}" if d.delta else "±0"), line


def test_a_paused_pool_is_left_alone(pools):
    paused = PauseStatus(True, reason="maintenance")
    pool = pools(work(10), pause_status=lambda now: paused)
    report = pool.minute()
    assert report.outcome is Outcome.PAUSED
    assert pool.groups[0].read().group.target_capacity == 1
    assert "POOL_PAUSE" in {e.event.detail.name for e in pool.events()}


def test_dry_run_changes_nothing_and_keeps_its_state(pools):
    pool = pools(work(10), dry_run=True, policy=limits(scale_up_cool_down_period_seconds=600))
    report = pool.minute()
    assert report.decision is not None and report.decision.target_capacity == 4
    assert report.applied is not None and report.applied.dry_run
    assert pool.groups[0].read().group.target_capacity == 1
    assert pool.cycle.state == type(pool.cycle.state)()  # no scale lock taken for a change not made


class Unavailable:
    def requests(self, snapshot, now):
        raise MetricsError("metrics store unreachable: connection refused")

    def close(self):
        pass


def test_missing_metrics_keep_the_target(pools):
    pool = pools(work(0), demand=Unavailable())
    pool.groups[0].set_target_capacity(5)
    pool.minute()
    report = pool.minute()
    assert report.outcome is Outcome.NO_DEMAND and "connection refused" in report.message
    assert pool.groups[0].read().group.target_capacity == 5
    assert "DECISION_NO_DEMAND" in {e.event.detail.name for e in pool.events()}


def test_an_unreadable_group_holds_scale_down_and_the_other_group_still_grows(pools):
    pool = pools(work(2), groups=2)
    for g in pool.groups:
        g.set_target_capacity(6)
    pool.groups[1].break_with("AccessDenied")
    report = pool.minute()
    assert report.decision is not None and not report.decision.terminate and not report.decision.taint
    assert "could not be read" in report.decision.explanation
    assert pool.groups[0].read().group.target_capacity == 6  # nothing shrinks while g2 is unknown

    pool.groups[1].break_with("")
    pool2 = pools(work(30), groups=2)
    pool2.minute()
    pool2.groups[1].break_with("AccessDenied")
    grown = pool2.minute()
    assert grown.decision is not None and grown.decision.target_capacity > 2
    assert pool2.groups[0].read().group.target_capacity > 1  # the readable group still scales up
    assert "ERROR_CLOUD" in {e.event.detail.name for e in pool2.events()}


def _restarted_with_g1_unread(pools, store, demand):
    """A process that reads both groups (g1 at 5, g2 at 1) and stops; a new one on the same store,
    g1 then unreadable, under ``demand``."""
    first = pools(work(2), groups=2, keeper=StoredState(store, POOL_ID))
    first.groups[0].set_target_capacity(5)
    first.minute()
    again = pools(demand, groups=2, policy=limits(max_weight_to_add=30), keeper=StoredState(store, POOL_ID))
    again.groups[0].set_target_capacity(5)
    again.groups[0].break_with("AccessDenied")
    return again, again.minute()


def test_a_restart_counts_a_group_it_cannot_read_at_its_kept_target(pools, tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    assert StoredState(store, POOL_ID).load_targets() == {}
    pool, report = _restarted_with_g1_unread(pools, store, work(60))
    assert StoredState(store, POOL_ID).load_targets()["g1"] == 5
    # the readable group grows, within what max_capacity 20 leaves beside g1's 5
    assert report.decision is not None and "max_capacity 20 less 5 in groups not read" in report.line()
    assert pool.groups[1].read().group.target_capacity == 15


def test_targets_that_cannot_be_kept_change_nothing_and_are_kept_by_a_later_run(pools, tmp_path, caplog):
    store = SqliteStateStore(tmp_path / "state.sqlite")

    class FullForTargets:  # a store that refuses the targets' write (a full disk, a throttled table)
        refuse = True

        def get(self, *args):
            return store.get(*args)

        def put(self, item):
            if self.refuse and item.state == "group_targets":
                raise StateError("database or disk is full")
            store.put(item)

    full = FullForTargets()
    pool = pools(work(10), keeper=StoredState(full, POOL_ID))
    report = pool.minute()
    assert report.outcome is Outcome.ACTED and pool.groups[0].read().group.target_capacity == 4
    assert report.unworkable == ""  # a full disk is no fault of the configuration
    assert "cannot keep the groups' targets" in caplog.text and "database or disk is full" in caplog.text
    assert StoredState(store, POOL_ID).load_targets() == {}
    full.refuse = False
    pool.minute()
    assert StoredState(store, POOL_ID).load_targets() == {"g1": 4.0}


@pytest.mark.parametrize("kept", ["none", "corrupt"])
def test_a_restart_without_kept_targets_does_not_grow_beside_a_group_it_cannot_read(pools, tmp_path, kept):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    if kept == "corrupt":
        store.put(StateItem("group_targets", entity(POOL_ID), 0, payload={"targets": {"g1": "five"}}))
    pool = pools(work(60), groups=2, policy=limits(max_weight_to_add=30), keeper=StoredState(store, POOL_ID))
    pool.groups[0].set_target_capacity(5)
    pool.groups[0].break_with("AccessDenied")
    held = pool.minute()
    assert held.decision is not None and "of unknown capacity: no growth" in held.line()
    assert pool.groups[1].read().group.target_capacity == 1
    errors = [e.event.message for e in pool.events() if e.event.detail.name == "ERROR_INTERNAL"]
    assert (errors and "expected {group id: capacity}: not used" in errors[0]) if kept == "corrupt" else not errors


def test_an_unreachable_metrics_store_keeps_the_target_with_the_real_signal_path(pools, tmp_path):
    """The real SignalDemand over a SQLite store that cannot be opened: MetricsError, target kept."""
    from clusterman.core.config import MetricType
    from clusterman.core.config import PoolIdentity
    from clusterman.core.config import RequiredMetric
    from clusterman.core.config import Scheduler
    from clusterman.core.config import SignalConfig
    from clusterman.datastore.sqlite import SqliteStore
    from clusterman.run.demand_source import SignalDemand
    from clusterman.signals.evaluator import SignalEvaluator
    from clusterman.signals.specs import SignalSpec

    class NeverCalled:
        def evaluate(self, metrics, timestamp, timeout=None):
            raise AssertionError("the signal must not be asked without its metrics")

        def close(self):
            pass

    required = (RequiredMetric("cpus_allocated", MetricType.SYSTEM_METRICS, 10),)
    config = SignalConfig(1, "MostRecentResources", "v1", required_metrics=required)
    evaluator = SignalEvaluator(
        PoolIdentity("c", "p", Scheduler.SIMULATED), SignalSpec("__default__", "clusterman", config), [],
        lambda spec: NeverCalled(),
    )  # fmt: skip
    (tmp_path / "metrics.sqlite3").mkdir()  # a directory where the database file should be
    pool = pools(work(0), demand=SignalDemand(evaluator, SqliteStore(tmp_path / "metrics.sqlite3")))
    pool.groups[0].set_target_capacity(5)
    report = pool.minute()
    assert report.outcome is Outcome.NO_DEMAND and "metrics.sqlite3" in report.message
    assert pool.groups[0].read().group.target_capacity == 5


POOL_ID = PoolIdentity("c", "p", Scheduler.SIMULATED)


def test_a_restart_keeps_the_scale_lock(pools, tmp_path):
    kept = StoredState(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID)
    locked = limits(scale_up_cool_down_period_seconds=600)
    first = pools(work(10), policy=locked, keeper=kept)
    report = first.minute()
    assert report.decision is not None and report.decision.target_capacity == 4
    assert kept.load().scale_lock.until == first.now + 600

    # a new process a minute later, the asked-for capacity not ready: the lock still holds
    again = pools(work(40), policy=locked, keeper=StoredState(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID))
    again.now = first.now
    held = again.minute()
    assert held.decision is not None and "scale lock held" in held.decision.explanation
    assert again.groups[0].read().group.target_capacity == 1  # no second scale-up


def test_a_dry_run_never_writes_the_kept_state(pools, tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    pool = pools(work(10), policy=limits(scale_up_cool_down_period_seconds=600), dry_run=True,
                 keeper=StoredState(store, POOL_ID))  # fmt: skip
    assert pool.minute().decision is not None
    assert store.get(AUTOSCALER_STATE, entity(POOL_ID)) is None


def test_a_corrupt_kept_state_is_reported_replaced_and_holds_scale_down(pools, tmp_path):
    store = SqliteStateStore(tmp_path / "state.sqlite")
    store.put(StateItem(AUTOSCALER_STATE, entity(POOL_ID), 0, payload={"scale_lock": "tomorrow"}))
    pool = pools(work(0), keeper=StoredState(store, POOL_ID))
    pool.groups[0].set_target_capacity(5)
    report = pool.minute()
    assert report.decision is not None and report.decision.target_capacity == 5  # no scale-down this run
    assert "stored autoscaler state was not valid" in report.decision.explanation
    errors = [e.event.message for e in pool.events() if e.event.detail.name == "ERROR_INTERNAL"]
    assert errors and "scale_lock: expected an object" in errors[0]
    assert StoredState(store, POOL_ID).load() == pool.cycle.state  # replaced by a valid one
    assert pool.minute().decision.target_capacity < 5  # the next run scales down


def test_an_unreadable_kept_state_changes_nothing_until_it_can_be_read(pools, tmp_path):
    (tmp_path / "state").mkdir()
    broken = StoredState(SqliteStateStore(tmp_path / "state"), POOL_ID)  # a directory, not a database
    pool = pools(work(10), keeper=broken)
    report = pool.minute()
    assert report.outcome is Outcome.NO_STATE and "cannot read the autoscaler state" in report.message
    assert f"{tmp_path / 'state'} is a directory" in report.unworkable  # no proof of a good configuration
    assert pool.groups[0].read().group.target_capacity == 1
    broken.store = SqliteStateStore(tmp_path / "state.sqlite")
    again = pool.minute()
    assert again.outcome is Outcome.ACTED and again.unworkable == ""


def test_a_run_whose_state_cannot_be_kept_before_acting_changes_nothing(pools, tmp_path):
    """What a run spends (a scale lock, the disruption budget) is kept before it acts: a kill
    mid-drain must not forget it. A state that cannot be written stops the run instead."""

    class ReadOnly(StoredState):
        def save(self, state, now):
            raise StateError("state store: database or disk is full")

    locked = limits(scale_up_cool_down_period_seconds=600)
    pool = pools(work(10), policy=locked, keeper=ReadOnly(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID))
    report = pool.minute()
    assert report.outcome is Outcome.NO_STATE and "before acting" in report.message, report.message
    assert pool.groups[0].read().group.target_capacity == 1  # no scale-up it could not remember

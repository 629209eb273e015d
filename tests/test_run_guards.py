"""The run's guards: the pool's lease, the run budget, stale signal input, what the line and the
events say when something is unknown, NODE_JOIN events, and the loop's heartbeat."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from fractions import Fraction

from clusterman.batch.autoscaler import run_forever
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import RequiredMetric
from clusterman.core.config import Scheduler
from clusterman.core.config import SignalConfig
from clusterman.core.resources import ResourceRequest
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import system_key
from clusterman.run.demand_source import INTERNAL_APP
from clusterman.run.demand_source import InternalDemand
from clusterman.run.demand_source import SignalDemand
from clusterman.run.report import Outcome
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.specs import DEFAULT_APP
from clusterman.signals.specs import SignalSpec
from clusterman.state.carried import StoredState
from clusterman.state.lease import AUTOSCALER_LEASE
from clusterman.state.lease import LEASE_REQUEST
from clusterman.state.lease import ON_NOW
from clusterman.state.lease import Holder
from clusterman.state.lease import LeaseStatus
from clusterman.state.lease import PoolLease
from clusterman.state.lease import read_lease
from clusterman.state.lease import take_on_request
from clusterman.state.pause import PauseStatus
from clusterman.state.store import SqliteStateStore
from clusterman.state.store import StateError
from clusterman.tree.liveness import Heartbeat
from tests.test_autoscaler_loop import FakeClock
from tests.test_autoscaler_loop import SleepyStop
from tests.test_cycle import T0
from tests.test_cycle import limits
from tests.test_cycle import pools  # noqa: F401 - the fixture
from tests.test_cycle import work

POOL_ID = PoolIdentity("c", "p", Scheduler.SIMULATED)
A, B = Holder("host-a", 100, T0), Holder("host-b", 200, T0 + 1)


def lease(tmp_path, holder, ttl=30.0):
    """Another's lease judged on the ``now`` claims are given (the runs' time here)."""
    return PoolLease(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID, holder, ttl, monotonic=ON_NOW)


def after_watching(lease: PoolLease, now: float) -> LeaseStatus:
    """``lease.claim(now)`` by a process that has watched the lease there unchanged for its TTL
    (another autoscaler, standing by)."""
    there = lease.store.get(AUTOSCALER_LEASE, lease.entity)
    if there is not None:
        lease.seen.see(there, -math.inf)
    return lease.claim(now)


# --- the lease --------------------------------------------------------------------------------


def test_one_holder_at_a_time_until_its_ttl_runs_out(tmp_path):
    """Another's lease is judged by when this process saw it renewed, on its own clock: a TTL
    after the last renewal it saw, whatever the expiry the holder wrote with its clock."""
    a, b = lease(tmp_path, A), lease(tmp_path, B)
    assert a.claim(T0).held
    other = b.claim(T0 + 10)  # first seen now: B would take it a TTL later
    assert not other.held and other.holder == A.id and other.expires_at == T0 + 40
    assert "held by pid 100 on host-a (started 2023-11-14T22:13:20Z) until 2023-11-14T22:14:00Z" in other.describe()
    assert not b.claim(T0 + 39).held
    assert a.claim(T0 + 20).held  # renewed: B sees it renewed at its next look
    assert not b.claim(T0 + 45).held and b.last is not None and b.last.expires_at == T0 + 75
    assert not b.claim(T0 + 74).held
    assert b.claim(T0 + 75).held  # unchanged for a TTL: taken over
    assert not a.claim(T0 + 76).held and a.last is not None and a.last.holder == B.id


def test_a_standby_with_its_clock_ahead_never_takes_a_renewed_lease(tmp_path):
    """Before, the expiry the holder wrote was compared with the claimant's wall clock: a standby
    120 s ahead took a healthy holder's lease at its first claim."""
    a, b = lease(tmp_path, A), lease(tmp_path, B)
    for t in range(0, 300, 10):
        assert a.claim(T0 + t).held  # renewed every 10 s, TTL 30
        assert not b.claim(T0 + t + 120).held  # B's clock 120 s ahead
    assert not b.claim(T0 + 410 + 29).held  # a's last renewal, at T0 + 290, was seen at T0 + 410
    assert b.claim(T0 + 410 + 30).held


def test_release_frees_only_ones_own_lease(tmp_path):
    a, b = lease(tmp_path, A), lease(tmp_path, B)
    a.claim(T0)
    b.release()  # not b's: nothing happens
    assert not b.claim(T0 + 1).held
    a.release()
    assert b.claim(T0 + 2).held
    assert a.store.get(AUTOSCALER_LEASE, "c.p.simulated").payload["holder"] == B.id


def test_a_request_is_granted_between_runs_only_and_withdrawn_after(tmp_path):
    a = lease(tmp_path, A)
    m = PoolLease(a.store, POOL_ID, B, 60.0, purpose="clusterman manage by ann@h")
    assert a.claim(T0).held
    clock = iter([T0 + 1, T0 + 1, T0 + 1, T0 + 2, T0 + 2, T0 + 3, T0 + 3, T0 + 3])

    def autoscaler_between_runs(_seconds):
        # during a run the lease is only renewed; between runs it is handed over
        assert a.claim(T0 + 2, hand_over=False).held
        status = a.claim(T0 + 2, hand_over=True)
        assert status.requested and not status.held
        assert "handed over to clusterman manage by ann@h, pid 200 on host-b" in status.describe()

    got = take_on_request(m, 5.0, clock=lambda: next(clock), sleep=autoscaler_between_runs)
    assert got.held and got.purpose == "clusterman manage by ann@h"
    assert a.store.get(LEASE_REQUEST, "c.p.simulated") is None  # withdrawn once held
    standby = a.claim(T0 + 4, hand_over=True)
    assert not standby.held and "held by clusterman manage by ann@h, pid 200" in standby.describe()
    stored = read_lease(a.store, POOL_ID, T0 + 4)
    assert stored is not None and (stored.holder, stored.purpose) == (standby.holder, standby.purpose)
    m.release()
    assert a.claim(T0 + 5, hand_over=True).held


def test_a_request_not_granted_in_time_names_the_holder_and_is_withdrawn(tmp_path):
    a = lease(tmp_path, A)
    m = PoolLease(a.store, POOL_ID, B, 60.0, purpose="clusterman manage by ann@h")
    assert a.claim(T0).held
    got = take_on_request(m, 0.0, clock=lambda: T0 + 1, sleep=lambda s: None)
    assert not got.held and got.holder == A.id and "held by pid 100 on host-a" in got.describe()
    assert a.store.get(LEASE_REQUEST, "c.p.simulated") is None
    assert a.claim(T0 + 2, hand_over=True).held


def test_an_unreachable_store_is_a_state_error(tmp_path):
    (tmp_path / "state.sqlite").mkdir()
    try:
        lease(tmp_path, A).claim(T0)
    except StateError as e:
        assert "state.sqlite" in str(e)
    else:
        raise AssertionError("expected StateError")


def test_a_run_without_the_lease_reads_nothing_and_says_who_holds_it(pools, tmp_path):  # noqa: F811
    lease(tmp_path, B).claim(T0 + 59)
    pool = pools(work(10), lease=lease(tmp_path, A))
    report = pool.minute()
    assert report.outcome is Outcome.STANDBY and report.decision is None
    assert "held by pid 200 on host-b" in report.line()
    assert pool.groups[0].read().group.target_capacity == 1
    assert "DECISION_STANDBY" in {e.event.detail.name for e in pool.events()}
    pool.now += 60  # B stopped renewing: the lease is A's at the next run, and A acts
    report = pool.cycle.run_once(pool.now)
    assert report.outcome is Outcome.ACTED and pool.groups[0].read().group.target_capacity == 4


def test_a_lease_lost_before_acting_means_no_action(pools, tmp_path):  # noqa: F811
    a = lease(tmp_path, A, ttl=5)
    pool = pools(work(10), lease=a)

    class TakenMeanwhile(InternalDemand):
        def requests(self, snapshot, now):
            after_watching(lease(tmp_path, B, ttl=60), now + 10)  # A's lease ran out while the signals answered
            pool.clock_offset += 10
            return super().requests(snapshot, now)

    pool.clock_offset = 0.0
    pool.cycle.demand = TakenMeanwhile()
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    report = pool.minute()
    assert report.outcome is Outcome.STANDBY and "held by pid 200" in report.message
    assert report.decision is not None and "(standby: not acting" in report.line()
    assert pool.groups[0].read().group.target_capacity == 1


# --- the run budget ---------------------------------------------------------------------------


class Slow(InternalDemand):
    """Internal demand that takes ``seconds`` of the pool's clock to answer (a stalled runner)."""

    def __init__(self, pool, seconds):
        self.pool, self.seconds = pool, seconds

    def requests(self, snapshot, now):
        self.pool.clock_offset += self.seconds
        return super().requests(snapshot, now)


def test_a_run_never_acts_on_a_snapshot_older_than_its_budget(pools):  # noqa: F811
    pool = pools(work(10), budget_seconds=60)
    pool.clock_offset = 0.0
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    pool.cycle.demand = Slow(pool, 90)
    report = pool.minute()
    assert report.outcome is Outcome.OVERRUN and report.decision is not None
    assert "the snapshot is 90.0 s old > budget 60 s: nothing changed" in report.line()
    assert pool.groups[0].read().group.target_capacity == 1
    assert "DECISION_OVERRUN" in {e.event.detail.name for e in pool.events()}
    pool.cycle.demand = Slow(pool, 5)
    assert pool.minute().outcome is Outcome.ACTED and pool.groups[0].read().group.target_capacity == 4


def test_the_loop_records_an_overrun_and_writes_the_heartbeat(pools, tmp_path):  # noqa: F811
    pool = pools(work(2))
    clock = FakeClock()
    run_once = pool.cycle.run_once

    def slow_run(now):
        clock.now += 45
        return run_once(now)

    pool.cycle.run_once = slow_run
    lines, beats = [], []
    runs = run_forever(
        pool.cycle, pool.recorder, 30, 0, SleepyStop(clock), clock=clock, monotonic=clock, max_runs=2,
        budget_seconds=30, heartbeat=beats.append, on_overrun=lines.append,
    )  # fmt: skip
    assert runs == 2 and len(beats) == 2 and beats[0] == 1020.0 + 45
    assert lines and "overrun: the run took 45.0 s > budget 30 s" in lines[0]
    assert b"clusterman_run_overruns_total" in pool.recorder.metrics.exposition()
    assert "DECISION_OVERRUN" in {e.event.detail.name for e in pool.events()}


def test_the_heartbeat_file_is_replaced_whole(tmp_path):
    path = tmp_path / "run" / "heartbeat.json"
    Heartbeat(1234.5, 60.0).write(path)
    Heartbeat(1294.5, 60.0).write(path)
    assert json.loads(path.read_text()) == {"finished_at": 1294.5, "period_seconds": 60.0}
    assert [p.name for p in path.parent.iterdir()] == ["heartbeat.json"]
    Heartbeat(1354.5, 60.0, {"web": (1240, 1300)}).write(path)
    assert json.loads(path.read_text())["unanswered"] == {"web": {"since": 1240, "last": 1300}}


def test_the_lease_is_renewed_while_waiting_between_runs(pools):  # noqa: F811
    pool = pools(work(2))
    clock = FakeClock()
    renewals = []

    def keep(now):
        renewals.append(now)

    run_forever(
        pool.cycle,
        pool.recorder,
        60,
        0,
        SleepyStop(clock),
        clock=clock,
        monotonic=clock,
        max_runs=2,
        keep_lease=keep,
        lease_seconds=30,
    )
    # every third of the TTL while waiting; the run itself claims the lease at its start
    assert len(renewals) >= 4 and all(b - a <= 10 for a, b in itertools.pairwise(renewals[1:]))


# --- stale input, unknown targets, joins, the line ----------------------------------------------


class Answer:
    def evaluate(self, metrics, timestamp, timeout=None):
        return ResourceRequest(cpus=1.0)

    def close(self):
        pass


def signal_demand(store):
    required = (RequiredMetric("cpus_allocated", MetricType.SYSTEM_METRICS, 10),)
    config = SignalConfig(1, "MostRecentResources", "v1", required_metrics=required)
    spec = SignalSpec(DEFAULT_APP, "clusterman", config)
    return SignalDemand(SignalEvaluator(POOL_ID, spec, [], lambda spec: Answer()), store)


def test_signal_input_older_than_its_window_holds_scale_down(pools):  # noqa: F811
    store = InMemoryStore()
    store.load(MetricType.SYSTEM_METRICS, system_key("cpus_allocated", "c", "p.simulated"), [(int(T0 - 3600), 1.0)])
    pool = pools(work(1), demand=signal_demand(store))
    pool.groups[0].set_target_capacity(6)
    for _ in range(3):
        report = pool.minute()
        assert report.decision is not None and not report.decision.taint and not report.decision.terminate
    assert "no metric point in the signals' windows" in report.line() and "no scale-down" in report.line()
    assert pool.groups[0].read().group.target_capacity == 6
    fresh = pools(work(1), demand=signal_demand(store))
    store.load(MetricType.SYSTEM_METRICS, system_key("cpus_allocated", "c", "p.simulated"), [(int(T0 + 30), 1.0)])
    fresh.groups[0].set_target_capacity(6)
    assert fresh.minute().decision.taint  # fresh input: the pool shrinks


def test_a_scheduler_view_that_may_be_old_holds_scale_down_and_says_so(pools):  # noqa: F811
    stale = "the watch of the pool's pods has not heard from the API server for 200 s (> 150 s; watching)"
    pool = pools(work(1))
    pool.groups[0].set_target_capacity(6)
    read = pool.cycle.connector.join
    pool.cycle.connector.join = lambda view, cloud, now: dataclasses.replace(read(view, cloud, now), stale=stale)  # type: ignore[method-assign]
    for _ in range(3):
        report = pool.minute()
        assert report.decision is not None and not report.decision.taint and not report.decision.terminate
    assert f"{stale}: no scale-down" in report.line()
    assert pool.groups[0].read().group.target_capacity == 6
    pool.cycle.connector.join = read  # type: ignore[method-assign]
    assert pool.minute().decision.taint  # heard from again: the pool shrinks


def test_unwritable_metrics_hold_scale_down_and_say_so(pools, caplog):  # noqa: F811
    def unwritable(snapshot):
        raise MetricsError("metrics.sqlite3: attempt to write a readonly database")

    pool = pools(work(1), write_metrics=unwritable)
    pool.groups[0].set_target_capacity(6)
    pool.minute()
    report = pool.minute()
    assert report.decision is not None and not report.decision.taint
    assert "metrics could not be written" in report.line()
    assert "readonly database" in caplog.text


def test_an_unreadable_cloud_is_not_a_target_of_zero(pools):  # noqa: F811
    pool = pools(work(2))
    pool.minute()
    pool.groups[0].break_with("could not connect to the endpoint URL")
    report = pool.minute()
    assert "target unknown (1 resource group(s) could not be read)" in report.line()
    assert "target 0 -> 0" not in report.line()


def test_a_paused_decision_reports_the_real_target(pools):  # noqa: F811
    pool = pools(work(2), pause_status=lambda now: PauseStatus(True, reason="maintenance"))
    pool.groups[0].set_target_capacity(14)
    pool.minute()
    [paused] = [e for e in pool.events() if e.event.detail.name == "DECISION_PAUSED"]
    assert "target 14:" in paused.event.message
    assert pool.recorder.metrics.exposition().count(b"clusterman_target_capacity{") == 1
    assert b'clusterman_target_capacity{cluster="c",pool="p"} 14.0' in pool.recorder.metrics.exposition()


def test_a_standby_with_nothing_known_reports_an_unknown_target(pools, tmp_path):  # noqa: F811
    lease(tmp_path, B).claim(T0 + 59)
    pool = pools(work(2), lease=lease(tmp_path, A))
    pool.minute()
    [standby] = [e for e in pool.events() if e.event.detail.name == "DECISION_STANDBY"]
    assert "target nan" in standby.event.message and math.isnan(pool.cycle._known_target())


def test_nodes_that_join_are_events(pools):  # noqa: F811
    pool = pools(work(10, end=T0 + 600))
    pool.minute()  # 1 -> 4: three nodes launched
    for _ in range(3):
        pool.minute()
    joins = [e for e in pool.events() if e.event.detail.name == "NODE_JOIN"]
    assert len(joins) == 3 and all("joined" in e.event.message for e in joins)


def test_the_internal_app_is_the_default_signals_app():
    assert INTERNAL_APP == DEFAULT_APP == "__default__"


def test_the_scale_lock_is_a_time_in_the_line():
    from tests.scaling_builders import NOW
    from tests.scaling_builders import group
    from tests.scaling_builders import nodes
    from tests.scaling_builders import policy
    from tests.scaling_builders import request
    from tests.scaling_builders import run
    from tests.scaling_builders import snapshot

    lock = policy(scale_up_cool_down_period_seconds=120)
    d = run(snapshot(nodes(2), [group("g1", 2)]), request(5), lock)
    held = run(snapshot(nodes(2), [group("g1", 8)]), request(0.1), lock, d.state, now=NOW + 60)
    assert "scale lock held until 2023-11-14T22:15:20Z" in held.explanation


def test_a_terminated_orphan_says_why_in_the_line():
    from clusterman.core.model import NodeState
    from tests.scaling_builders import NOW
    from tests.scaling_builders import group
    from tests.scaling_builders import node
    from tests.scaling_builders import nodes
    from tests.scaling_builders import request
    from tests.scaling_builders import run
    from tests.scaling_builders import snapshot

    members = [*nodes(2), node("lost", state=NodeState.ORPHAN, launched_at=NOW - 2000)]
    d = run(snapshot(members, [group("g1", 3)]), request(5))
    assert d.terminate == ("lost",)
    assert "terminate 1 (orphan, not joined 2000s after launch (limit 1800s))" in d.explanation, d.explanation


def test_joins_are_counted_once_through_growth_and_shrinking_past_a_chunk(pools):  # noqa: F811
    pool = pools(work(120, end=T0 + 900), policy=limits(max_capacity=60, max_weight_to_add=20))
    seen = set()
    for _ in range(30):
        pool.minute()
        seen |= {n.id for n in pool.scheduler.nodes()}
    joins = [e.event.object_id for e in pool.events() if e.event.detail.name == "NODE_JOIN"]
    assert len(seen) > 40 and len(joins) == len(set(joins)) == len(seen) - 1  # every node but the first


def test_acting_stops_between_stages_when_the_lease_is_lost(pools, tmp_path):  # noqa: F811
    pool = pools(work(10, end=T0 + 200), lease=lease(tmp_path, A, ttl=30))
    for _ in range(3):
        pool.minute()  # up to 4 nodes, which join
    assert pool.ready() == 4
    pool.clock_offset = 0.0
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    taint = pool.cycle.lifecycle.taint

    def slow_taint(node_ids, now):
        done = taint(node_ids, now)
        pool.clock_offset += 31  # A's lease ran out meanwhile, and B took it
        assert after_watching(lease(tmp_path, B, ttl=60), pool.now + pool.clock_offset).held
        return done

    pool.cycle.lifecycle.taint = slow_taint
    report = pool.minute()  # the work ended: scale down by tainting and terminating
    assert report.decision is not None and report.decision.taint and report.decision.terminate
    assert report.applied is not None and not report.applied.terminations and not report.applied.targets
    assert ("lease", "the pool's lease was lost while acting: stopped before draining") in report.applied.errors
    assert pool.groups[0].read().group.target_capacity == 4
    assert any(e.event.object_id == "lease" for e in pool.events() if e.event.detail.name == "ERROR_INTERNAL")


def stalled_while_tainting(pool, seconds, then=lambda at: None):
    """The run's clock jumps ``seconds`` while it taints (the process stopped or stuck); ``then``
    runs at the new time."""
    pool.clock_offset = 0.0
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    taint = pool.cycle.lifecycle.taint

    def slow_taint(node_ids, now):
        done = taint(node_ids, now)
        pool.clock_offset += seconds
        then(pool.now + pool.clock_offset)
        return done

    pool.cycle.lifecycle.taint = slow_taint


def test_acting_stops_when_the_lease_lapsed_meanwhile_even_if_taken_again(pools, tmp_path):  # noqa: F811
    kept = StoredState(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID)
    pool = pools(work(10, end=T0 + 200), lease=lease(tmp_path, A, ttl=30), keeper=kept)
    for _ in range(3):
        pool.minute()
    # B held the lease while A was stopped, and let it go: A takes it again, but B may have acted
    stalled_while_tainting(pool, 31, then=lambda at: lease(tmp_path, B).release())
    report = pool.minute()
    assert report.decision is not None and report.decision.terminate
    assert report.applied is not None and not report.applied.terminations and not report.applied.targets
    assert ("lease", "the pool's lease was lost while acting: stopped before draining") in report.applied.errors
    assert not pool.cycle._loaded  # the next run reads the kept state again: B may have changed it


def test_a_lease_that_lapsed_while_its_renewal_was_on_the_way_is_not_acted_on(pools, tmp_path):  # noqa: F811
    """The renewal right before acting is answered after A's lease ran out (the store slow, the
    process stopped meanwhile): B held it meanwhile and let it go, so A's write landed, but B may
    have acted. Nothing is done, and the kept state is read again at the next run."""
    kept = StoredState(SqliteStateStore(tmp_path / "state.sqlite"), POOL_ID)
    a = lease(tmp_path, A, ttl=30)
    pool = pools(work(10, end=T0 + 200), lease=a, keeper=kept)
    for _ in range(3):
        pool.minute()
    pool.clock_offset = 0.0
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    claim, claims = a.store.claim, []

    def slow_claim(item, owner, now, stale=None):
        claims.append(now)
        if len(claims) == 2:  # the renewal before acting (the first: the run's start)
            pool.clock_offset += 31
            assert after_watching(lease(tmp_path, B), pool.now + pool.clock_offset).held
            lease(tmp_path, B).release()
        return claim(item, owner, now, stale)

    a.store.claim = slow_claim
    report = pool.minute()  # the work ended: A would scale down
    assert len(claims) == 2 and report.outcome is Outcome.STANDBY, report.line()
    assert "lapsed at" in report.message and "its renewal was answered 31.0 s after it was sent" in report.message
    assert report.decision is not None and report.decision.terminate and report.applied is None
    assert pool.groups[0].read().group.target_capacity == 4
    assert not pool.cycle._loaded  # the next run reads the kept state again: B may have changed it


def test_a_lease_lost_while_the_state_was_kept_before_acting_changes_no_taint(pools, tmp_path):  # noqa: F811
    """The state is kept after the renewal before acting and before the first taint: a save that
    took past the lease (a slow disk or store, the process stopped) while B held it acts on nothing."""
    pool = pools(work(10, end=T0 + 200), lease=lease(tmp_path, A, ttl=30))
    for _ in range(3):
        pool.minute()
    pool.clock_offset = 0.0
    pool.cycle.clock = lambda: pool.now + pool.clock_offset
    save = pool.cycle._save

    def slow_save(state, now):
        pool.clock_offset += 31
        assert after_watching(lease(tmp_path, B, ttl=60), pool.now + pool.clock_offset).held
        return save(state, now)

    pool.cycle._save = slow_save
    report = pool.minute()  # the work ended: A would taint, drain and terminate
    assert report.decision is not None and report.decision.taint and report.applied is not None
    assert not report.applied.tainted and not report.applied.terminations and not report.applied.targets
    assert ("lease", "the pool's lease was lost while acting: stopped before changing taints") in report.applied.errors
    assert pool.ready() == 4  # no node tainted


def test_acting_stops_between_stages_once_the_snapshot_is_older_than_the_budget(pools):  # noqa: F811
    pool = pools(work(10, end=T0 + 200), budget_seconds=60)
    for _ in range(3):
        pool.minute()
    stalled_while_tainting(pool, 61)
    report = pool.minute()
    assert report.applied is not None and not report.applied.terminations and not report.applied.targets
    errors = dict(report.applied.errors)
    assert errors["budget"].endswith("old > budget 60 s: stopped before draining"), errors
    assert pool.groups[0].read().group.target_capacity == 4
    assert f"target 4 -> {report.decision.target_capacity} not set (" in report.line(), report.line()


def test_a_node_the_decision_keeps_is_not_drained_when_its_untaint_fails():
    """An untaint refused (a conflict, an API error) leaves the node tainted, but the decision keeps
    it: the run drains the other tainted node only, and the next run tries the untaint again."""
    from clusterman.cluster.lifecycle import DrainResult
    from clusterman.cluster.lifecycle import DrainStatus
    from clusterman.cluster.lifecycle import NodeLifecycle
    from clusterman.cluster.lifecycle import Outcome as NodeOutcome
    from clusterman.decision.result import Action
    from clusterman.decision.result import Decision
    from clusterman.run.apply import apply
    from clusterman.run.permit import Permit
    from tests.scaling_builders import NOW
    from tests.scaling_builders import TAINTED
    from tests.scaling_builders import node
    from tests.scaling_builders import pods
    from tests.scaling_builders import snapshot

    class RefusingUntaint(NodeLifecycle):
        def __init__(self) -> None:
            self.drained: list[str] = []

        def taint(self, node_ids, now):
            return self.unchanged(node_ids, "already tainted")

        def untaint(self, node_ids):
            return {n: self.result(n, NodeOutcome.FAILED, "409 Conflict") for n in node_ids}

        def drain(self, node_id, now, going_on=lambda: ""):
            self.drained.append(node_id)
            return DrainResult(node_id, DrainStatus.NOT_NOW, 2, 2, "evicted 2 pod(s)")

    snap = snapshot([node(n, state=TAINTED, tainted_at=NOW - 60, cpus=2, tasks=pods(2)) for n in ("kept", "leaving")])
    decision = Decision(Action.NONE, Fraction(0), Fraction(2), Fraction(2), {}, "keep kept", untaint=("kept",))
    lifecycle = RefusingUntaint()
    report = apply(decision, snap, {}, lifecycle, NOW, Permit(NOW))
    assert not report.untainted["kept"].ok
    assert lifecycle.drained == ["leaving"]
    assert ("kept", "untaint: 409 Conflict") in report.errors, report.errors


def test_a_short_lease_is_renewed_in_the_second_after_a_quick_run(pools):  # noqa: F811
    """A run is never started twice in one grid slot: the loop waits a second after a quick run.
    A lease shorter than that (a test's, a short period's) lapsed there, and a standby took it."""
    pool = pools(work(2))
    clock = FakeClock()
    renewals = []
    run_forever(
        pool.cycle, pool.recorder, 2, 0, SleepyStop(clock), clock=clock, monotonic=clock, max_runs=3,
        keep_lease=lambda now: renewals.append(now), lease_seconds=0.9,
    )  # fmt: skip
    assert len(renewals) > 6 and all(b - a < 0.9 for a, b in itertools.pairwise(renewals)), renewals

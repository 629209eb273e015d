"""The drain machinery's decision (decision/drains.py): nodes leaving for a notice, their replacement
in the same run, the pace of drain steps, and drains given up after draining_time_threshold_seconds."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from clusterman.core.model import NO_TIME
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.decision import AutoscalerState
from clusterman.decision import decide
from clusterman.decision.drains import DrainPolicy
from clusterman.decision.drains import DrainState
from clusterman.decision.result import Action
from tests.scaling_builders import NOW
from tests.scaling_builders import READY
from tests.scaling_builders import TAINTED
from tests.scaling_builders import apply
from tests.scaling_builders import group
from tests.scaling_builders import node
from tests.scaling_builders import nodes
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import snapshot

SPOT = LeaveReason.SPOT_INTERRUPTION


def spot(node_id: str, at: float = NOW, deadline: float | None = None) -> Notice:
    return Notice(SPOT, at, node_id=node_id, deadline=at + 120 if deadline is None else deadline, key="m-1")


def busy_pool(count: int = 4) -> list:
    """``count`` 1-cpu nodes, each with one 0.7-cpu pod: right-sized at the 70% setpoint."""
    return [node(f"n{i}", tasks=pods(1, cpus=0.7)) for i in range(count)]


def run(snap, notices=(), state=None, now=NOW, cpus=2.8, **overrides):
    """The apps ask for ``cpus`` (2.8: four 1-cpu nodes at the 70% setpoint)."""
    return decide(
        snap, {"app": request(cpus=cpus)}, policy(**overrides), state or AutoscalerState(), now, notices=tuple(notices)
    )


class TestReplacement:
    def test_a_warning_taints_the_node_and_asks_for_its_replacement_in_the_same_run(self):
        d = run(snapshot(busy_pool()), [spot("n2")])
        assert d.taint == ("n2",) and d.drains.drain == ("n2",)
        # the pool wants 4 ready; n2 goes, so its group keeps a place for it beside the 4
        assert (d.current_target, d.target_capacity, d.action) == (4, 5, Action.SCALE_UP)
        assert d.drains.why == {"n2": SPOT} and d.drains.replacement == {"g1": 1}
        assert "replacing 1 (spot_interruption: n2)" in d.explanation
        assert d.node_reasons["n2"] == "taint: spot_interruption, gone in 120s"
        (entry,) = d.state.drains.leaving
        assert (entry.node_id, entry.replacement, entry.deadline) == ("n2", 1.0, NOW + 120)

    def test_the_next_runs_keep_the_replacement_and_end_the_node_once_drained(self):
        snap = snapshot(busy_pool())
        first = run(snap, [spot("n2")])
        after = apply(snap, first, NOW)  # n2 tainted, a new node launched to the target of 5
        again = run(after, [spot("n2")], first.state, NOW + 5)
        assert (again.current_target, again.target_capacity, again.taint, again.terminate) == (5, 5, (), ())
        assert again.drains.drain == ()  # its last step was 5 s ago: within redraining_delay_seconds
        later = run(after, [spot("n2")], again.state, NOW + 20)
        assert later.drains.drain == ("n2",)
        # its pod left: it goes, and its group's target loses the place kept for it
        empty = replace(after, nodes=tuple(replace(n, tasks=()) if n.id == "n2" else n for n in after.nodes))
        done = run(empty, [spot("n2")], later.state, NOW + 25)
        assert done.terminate == ("n2",) and done.target_capacity == 4
        assert done.node_reasons["n2"] == "terminate: spot_interruption: drained"
        assert done.state.drains.leaving == () and done.drains.lost == {}

    def test_at_its_deadline_the_node_goes_with_what_still_runs_there_counted_as_lost(self):
        snap = snapshot(busy_pool())
        first = run(snap, [spot("n2")])
        after = apply(snap, first, NOW)
        d = run(after, [spot("n2")], first.state, NOW + 111)
        assert d.terminate == ("n2",) and d.drains.lost == {"n2": 1}
        assert d.node_reasons["n2"] == "terminate: spot_interruption: its deadline is 9s away"

    def test_the_same_warning_three_times_is_one_warning(self):
        snap = snapshot(busy_pool())
        once = run(snap, [spot("n2")])
        thrice = run(snap, [spot("n2"), spot("n2"), spot("n2")])
        assert thrice == once

    def test_a_warning_for_a_node_not_in_the_pool_changes_nothing_and_says_so(self):
        snap = snapshot(busy_pool())
        d = run(snap, [Notice(SPOT, NOW, instance_id="i-elsewhere", deadline=NOW + 120)])
        assert (d.taint, d.target_capacity, d.drains.why) == ((), 4, {})
        assert "notice for no node of the pool: i-elsewhere" in d.explanation

    def test_a_node_already_tainted_for_scale_down_needs_no_replacement(self):
        tainted = node("n3", state=TAINTED, tainted_at=NOW - 60, tasks=pods(1, cpus=0.7))
        snap = snapshot([*busy_pool(3), tainted], [group("g1", 3)])
        d = run(snap, [spot("n3")], cpus=2.1)
        assert d.taint == () and d.drains.replacement == {} and d.target_capacity == 3
        assert d.drains.why == {"n3": SPOT} and d.drains.drain == ("n3",)

    def test_the_replacement_stays_within_the_groups_maximum(self):
        d = run(snapshot(busy_pool(), [group("g1", 4, hi=4)]), [spot("n2")])
        assert d.target_capacity == 4 and "group g1 at its max_capacity: 1 not replaced" in d.explanation

    def test_a_scale_lock_holds_the_target_but_not_an_interruption(self):
        state = AutoscalerState(scale_lock=replace(AutoscalerState().scale_lock, until=NOW + 600, requested=10))
        d = run(snapshot(busy_pool()), [spot("n2")], state)
        assert "scale lock held" in d.explanation
        assert d.taint == ("n2",) and d.target_capacity == 5

    def test_the_pods_about_to_move_are_demand_for_the_ready_nodes_that_stay(self):
        # eight nodes, 3 busy: the pool wants fewer, but never fewer than the work of the leaving node needs
        snap = snapshot([*busy_pool(3), *nodes(5, prefix="e")])
        d = run(snap, [spot("n0")])
        assert "n0" in d.taint and "n0" not in d.terminate
        assert d.utilisation["cpus"] * d.current_capacity == pytest.approx(2.8)


class TestDrainsGivenUp:
    def tainted_busy(self, at: float) -> list:
        return [*busy_pool(3), node("n3", state=TAINTED, tainted_at=at, tasks=pods(2, cpus=0.1))]

    def test_a_scale_down_drain_not_done_within_the_threshold_is_given_up(self):
        snap = snapshot(self.tainted_busy(NOW - 1801), [group("g1", 3)])
        d = run(snap, cpus=2.1)
        assert d.untaint == ("n3",) and "n3" not in d.terminate
        assert d.drains.given_up == {"n3": "not drained within draining_time_threshold_seconds 1800s (2 pods left)"}
        assert d.state.drains.given_up == (("n3", NOW),)
        # it stays: its weight, taken out of the target when it was tainted, is counted again (a
        # group's target below its instances would have the cloud end one of them)
        assert d.target_capacity == 4 and d.group_targets == {"g1": 4}
        # returned to the pool, it is not chosen again while it rests (the pool has one node too many)
        back = replace(snap, nodes=tuple(replace(n, state=READY, tainted_at=NO_TIME) for n in snap.nodes))
        again = run(back, state=d.state, now=NOW + 60, cpus=2.1)
        assert "n3" not in again.taint

    def test_with_force_terminate_it_goes_with_its_pods_counted(self):
        snap = snapshot(self.tainted_busy(NOW - 1801), [group("g1", 3)])
        d = run(snap, cpus=2.1, draining=DrainPolicy(force_terminate=True))
        assert d.terminate == ("n3",) and d.drains.lost == {"n3": 2}

    def test_within_the_threshold_the_drain_goes_on_more_slowly_as_it_ages(self):
        snap = snapshot(self.tainted_busy(NOW - 1600), [group("g1", 3)])
        state = AutoscalerState(drains=DrainState(steps=(("n3", NOW - 150),)))
        assert run(snap, state=state, cpus=2.1).drains.drain == ()  # 1600 s old: a step every 200 s
        state = AutoscalerState(drains=DrainState(steps=(("n3", NOW - 201),)))
        assert run(snap, state=state, cpus=2.1).drains.drain == ("n3",)

    def test_a_hard_grace_period_ends_scale_down_drains_instead(self):
        snap = snapshot(self.tainted_busy(NOW - 1801), [group("g1", 3)])
        d = run(snap, cpus=2.1, hard_delete_grace_period_seconds=3600.0)
        assert d.untaint == () and d.drains.given_up == {}

    def test_a_migration_without_deadline_is_given_up_after_the_threshold(self):
        snap = snapshot(busy_pool())
        notice = Notice(LeaveReason.NODE_MIGRATION, NOW, node_id="n1", key="migration-1")
        first = run(snap, [notice])
        assert first.taint == ("n1",) and first.target_capacity == 5
        after = apply(snap, first, NOW)
        d = run(after, [notice], first.state, NOW + 1800)
        assert d.untaint == ("n1",) and d.target_capacity == 4 and d.drains.given_up


def test_the_record_survives_a_restart_as_json():
    d = run(snapshot(busy_pool()), [spot("n2")])
    assert AutoscalerState.from_json(d.state.as_json()) == d.state


def test_a_record_with_an_unknown_reason_is_refused_by_name():
    data = AutoscalerState().as_json()
    data["drains"] = {"leaving": [{"node": "n", "reason": "meteor", "since": 1, "replacement": 0}]}
    with pytest.raises(ValueError, match=re.escape("drains.leaving.reason: unknown reason 'meteor'")):
        AutoscalerState.from_json(data)


def test_a_node_a_migration_replaces_ahead_is_withdrawn_when_the_migration_stops_naming_it():
    def ahead(node_id: str, drain: bool = False) -> Notice:
        return Notice(LeaveReason.NODE_MIGRATION, NOW, node_id=node_id, drain=drain, key="m1")

    pool = snapshot(busy_pool())
    first = run(pool, [ahead("n1"), ahead("n2", drain=True)])
    assert first.target_capacity == 6 and first.taint == ("n2",)  # both replaced, n2 drained now
    after = apply(pool, first, NOW)
    # the migration failed: it names neither; n1 was only replaced ahead and is capacity again at
    # once, n2 is draining and goes on (it is tainted, its replacement kept)
    d = run(after, [], state=first.state, now=NOW + 60)
    assert {e.node_id for e in d.state.drains.leaving} == {"n2"}
    assert d.drains.replacement == {"g1": 1} and "n1" not in d.taint
    # a rebalance recommendation replaced ahead stays in the record without being named again
    rebalance = Notice(LeaveReason.REBALANCE_RECOMMENDATION, NOW, node_id="n3", drain=False)
    kept = run(pool, [rebalance])
    assert {e.node_id for e in run(pool, [], state=kept.state, now=NOW + 60).state.drains.leaving} == {"n3"}


def test_a_drain_after_a_replacement_ahead_has_its_whole_threshold_from_when_it_starts():
    def migration(drain: bool, at: float) -> Notice:
        return Notice(LeaveReason.NODE_MIGRATION, at, node_id="n1", drain=drain, key="m1")

    pool = snapshot(busy_pool())
    ahead = run(pool, [migration(False, NOW)])  # replaced ahead for 25 minutes while its replacement joins
    later = NOW + 1500
    draining = run(apply(pool, ahead, NOW), [migration(True, later)], state=ahead.state, now=later)
    assert draining.taint == ("n1",) and draining.state.drains.leaving[0].since == later
    tainted = apply(apply(pool, ahead, NOW), draining, later)
    still = run(tainted, [migration(True, later + 600)], state=draining.state, now=later + 600)
    assert still.drains.given_up == {}  # 10 minutes into its drain, not 35 since the notice


def test_a_rebalance_recommendation_replaced_ahead_keeps_the_node_until_the_interruption():
    snap = snapshot(busy_pool())
    ahead = Notice(LeaveReason.REBALANCE_RECOMMENDATION, NOW, node_id="n1", drain=False)
    d = run(snap, [ahead])
    assert (d.taint, d.terminate, d.drains.drain, d.target_capacity) == ((), (), (), 5)
    after = apply(snap, d, NOW)
    later = run(after, [ahead, spot("n1", NOW + 300)], d.state, NOW + 300)  # the interruption follows
    assert later.taint == ("n1",) and later.target_capacity == 5  # no second replacement
    assert later.drains.why == {"n1": SPOT}
    quiet = run(after, [ahead], d.state, NOW + 1800)  # none followed: the place kept for it goes
    assert quiet.target_capacity == 4 and quiet.state.drains.leaving == ()


class TestHostsFromClustermansQueues:
    """Hosts put on Clusterman's drain and termination queues, as the drainer files them
    (clusterman/notices/hosts.py)."""

    def drained(self, node_id: str) -> Notice:  # a host on the drain queue, "scaling down"
        return Notice(LeaveReason.SCALING_DOWN, NOW, node_id=node_id, replace=False, key="m-drain")

    def test_a_host_to_drain_for_scaling_down_is_drained_without_a_replacement(self):
        d = run(snapshot(busy_pool()), [self.drained("n1")])
        assert d.taint == ("n1",) and d.drains.drain == ("n1",) and d.drains.replacement == {}
        assert d.drains.why == {"n1": LeaveReason.SCALING_DOWN}

    def test_a_drain_given_up_is_not_started_again_by_the_same_notice(self):
        snap = snapshot(busy_pool())
        short = DrainPolicy(threshold_seconds=600)  # given up after 10 minutes, rested as long
        first = run(snap, [self.drained("n1")], draining=short)
        given_up = run(apply(snap, first, NOW), [self.drained("n1")], first.state, NOW + 600, draining=short)
        assert given_up.untaint == ("n1",) and given_up.drains.given_up
        # the notice stays in the inbox for an hour; past the node's rest it is still the notice
        # whose drain was given up (Clusterman's drainer uncordons the node and deletes the message)
        again = run(snap, [self.drained("n1")], given_up.state, NOW + 1300, draining=short)
        assert "n1" not in again.taint and again.drains.why == {}
        # a later notice for it (another message) drains it again
        fresh = replace(self.drained("n1"), noticed_at=NOW + 1300)
        assert run(snap, [fresh], again.state, NOW + 1300, draining=short).taint == ("n1",)

    def test_a_host_to_terminate_goes_in_the_run_that_reads_it(self):
        notice = Notice(LeaveReason.NODE_MIGRATION, NOW, node_id="n1", deadline=NOW, key="m-terminate")
        d = run(snapshot(busy_pool()), [notice])
        assert d.terminate == ("n1",) and d.drains.lost == {"n1": 1}
        assert d.node_reasons["n1"] == "terminate: node_migration: its deadline is 0s away"
        assert d.target_capacity == 4  # its replacement asked, its own place gone

"""The decision's math, table by table: the seed's numbers, Clusterman's rules, Escalator's rates."""

from dataclasses import replace
from fractions import Fraction

import pytest

from clusterman.core.model import Node
from clusterman.core.model import Task
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.decision import Action
from clusterman.decision import demand_from_snapshot
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.limits import clamp
from clusterman.decision.policy import EscalatorRemoval
from tests.scaling_builders import CORDONED
from tests.scaling_builders import NOW
from tests.scaling_builders import ORPHAN
from tests.scaling_builders import READY
from tests.scaling_builders import TAINTED
from tests.scaling_builders import apply
from tests.scaling_builders import group
from tests.scaling_builders import node
from tests.scaling_builders import nodes
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


def test_seed_example_two_nodes_at_250_percent():
    """Seed 002: 10 pods of 500m/100MB on two 1-CPU/4000MB nodes, threshold 70% → +6 nodes."""
    snap = snapshot(nodes(2), [group("g1", 2, 0, 100)], pending=pods(10))
    d = run(snap, demand_from_snapshot(snap))
    assert d.utilisation == {"cpus": Fraction(5, 2), "mem": Fraction(1, 8)}  # no disk or gpus on the nodes
    assert d.most_constrained == "cpus"
    assert (d.current_capacity, d.target_capacity, d.delta) == (2, 8, 6)
    assert d.action is Action.SCALE_UP
    assert d.group_targets == {"g1": 8}
    assert d.explanation == "cpus 250% > setpoint 70%: ceil(2 × 250 / 70) = 8 → +6"
    # and on the 8 nodes: 62.5% cpus, 3.125% mem, as the seed computes, and nothing more to do
    after = run(apply(snap, d, 1), demand_from_snapshot(snap))
    assert after.utilisation["cpus"] == Fraction(5, 8) and after.utilisation["mem"] == Fraction(1, 32)
    assert after.action is Action.NONE and after.delta == 0


@pytest.mark.parametrize(
    ("ready", "cpus", "mem", "target", "action", "why"),
    [
        (8, 5, 1000, 8, Action.NONE, "cpus 62.5% < setpoint 70%: ceil(8 × 62.5 / 70) = 8"),
        (60, 42, None, 60, Action.NONE, "cpus 70% = setpoint 70%: ceil(60 × 70 / 70) = 60"),  # floats say 61
        (30, 21, None, 30, Action.NONE, "cpus 70% = setpoint 70%"),  # floats: 30.000000000000004 → 31
        (10, 3.5, None, 5, Action.SCALE_DOWN, "cpus 35% < setpoint 70%: ceil(10 × 35 / 70) = 5 → -5"),
        (10, 1, 30000, 11, Action.SCALE_UP, "mem 75% > setpoint 70%: ceil(10 × 75 / 70) = 11 → +1"),
        (10, 7.01, None, 11, Action.SCALE_UP, "cpus 70.1% > setpoint 70%"),
        (10, None, None, 10, Action.NONE, "no opinion on any resource: keep target 10"),
        (10, 0, 0, 0, Action.SCALE_DOWN, "every request is zero: target 0 → -10"),
    ],
)  # fmt: skip
def test_clusterman_target_follows_utilisation(ready, cpus, mem, target, action, why):
    d = run(snapshot(nodes(ready)), request(cpus, mem))
    assert d.target_capacity == target
    assert d.action is action
    assert why in d.explanation


def test_pods_summing_to_a_round_number_give_no_extra_unit():
    """420 pods of 0.1 CPU sum to 42.00000000000003 in floats; exactly 42 here: 60 nodes, no change."""
    snap = snapshot(nodes(60), pending=pods(420, cpus=0.1, mem=1))
    d = run(snap, demand_from_snapshot(snap))
    assert d.demand["cpus"] == 42 and d.target_capacity == 60 and d.action is Action.NONE


@pytest.mark.parametrize(
    ("ready", "cpus", "margin", "target", "why"),
    [
        (20, 13, 0.1, 20, "ceil(20 × 65 / 70) = 19, within margin 10% of target 20: keep 20"),
        (10, 6, 0.1, 9, "ceil(10 × 60 / 70) = 9 → -1"),  # exactly 10%: Clusterman scales (>= margin)
        (10, 8, 0.1, 12, "ceil(10 × 80 / 70) = 12 → +2"),
        # scale-down only: a 5% increase inside a 10% margin still happens (issue 13: no shortfall)
        (20, 14.1, 0.1, 21, "cpus 70.5% > setpoint 70%: ceil(20 × 70.5 / 70) = 21 → +1"),
        (100, 71, 0.1, 102, "ceil(100 × 71 / 70) = 102 → +2"),
        (100, 68, 0.1, 100, "ceil(100 × 68 / 70) = 98, within margin 10% of target 100: keep 100"),
    ],
)
def test_target_capacity_margin(ready, cpus, margin, target, why):
    d = run(snapshot(nodes(ready)), request(cpus), policy(target_capacity_margin=margin))
    assert d.target_capacity == target
    assert why in d.explanation


def test_margin_never_lets_the_target_creep():
    """Inside the margin band the target is kept as is, run after run (no offset added on top)."""
    snap = snapshot(nodes(20), [group("g1", 20)])
    pol = policy(target_capacity_margin=0.1)
    for _ in range(5):
        d = run(snap, request(13), pol)  # 65%: ceil(20 × 65 / 70) = 19 is inside the band
        assert d.target_capacity == 20
        snap = apply(snap, d, 1)


@pytest.mark.parametrize(
    ("current", "proposed", "limits", "blocked", "expected", "note"),
    [
        (10, 30, {"max_capacity": 20}, "", 20, "max_capacity 20"),
        (10, 30, {"max_weight_to_add": 5}, "", 15, "max_weight_to_add 5"),
        (10, 2, {"min_capacity": 5}, "", 5, "min_capacity 5"),
        (10, 2, {"max_weight_to_remove": 3}, "", 7, "max_weight_to_remove 3"),
        # below min: a lower request still moves toward min, capped by max_weight_to_add
        (3, 1, {"min_capacity": 5, "max_weight_to_add": 1}, "", 4, "max_weight_to_add 1"),
        # above max: a higher request still steps down, capped by max_weight_to_remove
        (25, 30, {"max_capacity": 20, "max_weight_to_remove": 2}, "", 23, "max_weight_to_remove 2"),
        (3, 3, {"min_capacity": 5}, "", 3, ""),  # no change asked: Clusterman does not move
        (10, 5, {}, "no scale-down: lost", 10, "no scale-down: lost"),
        (10, 15, {}, "no scale-down: lost", 15, ""),
    ],
)  # fmt: skip
def test_clusterman_clamping(current, proposed, limits, blocked, expected, note):
    holds = (Hold(HoldReason.CAPACITY_LOSS, blocked),) if blocked else ()
    result = clamp(Fraction(current), Fraction(proposed), policy(**limits), holds)
    assert result.target == expected
    assert (note in result.notes) if note else not result.notes


@pytest.mark.parametrize(
    ("current", "proposed", "unseen", "expected", "note"),
    [
        (1, 9, 5, 1, "max_capacity 6 less 5 in groups not read"),  # the pool is at its max already
        (1, 9, 3, 3, "max_capacity 6 less 3 in groups not read"),
        (1, 2, 3, 2, ""),  # within what is left
        (1, 9, None, 1, "groups not read, of unknown capacity: no growth"),
        (4, 0, 3, 4, "min_capacity 5"),  # with the unread 3 the pool is above min 5: not raised
        (1, 0, 2, 3, "min_capacity 5"),  # raised to min counting the unread 2
        (1, 0, None, 1, "groups not read, of unknown capacity: no growth"),  # below min, but max unknown
    ],
)  # fmt: skip
def test_groups_not_read_count_within_the_bounds(current, proposed, unseen, expected, note):
    holds = (Hold(HoldReason.GROUPS_UNREADABLE, "not read"),)
    pol = policy(min_capacity=5, max_capacity=6)
    result = clamp(Fraction(current), Fraction(proposed), pol, holds, None if unseen is None else Fraction(unseen))
    assert result.target == expected
    assert (note in result.notes) if note else not result.notes


def test_limits_appear_in_the_explanation():
    d = run(snapshot(nodes(2)), request(5), policy(max_weight_to_add=4))
    assert d.target_capacity == 6
    assert d.explanation == "cpus 250% > setpoint 70%: ceil(2 × 250 / 70) = 8; limited by max_weight_to_add 4 → 6 → +4"


def test_all_zero_request_shrinks_toward_min():
    d = run(snapshot(nodes(10)), request(0, 0), policy(min_capacity=3, max_weight_to_remove=4))
    assert d.target_capacity == 6
    d = run(snapshot(nodes(10)), request(0, 0), policy(min_capacity=3))
    assert d.target_capacity == 3


class TestFromZeroReadyNodes:
    def test_probe_unit_when_size_unknown(self):
        d = run(snapshot([], [group("g1", 0)]), request(5))
        assert d.target_capacity == 1
        assert "one probe unit" in d.explanation

    def test_sized_from_the_groups_node_size(self):
        g = group("g1", 0, node_resources=Resources(cpus=2, mem=8000))
        d = run(snapshot([], [g]), request(5))
        assert d.target_capacity == 4  # ceil(5 / (2 × 0.7)) = ceil(3.57)
        assert "cpus 5 / (2 per unit × 70%) → 4" in d.explanation

    def test_waits_for_requested_nodes_to_join(self):
        orphans = nodes(4, state=ORPHAN, launched_at=NOW - 60)
        d = run(snapshot(orphans, [group("g1", 4)]), request(5))
        assert d.target_capacity == 4 and d.action is Action.NONE
        assert "keep target 4 while it joins" in d.explanation
        assert d.terminate == ()  # joining orphans are not killed

    def test_a_lowered_target_whose_nodes_are_still_joining_tells_one_story(self):
        """Target 6 with one node ready: the rule wants 5, so the target goes down by one, and the
        arrow and the delta say -1 (counted from the ready node they said +4 beside scale_down)."""
        joining = nodes(5, prefix="j", state=ORPHAN, launched_at=NOW - 60)
        d = run(snapshot(nodes(1) + joining, [group("g1", 6)]), request(3.5))  # ceil(1 × 350 / 70) = 5
        assert (d.action, d.current_target, d.target_capacity, d.delta) == (Action.SCALE_DOWN, 6, 5, -1)
        assert d.explanation.startswith(
            "cpus 350% > setpoint 70%: ceil(1 × 350 / 70) = 5 → -1 from target 6 (ready 1); "
            "4 already requested, waiting to join"
        )

    def test_all_tainted_sized_from_their_size_and_untainted(self):
        tainted = [node(f"t{i}", state=TAINTED, launched_at=100 + i, tainted_at=1) for i in range(6)]
        d = run(snapshot(tainted, [group("g1", 0)]), request(3))
        assert d.target_capacity == 5  # ceil(3 / (1 × 0.7))
        assert d.untaint == ("t5", "t4", "t3", "t2", "t1")  # newest first
        assert d.current_capacity == 0 and d.delta == 5


class TestEscalatorRemoval:
    REMOVAL = EscalatorRemoval(lower=Fraction(1, 10), upper=Fraction(4, 10), slow=Fraction(2), fast=Fraction(5))

    @pytest.mark.parametrize(
        ("cpus", "slow", "target", "why"),
        [
            (3, 2, 8, "cpus 30% < taint_upper 40%: remove slow_node_removal_rate 2"),
            (0.5, 2, 5, "cpus 5% < taint_lower 10%: remove fast_node_removal_rate 5"),
            (5, 2, 10, "cpus 50% between taint_upper 40% and setpoint 70%: keep target 10"),
            # Escalator would go to 4 nodes (97.5%) and scale straight back up; the setpoint floors it
            (3.9, 6, 6, "max(10 − 6, 6) = 6"),
            (8, 2, 12, "cpus 80% > setpoint 70%: ceil(10 × 80 / 70) = 12"),
        ],
    )
    def test_rates(self, cpus, slow, target, why):
        removal = EscalatorRemoval(self.REMOVAL.lower, self.REMOVAL.upper, Fraction(slow), self.REMOVAL.fast)
        d = run(snapshot(nodes(10)), request(cpus), policy(escalator_removal=removal))
        assert d.target_capacity == target
        assert why in d.explanation

    @pytest.mark.parametrize(("cpus", "target"), [(30, 238), (5, 235), (140, 240)])
    def test_the_margin_does_not_swallow_a_small_removal_rate(self, cpus, target):
        """Rates 2/5 on 240 nodes are below a 5% margin (12 nodes): they still remove (issue 13)."""
        pol = policy(escalator_removal=self.REMOVAL, target_capacity_margin=0.05)
        d = run(snapshot(nodes(240)), request(cpus), pol)
        assert d.target_capacity == target
        assert "within margin" not in d.explanation

    def test_a_large_pool_with_little_demand_comes_down_into_the_hold_band(self):
        """Run after run, with the default margin, the pool comes down into the hold band, then holds."""
        pol = policy(escalator_removal=self.REMOVAL, target_capacity_margin=0.05)
        snap = snapshot(nodes(60))
        for i in range(40):
            d = run(snap, request(14), pol, now=NOW + 60 * i)
            snap = apply(snap, d, NOW + 60 * i)
            snap = replace(snap, nodes=tuple(n for n in snap.nodes if n.id not in d.taint))
        assert d.target_capacity == 34 and d.action is Action.NONE  # 14 / 34 = 41%: above taint_upper 40%

    def test_zero_requests_remove_the_fast_rate_not_everything(self):
        """Escalator: 0% is below taint_lower, so fast_node_removal_rate a run (issue 12)."""
        d = run(snapshot(nodes(10)), request(0, 0), policy(escalator_removal=self.REMOVAL))
        assert d.target_capacity == 5
        assert "cpus 0% < taint_lower 10%: remove fast_node_removal_rate 5" in d.explanation
        d = run(snapshot(nodes(4)), request(0, 0), policy(escalator_removal=self.REMOVAL, min_capacity=1))
        assert d.target_capacity == 1  # never below min

    @pytest.mark.parametrize(
        ("ready", "cpus", "limits", "target", "why"),
        [
            # over max in the hold band (50%): down to max_nodes (Clusterman's rule would keep 12)
            (12, 6, {"max_capacity": 10}, 10, "keep target 12; 12 ready > max_capacity 10: at most 10"),
            # slow rate says 10; over max says 8
            (12, 3, {"max_capacity": 8}, 8, "max(12 − 2, 5) = 10; 12 ready > max_capacity 8: at most 8"),
            # still within the step limit
            (12, 6, {"max_capacity": 8, "max_weight_to_remove": 3}, 9, "at most 8; limited by max_weight_to_remove 3"),
            # below min in the hold band: up to min_nodes
            (4, 2.2, {"min_capacity": 6}, 6, "keep target 4; 4 ready < min_capacity 6: at least 6"),
            (10, 5, {"max_capacity": 10}, 10, "keep target 10"),  # at max: nothing
        ],
    )  # fmt: skip
    def test_node_count_bounds_apply_in_every_band(self, ready, cpus, limits, target, why):
        d = run(snapshot(nodes(ready)), request(cpus), policy(escalator_removal=self.REMOVAL, **limits))
        assert d.target_capacity == target
        assert why in d.explanation


class TestSameNodeSet:
    """Demand and capacity describe the same pool: work that must live on ready nodes, over ready nodes."""

    def test_pods_on_tainted_nodes_stay_demand_so_the_pool_does_not_run_away(self):
        busy = [node(f"n{i}", tasks=(Task(f"p{i}", Resources(cpus=0.35, mem=10)),)) for i in range(10)]
        snap = snapshot(busy)
        d = run(snap, demand_from_snapshot(snap))
        assert d.target_capacity == 5 and len(d.taint) == 5 and d.terminate == ()  # busy: wait to empty
        after = apply(snap, d, NOW)
        again = run(after, demand_from_snapshot(after))
        assert again.utilisation["cpus"] == Fraction(7, 10)  # 3.5 cpus over 5 ready nodes
        assert again.action is Action.NONE and again.taint == ()

    def test_cordoned_nodes_count_on_neither_side(self):
        ready = nodes(2, tasks=pods(1, cpus=0.5))
        cordoned = nodes(2, prefix="c", state=CORDONED, tasks=pods(2, cpus=0.9))
        snap = snapshot(ready + cordoned, [group("g1", 2)])
        assert demand_from_snapshot(snap).cpus == 1.0
        d = run(snap, demand_from_snapshot(snap))
        assert d.capacity["cpus"] == 2 and d.utilisation["cpus"] == Fraction(1, 2)

    def test_revocable_and_daemon_pods_are_not_demand(self):
        snap = snapshot(nodes(1, tasks=pods(1, cpus=0.3) + pods(1, cpus=5, revocable=True) + pods(1, daemon=True)))
        assert demand_from_snapshot(snap).cpus == 0.3


def test_idle_reservations_count_as_load():
    """docs/accounting.md's agent: 40 CPUs, 20 reserved of which 5 used, 10 unreserved used → load 30."""
    agent = Node(
        "a1",
        READY,
        Resources(cpus=40, mem=100000),
        group_id="g1",
        reserved=Resources(cpus=20),
        tasks=(Task("r", Resources(cpus=5), from_reservation=True), Task("u", Resources(cpus=10))),
    )
    d = run(snapshot([agent]), request(15))
    assert d.load["cpus"] == 30 and d.utilisation["cpus"] == Fraction(3, 4)
    assert d.target_capacity == 2  # ceil(1 × 75 / 70)


def test_resource_the_pool_does_not_have_is_not_scaled_on():
    d = run(snapshot(nodes(2)), ResourceRequest(cpus=1, gpus=2))
    assert d.target_capacity == 2 and d.most_constrained == "cpus"
    assert "gpus 2 requested but ready nodes have none" in d.explanation


def test_excluded_resources_are_ignored():
    d = run(snapshot(nodes(10)), request(1, 30000), policy(excluded_resources=frozenset({"mem"})))
    assert d.most_constrained == "cpus" and "mem" not in d.utilisation

"""Capacity not yet joined: the scale-up hedge for pending pods, and the hold while nodes join."""

import pytest

from clusterman.core.model import NO_TIME
from clusterman.decision import Action
from clusterman.decision import AutoscalerState
from clusterman.decision import decide
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.joining import JOIN_WAIT_SECONDS
from tests.scaling_builders import NOW
from tests.scaling_builders import ORPHAN
from tests.scaling_builders import apply
from tests.scaling_builders import group
from tests.scaling_builders import nodes
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot

WAITING = pods(3, cpus=1)


class TestHedge:
    @pytest.mark.parametrize(("hedge", "target", "said"), [(0, 10, None), (0.5, 14, "hedge +4"), (1, 18, "hedge +8")])
    def test_a_rise_for_pending_pods_asks_its_share_more(self, hedge, target, said):
        """2 ready 1-cpu nodes asked for 7 cpus: ceil(2 × 350 / 70) = 10, a rise of 8."""
        d = run(snapshot(nodes(2), pending=WAITING), request(7), policy(scale_up_hedge=hedge))
        assert (d.action, d.target_capacity) == (Action.SCALE_UP, target)
        assert (said in d.explanation) if said else ("hedge" not in d.explanation)

    @pytest.mark.parametrize(("weight", "demand", "rise", "hedged"), [
        (1, 2.1, 1, False),  # 2.1 of 2 cpus: ceil(2 × 105 / 70) = 3, one node more
        (1, 2.8, 2, True),  # ceil(2 × 140 / 70) = 4: two nodes more
        (4, 2.1, 4, False),  # 4 units: still one node of weight 4
        (4, 2.8, 8, True),
    ])  # fmt: skip
    def test_a_rise_of_one_node_is_not_hedged(self, weight, demand, rise, hedged):
        d = run(snapshot(nodes(2, weight=weight), pending=WAITING), request(demand), policy(scale_up_hedge=1))
        assert d.target_capacity == 2 * weight + rise * (2 if hedged else 1), d.explanation
        assert ("hedge" in d.explanation) == hedged

    def test_no_pods_waiting_no_hedge(self):
        """A rise the forecast asks for has nobody waiting on the slowest node."""
        d = run(snapshot(nodes(2)), request(7), policy(scale_up_hedge=1))
        assert d.target_capacity == 10

    def test_daemons_and_revocable_work_do_not_count_as_waiting(self):
        others = pods(1, daemon=True) + tuple(pods(1, revocable=True))
        d = run(snapshot(nodes(2), pending=others), request(7), policy(scale_up_hedge=1))
        assert d.target_capacity == 10

    def test_the_rise_counts_from_what_was_asked_before(self):
        """Target 6 already, 4 of it joining: the rule's 10 is a rise of 4, hedged by 4."""
        joining = nodes(4, prefix="j", state=ORPHAN, launched_at=NOW - 60)
        d = run(snapshot(nodes(2) + joining, [group("g1", 6)], pending=WAITING), request(7), policy(scale_up_hedge=1))
        assert d.target_capacity == 14

    def test_once_joined_the_hedge_is_given_back(self):
        """The pods run on the first nodes to join; the next run sizes the pool for the work alone."""
        pol = policy(scale_up_hedge=1)
        snap = snapshot(nodes(2), pending=WAITING)
        first = run(snap, request(7), pol)
        second = run(apply(snap, first, NOW + 300), request(7), pol, first.state, NOW + 300)
        assert (first.target_capacity, second.target_capacity) == (18, 10)
        assert len(second.terminate) == 8  # the empty ones, at once

    def test_the_limits_still_bound_a_hedged_target(self):
        d = run(snapshot(nodes(2), pending=WAITING), request(7), policy(scale_up_hedge=1, max_capacity=12))
        assert d.target_capacity == 12


class TestHoldWhileJoining:
    def joining(self, launched_at: float, demand: float = 0.35, waiting=WAITING, **limits: object):
        """Target 6: one ready node and 5 launched; the sizing now says ceil(1 × 35 / 70) = 1."""
        late = nodes(5, prefix="j", state=ORPHAN, launched_at=launched_at)
        return run(snapshot(nodes(1) + late, [group("g1", 6)], pending=waiting), request(demand), policy(**limits))

    def test_the_target_is_not_lowered_while_pods_wait_for_launched_nodes(self):
        d = self.joining(NOW - 60)
        assert (d.action, d.target_capacity, d.taint, d.terminate) == (Action.NONE, 6, (), ())
        assert "pods wait for 5 launched nodes still joining: keep target 6" in d.explanation

    def test_with_no_pod_waiting_the_target_follows_the_sizing(self):
        d = self.joining(NOW - 60, waiting=())
        assert (d.action, d.target_capacity) == (Action.SCALE_DOWN, 1)

    @pytest.mark.parametrize("launched_at", [NOW - JOIN_WAIT_SECONDS, NO_TIME])
    def test_nodes_that_take_too_long_or_say_no_launch_time_are_not_waited_for(self, launched_at):
        d = self.joining(launched_at)
        assert (d.action, d.target_capacity) == (Action.SCALE_DOWN, 1)

    def test_once_joined_the_target_comes_down(self):
        late = nodes(5, prefix="j", state=ORPHAN, launched_at=NOW - 60)
        snap = snapshot(nodes(1) + late, [group("g1", 6)], pending=WAITING)
        held = run(snap, request(0.35))
        after = run(apply(snap, held, NOW + 120), request(0.35), policy(), held.state, NOW + 120)
        assert (held.target_capacity, after.target_capacity) == (6, 1)

    def test_a_rise_is_not_held(self):
        d = self.joining(NOW - 60, demand=7)
        assert d.target_capacity == 10

    def test_a_pool_above_max_capacity_still_comes_down_to_it(self):
        d = self.joining(NOW - 60, max_capacity=3)
        assert d.target_capacity == 3
        assert "keep target 3" in d.explanation

    def test_a_scale_down_hold_names_itself_instead(self):
        """The capacity-loss guard or a caller's hold keeps the target already, under its own name."""
        late = nodes(5, prefix="j", state=ORPHAN, launched_at=NOW - 60)
        snap = snapshot(nodes(1) + late, [group("g1", 6)], pending=WAITING)
        hold = (Hold(HoldReason.GROUPS_UNREADABLE, "a group could not be read"),)
        d = decide(snap, {"app": request(0.35)}, policy(), AutoscalerState(), NOW, hold)
        assert d.target_capacity == 6 and "still joining" not in d.explanation

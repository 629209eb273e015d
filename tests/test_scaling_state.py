"""The values carried between decisions: the scale lock, the breaker, the capacity-loss memory."""

import pytest

from clusterman.decision import Action
from clusterman.decision import AutoscalerState
from tests.scaling_builders import NOW
from tests.scaling_builders import TAINTED
from tests.scaling_builders import apply
from tests.scaling_builders import group
from tests.scaling_builders import node
from tests.scaling_builders import nodes
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


class TestScaleLock:
    POLICY = policy(scale_up_cool_down_period_seconds=120)

    def scaled_up(self):
        snap = snapshot(nodes(2), [group("g1", 2)])
        d = run(snap, request(5), self.POLICY)
        assert d.target_capacity == 8
        assert (d.state.scale_lock.until, d.state.scale_lock.requested) == (NOW + 120, 8)
        return snap, d

    def test_held_while_the_requested_capacity_joins(self):
        _, d = self.scaled_up()
        waiting = snapshot(nodes(2), [group("g1", 8)])
        held = run(waiting, request(0.1), self.POLICY, d.state, now=NOW + 60)  # demand collapsed: still hold
        assert held.action is Action.NONE and held.target_capacity == 8 and held.taint == ()
        assert "scale lock held until" in held.explanation
        assert held.state.scale_lock == d.state.scale_lock

    def test_released_when_the_capacity_is_ready_or_the_period_ends(self):
        snap, d = self.scaled_up()
        joined = apply(snap, d, NOW + 60)
        assert run(joined, request(5), self.POLICY, d.state, now=NOW + 60).explanation.startswith("cpus 62.5%")
        waiting = snapshot(nodes(2), [group("g1", 8)])
        late = run(waiting, request(5), self.POLICY, d.state, now=NOW + 121)
        assert "scale lock" not in late.explanation and late.state.scale_lock.until == -1.0


class TestBreaker:
    POLICY = policy(scale_up_failure_threshold=2, scale_up_failure_cooldown_seconds=300)

    def test_opens_after_failed_scale_ups_and_probes_after_cooldown(self):
        snap = snapshot(nodes(2), [group("g1", 2)])
        first = run(snap, request(5), self.POLICY)
        assert first.target_capacity == 8 and first.state.breaker.awaiting == 8
        nothing_joined = snapshot(nodes(2), [group("g1", 8)])
        second = run(nothing_joined, request(6), self.POLICY, first.state, now=NOW + 60)
        assert second.target_capacity == 9 and second.state.breaker.failures == 1
        stuck = snapshot(nodes(2), [group("g1", 9)])
        third = run(stuck, request(7), self.POLICY, second.state, now=NOW + 120)
        assert third.target_capacity == 9 and third.action is Action.NONE
        assert "breaker open: 2 scale-ups in a row did not bring their capacity: hold target 9" in third.explanation
        probe = run(stuck, request(7), self.POLICY, third.state, now=NOW + 120 + 300)
        assert probe.target_capacity == 10  # one half-open probe
        probed = snapshot(nodes(2), [group("g1", 10)])
        failed_probe = run(probed, request(8), self.POLICY, probe.state, now=NOW + 480)
        assert failed_probe.target_capacity == 10 and "breaker open" in failed_probe.explanation

    def test_untaint_still_happens_while_open(self):
        state = AutoscalerState(breaker=run(snapshot(nodes(2)), request(5), self.POLICY).state.breaker)
        state = run(snapshot(nodes(2), [group("g1", 8)]), request(6), self.POLICY, state, NOW + 60).state
        members = [*nodes(2), node("t", state=TAINTED, tainted_at=NOW - 10)]
        d = run(snapshot(members, [group("g1", 9)]), request(7), self.POLICY, state, NOW + 120)
        assert d.untaint == ("t",) and "breaker open" in d.explanation

    def test_closes_when_capacity_arrives(self):
        snap = snapshot(nodes(2), [group("g1", 2)])
        d = run(snap, request(5), self.POLICY)
        arrived = apply(snap, d, NOW + 60)
        after = run(arrived, request(7), self.POLICY, d.state, now=NOW + 60)
        assert after.state.breaker.failures == 0 and after.target_capacity == 10


class TestCapacityLossGuard:
    POLICY = policy(prevent_scale_down_after_capacity_loss=True, instance_loss_threshold=2)

    def test_blocks_scale_down_and_kills_after_losing_nodes(self):
        first = run(snapshot(nodes(10)), request(6.9), self.POLICY)
        assert first.action is Action.NONE and len(first.state.memory.joined) == 10
        survivors = nodes(10)[3:]
        d = run(snapshot(survivors, [group("g1", 10)]), request(1), self.POLICY, first.state, NOW + 60)
        assert d.target_capacity == 10 and d.taint == () and d.terminate == ()
        assert "no scale-down: 3 nodes lost since the last run > instance_loss_threshold 2" in d.explanation
        # the next run has nothing new lost: scale-down resumes
        d2 = run(snapshot(survivors, [group("g1", 10)]), request(1), self.POLICY, d.state, NOW + 120)
        assert d2.target_capacity == 2

    def test_nodes_the_autoscaler_terminated_are_not_losses(self):
        first = run(snapshot(nodes(10)), request(0.7), self.POLICY)
        assert len(first.terminate) == 9
        left = [n for n in nodes(10) if n.id not in first.terminate]
        d = run(snapshot(left, [group("g1", 1)]), request(0.7), self.POLICY, first.state, NOW + 60)
        assert "no scale-down" not in d.explanation

    def test_off_by_default_and_keeps_no_memory(self):
        d = run(snapshot(nodes(3)), request(1))
        assert d.state.memory.joined == frozenset()


class TestKeptBetweenRuns:
    def test_json_round_trip(self):
        snap = snapshot(nodes(2), [group("g1", 2)])
        kept = policy(
            scale_up_cool_down_period_seconds=120,
            scale_up_failure_threshold=2,
            prevent_scale_down_after_capacity_loss=True,
        )
        state = run(snap, request(5), kept).state
        assert state.scale_lock.until == NOW + 120 and state.breaker.awaiting == 8 and len(state.memory.joined) == 2
        assert AutoscalerState.from_json(state.as_json()) == state
        assert AutoscalerState.from_json(AutoscalerState().as_json()) == AutoscalerState()

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            (lambda j: j.pop("breaker"), "breaker: expected an object"),
            (lambda j: j["scale_lock"].update(until="soon"), "scale_lock.until: expected a finite number"),
            (lambda j: j["breaker"].update(failures=1.5), "breaker.failures: expected a whole number"),
            (lambda j: j["breaker"].update(awaiting=-1), "breaker.awaiting"),
            (lambda j: j["memory"].update(joined="n1"), "memory.joined: expected a list of node ids"),
        ],
    )
    def test_anything_else_names_the_field(self, change, field):
        data = AutoscalerState().as_json()
        change(data)
        with pytest.raises(ValueError, match=field):
            AutoscalerState.from_json(data)

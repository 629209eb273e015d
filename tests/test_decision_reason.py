"""The decision says, as a value, what decided it: events and metrics group decisions by it."""

from clusterman.decision import AutoscalerState
from clusterman.decision import Reason
from clusterman.decision import decide
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from tests.scaling_builders import NOW
from tests.scaling_builders import node
from tests.scaling_builders import nodes
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


def test_utilisation_decides_the_seed_example():
    decision = run(snapshot(nodes(2)), request(cpus=5))
    assert decision.reason is Reason.UTILISATION and decision.target_capacity == 8


def test_limits_name_themselves():
    assert run(snapshot(nodes(2)), request(cpus=5), policy(max_capacity=4)).reason is Reason.MAX_CAPACITY
    assert run(snapshot(nodes(2)), request(cpus=5), policy(max_weight_to_add=1)).reason is Reason.STEP_LIMIT
    assert run(snapshot(nodes(4)), request(cpus=0.1), policy(min_capacity=3)).reason is Reason.MIN_CAPACITY


def test_an_outside_hold_stops_scale_down_and_says_why():
    snap = snapshot(nodes(10))
    free = decide(snap, {"app": request(cpus=1)}, policy(), AutoscalerState(), NOW)
    assert free.target_capacity < 10 and free.reason is Reason.UTILISATION
    unreadable = (Hold(HoldReason.GROUPS_UNREADABLE, "group g2 unreadable"),)
    held = decide(snap, {"app": request(cpus=1)}, policy(), AutoscalerState(), NOW, unreadable)
    assert held.target_capacity == 10 and held.reason is Reason.HELD
    assert not held.taint and not held.terminate
    assert "group g2 unreadable" in held.explanation
    up = decide(snap, {"app": request(cpus=20)}, policy(), AutoscalerState(), NOW, unreadable)
    assert up.target_capacity > 10  # a hold never stops a scale-up


def test_no_groups():
    assert run(snapshot([node("n1")], groups=[]), request(cpus=5)).reason is Reason.NO_GROUPS

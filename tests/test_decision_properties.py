"""Properties of the decision over generated pools (hypothesis)."""

from fractions import Fraction

from hypothesis import HealthCheck
from hypothesis import assume
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.core.resources import ResourceRequest
from clusterman.decision import Action
from clusterman.decision import demand_from_snapshot
from clusterman.decision.policy import EscalatorRemoval
from tests.scaling_builders import NOW
from tests.scaling_builders import ORPHAN
from tests.scaling_builders import apply
from tests.scaling_builders import group
from tests.scaling_builders import node
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import run
from tests.scaling_builders import snapshot

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SETPOINTS = st.sampled_from([0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0])
hundredths = st.integers(0, 20000).map(lambda n: n / 100)


@st.composite
def pools(draw, internal=False):
    """A homogeneous pool: ``count`` ready nodes, a target near it, some pods, and a request."""
    count = draw(st.integers(1, 30))
    cpus = draw(st.sampled_from([0.5, 1, 1.5, 2, 4]))
    mem = draw(st.sampled_from([1000, 3750.5, 4000]))
    tasks = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    members = [node(f"n{i}", cpus=cpus, mem=mem, launched_at=NOW - 1000 - i,
                    tasks=pods(k, cpus=cpus / 8, mem=mem / 8)) for i, k in enumerate(tasks)]  # fmt: skip
    launched = st.sampled_from([NOW - 60, NOW - 900])  # joining, or past JOIN_WAIT_SECONDS
    late = draw(st.lists(launched, max_size=3))
    members += [node(f"j{i}", cpus=cpus, mem=mem, state=ORPHAN, launched_at=at) for i, at in enumerate(late)]
    target = draw(st.one_of(st.just(count), st.integers(0, 2 * count)))
    pending = pods(draw(st.integers(0, 200)), cpus=cpus / 4, mem=mem / 10)
    snap = snapshot(members, [group("g1", target)], pending)
    if internal:
        req = demand_from_snapshot(snap)
    else:
        cpu_demand = draw(hundredths.filter(lambda v: v <= count * cpus * 3))
        mem_demand = draw(st.one_of(st.none(), st.integers(0, int(count * mem * 2))))
        req = ResourceRequest(cpus=cpu_demand, mem=ResourceRequest().mem if mem_demand is None else mem_demand)
    return snap, req


@st.composite
def policies(draw, wide_steps=True, escalator=None, hedge=True):
    lo = draw(st.integers(0, 40))
    hi = draw(st.integers(lo, 80))
    setpoint = draw(SETPOINTS)
    values = {
        "min_capacity": lo,
        "max_capacity": hi,
        "setpoint": setpoint,
        "target_capacity_margin": draw(st.sampled_from([0, 0.05, 0.1])),
        "scale_up_hedge": draw(st.sampled_from([0, 0.5, 1])) if hedge else 0,
    }
    if not wide_steps:
        values["max_weight_to_add"] = draw(st.integers(1, 20))
        values["max_weight_to_remove"] = draw(st.integers(1, 20))
    if escalator is None:
        escalator = draw(st.booleans())
    if escalator:
        upper = Fraction(draw(st.integers(2, int(setpoint * 100) - 1)), 100)
        lower = Fraction(draw(st.integers(1, int(upper * 100) - 1)), 100)
        slow = draw(st.integers(1, 5))
        values["escalator_removal"] = EscalatorRemoval(
            lower, upper, Fraction(slow), Fraction(slow + draw(st.integers(0, 5)))
        )
    return policy(**values)


@PROPERTY
@given(pools(), policies(wide_steps=False))
def test_target_stays_within_min_and_max(pool, pol):
    """Within [min, max] when the pool started there; otherwise it moves toward that range."""
    snap, req = pool
    d = run(snap, req, pol)

    def distance(x):
        return max(pol.min_capacity - x, x - pol.max_capacity, 0)

    if distance(d.current_target) == 0:
        assert pol.min_capacity <= d.target_capacity <= pol.max_capacity
    else:
        assert distance(d.target_capacity) <= distance(d.current_target)


@PROPERTY
@given(pools(), policies())
def test_after_a_scale_up_utilisation_is_at_most_the_setpoint(pool, pol):
    snap, req = pool
    d = run(snap, req, pol)
    assume(d.action is Action.SCALE_UP and "max_capacity" not in d.explanation)
    after = run(apply(snap, d, NOW + 1), req, pol, d.state, NOW + 1)
    assert after.utilisation[after.most_constrained] <= pol.setpoint


@PROPERTY
@given(st.data(), st.booleans())
def test_a_second_run_on_the_result_does_nothing(data, internal):
    snap, req = data.draw(pools(internal=internal))
    pol = data.draw(policies(escalator=False, hedge=False))  # a hedge is given back once joined
    first = run(snap, req, pol)
    assume("still joining" not in first.explanation)  # held: it lowers the target once they join
    after = apply(snap, first, NOW + 60)
    second = run(after, demand_from_snapshot(after) if internal else req, pol, first.state, NOW + 60)
    assert second.action is Action.NONE, second.explanation
    assert second.target_capacity == first.target_capacity
    assert (second.untaint, second.taint, second.terminate) == ((), (), ())

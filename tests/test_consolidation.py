"""Consolidation (clusterman/decision/consolidate.py): which node is drained, and why not."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.core.model import Node
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision.consolidate import Choice
from clusterman.decision.consolidate import Consolidation
from clusterman.decision.consolidate import consolidate
from clusterman.decision.disruption import DisruptionState
from clusterman.decision.policy import ConsolidationPolicy
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import view_of
from clusterman.decision.slots import Places
from clusterman.decision.slots import largest_in
from tests.scaling_builders import NOW
from tests.scaling_builders import TAINTED
from tests.scaling_builders import node
from tests.scaling_builders import policy
from tests.scaling_builders import snapshot


def sized(*cpus: float, prefix: str = "p", **flags: bool) -> tuple[Task, ...]:
    return tuple(Task(f"{prefix}{i}-{c:g}", Resources(cpus=c), **flags) for i, c in enumerate(cpus))


def pool(*layout: tuple[float, ...], **flags: bool) -> list[Node]:
    """8-CPU nodes n0, n1, ... launched in that order, each running pods of the CPUs given."""
    return [
        node(f"n{i}", cpus=8, mem=0, launched_at=NOW - 1000 + i, tasks=sized(*cpus, prefix=f"n{i}p", **flags))
        for i, cpus in enumerate(layout)
    ]


def scaling(reserve: int = 1, band: int = 0, margin: float = 0, **consolidation: object) -> ScalingPolicy:
    settings = {"enabled": True, "consolidate_after_seconds": 0.0, "evictions_per_hour": 100, "surplus": 0}
    settings.update(consolidation)
    return replace(
        policy(slot_reserve=reserve, slot_reserve_band=band, target_capacity_margin=margin),
        consolidation=ConsolidationPolicy(**settings),  # type: ignore[arg-type]
    )


def plan(
    members: list[Node],
    asked: float | None,
    pol: ScalingPolicy | None = None,
    state: DisruptionState | None = None,
    busy: str = "",
) -> Consolidation:
    view = view_of(snapshot(members))
    slot = largest_in(view)
    places = Places(view, slot) if slot is not None and view.ready else None
    wanted = None if asked is None else Fraction(asked)
    return consolidate(view, places, pol or scaling(), wanted, state or DisruptionState(), NOW, busy)


FRAGMENTED = ((4, 2), (4, 2), (1, 1), ())  # 2 + 2 free in pieces, n2 one place, n3 two


def chosen(c: Consolidation) -> list[tuple[str, str]]:
    return [(x.choice.value, x.node) for x in c.chosen]


def test_a_node_whose_pods_fit_in_the_gaps_is_removed_and_the_plan_says_where_they_go():
    c = plan(pool(*FRAGMENTED), asked=3)
    assert chosen(c) == [("remove", "n2")]
    (x,) = c.chosen
    assert dict(x.moves) == {"n2p0-1": "n0", "n2p1-1": "n0"}  # first fit in launch order: the first gap
    assert (x.places_before, x.places_after) == (3, 2)
    assert "remove n2 (2 pods onto n0; 3 → 2 free 4-CPU slots; saves 1 units)" in c.lines()[0]


def test_most_allocated_puts_the_pods_on_the_busiest_node_with_room():
    # n0 has 2 free, n1 3 free: first fit takes n0, MostAllocated too (7/8 with the pod against 6/8)
    members = pool((4, 2), (4, 1), (1,), ())
    first = plan(members, asked=3, pol=scaling())
    packed = plan(members, asked=3, pol=scaling(placement="most_allocated"))
    assert dict(first.chosen[0].moves) == dict(packed.chosen[0].moves) == {"n2p0-1": "n0"}
    # with n0 later in launch order than n1, first fit moves the pod to n1, MostAllocated still to n0
    later = [replace(members[0], launched_at=NOW), *members[1:]]
    assert dict(plan(later, asked=3, pol=scaling()).chosen[0].moves) == {"n2p0-1": "n1"}
    assert dict(plan(later, asked=3, pol=scaling(placement="most_allocated")).chosen[0].moves) == {"n2p0-1": "n0"}


@pytest.mark.parametrize(
    ("case", "layout", "asked", "pol", "expected", "note"),
    [
        ("pods fit nowhere", ((4, 4), (4, 4), (4,)), 2, scaling(), [], "stays: its 4-CPU pod"),
        ("the reserve and its band kept", FRAGMENTED, 3, scaling(reserve=2, band=1), [], "no node to consolidate"),
        ("the signals ask for every node", FRAGMENTED, 4, scaling(), [], "no node to consolidate"),
        ("a removal smaller than the margin", FRAGMENTED, 3, scaling(margin=0.3), [], "no node to consolidate"),
        ("too few places: drain and keep", ((4, 2), (4, 2), (2, 1, 1), (1,)), 4, scaling(reserve=3),
         [("keep", "n3")], ""),
        ("no place left while it drains", ((4, 2), (4, 2), (1,)), 3, scaling(reserve=3),
         [], "no node to consolidate"),
        # surplus: 4 ready units against 2 asked and the reserve's 0.5 (one 4-CPU place of 2 a unit)
        ("a surplus above the asked and the reserve", FRAGMENTED, 2, scaling(surplus=1), [("remove", "n2")], ""),
        ("less surplus than asked: nothing", FRAGMENTED, 2, scaling(surplus=2), [], "less than 2 units above"),
        ("a removal keeps the reserve's room: kept instead", FRAGMENTED, 3, scaling(surplus=Fraction(1, 2)),
         [("keep", "n2")], ""),
        ("no drain to keep without the surplus", ((4, 2), (4, 2), (2, 1, 1), (1,)), 4, scaling(reserve=3, surplus=1),
         [], "less than 1 units above"),
    ],
)  # fmt: skip
def test_the_choice(case, layout, asked, pol, expected, note):
    c = plan(pool(*layout), asked=asked, pol=pol)
    assert chosen(c) == expected, case
    assert note in c.note, case


def test_drain_and_keep_makes_more_places_than_its_pods_take():
    c = plan(pool((4, 2), (4, 2), (2, 1, 1), (1,)), asked=4, pol=scaling(reserve=3))
    (x,) = c.chosen
    assert x.choice is Choice.KEEP and dict(x.moves) == {"n3p0-1": "n0"}
    assert (x.places_before, x.places_after) == (2, 3)
    assert c.gained == 1 and c.removed == 0
    assert c.state.kept == {"n3": NOW}


@pytest.mark.parametrize(
    ("flags", "allowed"),
    [
        ({"safe_to_evict": False}, False),
        ({"do_not_disrupt": True}, False),
        ({"controller": False}, False),
        ({"local_storage": True}, False),
    ],
)
def test_pods_that_may_not_move_keep_their_node(flags, allowed):
    members = pool(*FRAGMENTED)
    members[2] = replace(members[2], tasks=sized(1, 1, prefix="n2p", **flags))
    c = plan(members, asked=3)
    assert ("remove", "n2") not in chosen(c)
    assert "n2" not in dict(c.state.since)  # never a candidate


def test_local_storage_moves_when_the_pool_says_so():
    members = pool(*FRAGMENTED)
    members[2] = replace(members[2], tasks=sized(1, 1, prefix="n2p", local_storage=True))
    assert chosen(plan(members, asked=3, pol=scaling(evict_local_storage=True))) == [("remove", "n2")]


def test_the_budget():
    members = pool(*FRAGMENTED)
    # the evictions of the last hour, and the two pods n2 would add
    spent = DisruptionState(evictions=((NOW - 600, "n9", 9),))
    c = plan(members, asked=3, pol=scaling(evictions_per_hour=10), state=spent)
    assert chosen(c) == [] and c.note == "budget: 9 of 10 evictions this hour, 2 more asked"
    old = DisruptionState(evictions=((NOW - 3600, "n9", 9),))  # an hour ago: spent no more
    assert chosen(plan(members, asked=3, pol=scaling(evictions_per_hour=10), state=old)) == [("remove", "n2")]
    # a node already leaving counts against the share of nodes disrupted at once (at least one)
    leaving = [*members, node("t", cpus=8, mem=0, state=TAINTED, tainted_at=NOW - 60, tasks=sized(1, prefix="t"))]
    c = plan(leaving, asked=3, pol=scaling(max_disrupted_share=Fraction(1, 10)))
    assert chosen(c) == [] and c.note == "budget: 1 of 1 nodes disrupted at once"
    # one node with pods per run, and empty ones with it within the share of nodes disrupted at once
    six = pool((4, 2), (4, 2), (1,), (1,), (), ())
    c = plan(six, asked=2, pol=scaling(drains_per_run=1, max_disrupted_share=Fraction(1, 2)))
    assert chosen(c) == [("remove", "n3"), ("remove", "n5"), ("remove", "n4")]  # the newest of two alike
    assert c.budget is not None and c.budget.drains == 1 and "1 of 1 drains this run" in c.budget.refuses(1)
    c = plan(six, asked=2, pol=scaling(drains_per_run=1, max_disrupted_share=Fraction(1, 3)))
    assert chosen(c) == [("remove", "n3"), ("remove", "n5")]


def test_a_node_is_drained_only_once_it_has_been_a_candidate_for_consolidate_after():
    pol = scaling(consolidate_after_seconds=600.0)
    first = plan(pool(*FRAGMENTED), asked=3, pol=pol)
    assert chosen(first) == [] and "n2 a candidate for 0s < consolidate_after 600s" in first.note
    assert first.state.candidate_since("n2") == NOW
    waited = DisruptionState(since=(("n2", NOW - 600),))
    assert chosen(plan(pool(*FRAGMENTED), asked=3, pol=pol, state=waited)) == [("remove", "n2")]


def test_nothing_is_looked_at_while_the_pool_is_in_flight():
    followed = DisruptionState(since=(("n2", NOW - 60),))
    c = plan(pool(*FRAGMENTED), asked=3, busy="pods pending", state=followed)
    assert chosen(c) == [] and c.note == "pods pending"
    assert c.state == followed  # what the last runs found stays as it was


def test_off_by_default():
    c = plan(pool(*FRAGMENTED), asked=3, pol=policy(slot_reserve=1))
    assert c.chosen == () and c.budget is None and c.as_json() is None


# --- properties over generated pools (hypothesis) ---------------------------------------------------

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SIZES = (0.5, 1.0, 2.0, 4.0)


@st.composite
def situations(draw):
    """8-CPU nodes filled with pods of several sizes (some nodes leaving), what the signals ask
    for, a reserve, a placement rule and a budget partly spent."""
    count = draw(st.integers(1, 12))
    members = []
    for i in range(count):
        room, cpus = 8.0, []
        for size in draw(st.lists(st.sampled_from(SIZES), max_size=10)):
            if size <= room:
                cpus.append(size)
                room -= size
        leaving = draw(st.integers(0, 9)) == 0
        flags = {"controller": draw(st.integers(0, 9)) > 0}
        n = node(f"n{i}", cpus=8, mem=0, launched_at=NOW - 1000 + draw(st.integers(0, 50)),
                 tasks=sized(*cpus, prefix=f"n{i}p", **flags))  # fmt: skip
        members.append(replace(n, state=TAINTED, tainted_at=NOW - 60) if leaving else n)
    pol = scaling(
        reserve=draw(st.integers(0, 3)),
        band=draw(st.integers(0, 2)),
        margin=draw(st.sampled_from([0, 0.05, 0.2])),
        placement=draw(st.sampled_from(["first_fit", "most_allocated"])),
        drains_per_run=draw(st.integers(1, 3)),
        max_disrupted_share=Fraction(draw(st.integers(0, 10)), 10),
        evictions_per_hour=draw(st.integers(0, 30)),
    )
    spent = DisruptionState(evictions=((NOW - 100, "n9", draw(st.integers(0, 30))),))
    asked = draw(st.one_of(st.none(), st.integers(0, count)))
    return members, asked, pol, spent


def outcome(members, asked, pol, spent):
    view = view_of(snapshot(members))
    slot = largest_in(view)
    places = Places(view, slot) if slot is not None and view.ready else None
    c = consolidate(view, places, pol, None if asked is None else Fraction(asked), spent, NOW)
    return view, places, c


@PROPERTY
@given(situations())
def test_every_pod_of_a_drained_node_has_a_place_in_the_prediction(situation):
    view, _, c = outcome(*situation)
    ready = {n.id: n for n in view.ready}
    gone = {x.node for x in c.chosen}
    load = {n.id: n.usage.allocated_unreserved.cpus for n in view.ready}
    for leaving in view.tainted:  # their work needs a home too, though it is not this plan's
        load["(leaving)"] = load.get("(leaving)", 0) + leaving.usage.allocated_unreserved.cpus
    for x in c.chosen:
        pods = {t.id: t.requests.cpus for t in ready[x.node].workload()}
        assert set(dict(x.moves)) == set(pods), "every pod has a predicted node"
        for pod, to in x.moves:
            assert to in ready and to not in gone, "onto a ready node that stays"
            load[to] += pods[pod]
    assert all(load[n] <= ready[n].allocatable.cpus + 1e-9 for n in ready if n not in gone)


def free_places(members, moved_out, moved_in, removed, slot_cpus):
    total = 0
    for n in members:
        if n.state is TAINTED or n.id in removed:
            continue
        used = n.usage.allocated_unreserved.cpus - moved_out.get(n.id, 0) + moved_in.get(n.id, 0)
        total += int((8 - used + 1e-9) // slot_cpus)
    return total


@PROPERTY
@given(situations())
def test_it_never_leaves_fewer_places_than_the_reserve(situation):
    members, asked, pol, spent = situation
    view, places, c = outcome(members, asked, pol, spent)
    if not c.chosen:
        return
    assert places is not None
    slot_cpus = places.slot[0] / 1e6
    by_id = {n.id: n for n in members}
    moved_out, moved_in = {}, {}
    for x in c.chosen:
        pods = {t.id: t.requests.cpus for t in by_id[x.node].workload()}
        moved_out[x.node] = sum(pods.values())
        for pod, to in x.moves:
            moved_in[to] = moved_in.get(to, 0) + pods[pod]
    removed = {x.node for x in c.chosen if x.choice is Choice.REMOVE}
    wanted = places.wanted(pol.slot_reserve, pol.slot_reserve_fraction)
    before, after = c.chosen[0].places_before, c.chosen[-1].places_after
    if removed:
        assert after >= wanted + pol.slot_reserve_band
    else:
        assert after > before  # a node drained to be kept makes places
    assert after >= min(before, wanted)
    if not view.tainted:  # counted again on the pool as the plan leaves it (a leaving node's pods land too)
        assert before == free_places(members, {}, {}, set(), slot_cpus)
        assert after == free_places(members, moved_out, moved_in, removed, slot_cpus)


@PROPERTY
@given(situations())
def test_it_never_exceeds_the_budget(situation):
    members, asked, pol, spent = situation
    view, _, c = outcome(members, asked, pol, spent)
    budget = pol.consolidation
    evicted = sum(len(x.moves) for x in c.chosen)
    assert not c.chosen or spent.evicted(NOW) + evicted <= budget.evictions_per_hour
    assert sum(1 for x in c.chosen if x.moves) <= budget.drains_per_run
    nodes = len(view.ready) + len(view.tainted)
    at_once = max(1, int(budget.max_disrupted_share * nodes))
    assert not c.chosen or len(view.tainted) + len(c.chosen) <= at_once
    assert all(x.choice is Choice.KEEP or asked is not None for x in c.chosen)
    removed = sum(1 for x in c.chosen if x.choice is Choice.REMOVE)
    assert asked is None or removed == 0 or len(view.ready) + len(view.tainted) - removed >= asked


# --- as part of the decision -------------------------------------------------------------------------


def decide_on(members: list[Node], demand: float, pol: ScalingPolicy, state=None, now: float = NOW):
    from clusterman.decision import AutoscalerState
    from tests.scaling_builders import request
    from tests.scaling_builders import run

    return run(snapshot(members), request(cpus=demand), pol, state or AutoscalerState(), now)


def test_a_removal_lowers_its_group_target_and_taints_the_node_it_chose():
    members = pool(*FRAGMENTED)
    used = sum(n.usage.allocated_unreserved.cpus for n in members)  # 14 CPUs: 3 nodes at the setpoint 70%
    d = decide_on(members, used, replace(scaling(reserve=2), setpoint=Fraction(7, 10)))
    assert d.reason.value == "consolidation" and d.action.value == "scale_down"
    assert d.taint == ("n2",) and d.group_targets == {"g1": 3}
    assert "consolidation: remove n2 (2 pods onto n0" in d.explanation
    assert d.node_reasons["n2"].startswith("taint: consolidation: remove n2")
    assert d.as_json()["consolidation"]["chosen"][0]["moves"] == {"n2p0-1": "n0", "n2p1-1": "n0"}


def test_nothing_is_drained_within_consolidate_after_of_a_scale_up():
    members = pool(*FRAGMENTED)
    pol = replace(scaling(reserve=2, consolidate_after_seconds=600.0), setpoint=Fraction(7, 10))
    grown = decide_on(members, 30, pol)  # 30 CPUs at 70% ask for more nodes
    assert grown.action.value == "scale_up" and grown.state.disruption.grew_at == NOW
    waited = replace(grown.state, disruption=replace(grown.state.disruption, since=(("n2", NOW - 900),)))
    soon = decide_on(members, 14, pol, waited, NOW + 300)
    assert soon.taint == () and "the pool grew 300s ago < consolidate_after 600s" in soon.consolidation.note
    later = decide_on(members, 14, pol, waited, NOW + 600)
    assert later.taint == ("n2",)


def test_a_run_held_by_the_scale_lock_keeps_what_consolidation_remembers():
    """The budget spent, the nodes being kept and the time the pool grew outlive a held run."""
    members = pool(*FRAGMENTED)
    pol = replace(
        scaling(reserve=2, consolidate_after_seconds=600.0),
        setpoint=Fraction(7, 10),
        scale_up_cool_down_period_seconds=300.0,
    )
    grown = decide_on(members, 30, pol)
    assert grown.action.value == "scale_up" and grown.state.scale_lock.until > NOW
    spent = replace(grown.state.disruption, evictions=((NOW, "n9", 3),), keeping=(("n3", NOW),))
    held = decide_on(members, 30, pol, replace(grown.state, disruption=spent), NOW + 60)
    assert held.reason.value == "scale_lock", held.explanation
    assert held.state.disruption == spent


def test_a_node_drained_to_be_kept_comes_back_once_empty_and_not_before():
    from clusterman.decision import AutoscalerState

    members = pool((4, 2), (4, 2), (2, 1, 1), (1,))
    pol = replace(scaling(reserve=3), setpoint=Fraction(1))
    first = decide_on(members, 19, pol)
    assert first.taint == ("n3",) and first.target_capacity == 4 and first.action.value == "none"
    assert first.state.disruption.kept == {"n3": NOW}
    # a disruption budget refused its pod: the node stays tainted, and nothing else starts
    refused = [*members[:3], replace(members[3], state=TAINTED, tainted_at=NOW)]
    later = decide_on(refused, 19, pol, first.state, NOW + 60)
    assert later.untaint == () and later.terminate == () and later.consolidation.chosen == ()
    assert "n3 is being drained to be kept" in later.consolidation.note
    # its pod went: it comes back, the pool keeps its target
    drained = [replace(members[0], tasks=(*members[0].tasks, *members[3].tasks)), *members[1:3],
               replace(members[3], state=TAINTED, tainted_at=NOW, tasks=())]  # fmt: skip
    back = decide_on(drained, 19, pol, later.state, NOW + 120)
    assert back.untaint == ("n3",) and back.target_capacity == 4
    assert back.state.disruption.kept == {}
    # a pod that never leaves: given up on after half an hour, the node is untainted as any other
    stuck = decide_on(refused, 19, pol, later.state, NOW + 1860)
    assert stuck.untaint == ("n3",)
    # and it rests for an hour: not tainted again at once for the same pod to refuse
    assert stuck.state.disruption.resting(NOW + 1860) == {"n3"}
    resting = decide_on(members, 19, pol, stuck.state, NOW + 1920)
    assert "n3" not in resting.taint and resting.state.disruption.resting(NOW + 1920) == {"n3"}
    rested = decide_on(members, 19, pol, stuck.state, NOW + 1860 + 3600)
    assert rested.taint == ("n3",) and rested.state.disruption.given_up == ()
    assert isinstance(AutoscalerState.from_json(stuck.state.as_json()), AutoscalerState)


@pytest.mark.parametrize("change", [{"enabled": False}, {"evictions_per_hour": 0}])
def test_a_drain_to_keep_is_given_up_when_a_reload_no_longer_allows_it(change):
    """Consolidation turned off, or its eviction budget lowered below what was spent: the rest of
    the drain would be evictions the configuration no longer allows. The node is untainted at
    once (its pod stays) and no longer remembered."""
    members = pool((4, 2), (4, 2), (2, 1, 1), (1,))
    pol = replace(scaling(reserve=3), setpoint=Fraction(1))
    first = decide_on(members, 19, pol)
    assert first.taint == ("n3",)
    refused = [*members[:3], replace(members[3], state=TAINTED, tainted_at=NOW)]
    reloaded = replace(pol, consolidation=replace(pol.consolidation, **change))
    after = decide_on(refused, 19, reloaded, first.state, NOW + 60)
    assert after.untaint == ("n3",) and after.taint == () and after.target_capacity == 4
    assert after.state.disruption.kept == {}


def test_the_state_it_keeps_survives_a_restart():
    from clusterman.decision import AutoscalerState

    state = AutoscalerState(
        disruption=DisruptionState(
            since=(("a", NOW - 5),),
            evictions=((NOW - 9, "d", 3),),
            keeping=(("b", NOW),),
            grew_at=NOW - 30,
            given_up=(("c", NOW - 60),),
        )
    )
    assert AutoscalerState.from_json(state.as_json()) == state
    old = state.as_json()
    del old["disruption"]  # kept by a version before consolidation
    assert AutoscalerState.from_json(old).disruption == DisruptionState()
    with pytest.raises(ValueError, match=r"disruption\.evictions"):
        AutoscalerState.from_json({**state.as_json(), "disruption": {"evictions": [["x", 1]]}})


# --- the prediction against the simulated scheduler ------------------------------------------------


class SimulatedPool:
    """Six 8-CPU nodes launched one a minute, each filled by its minute's pods (so they can go
    nowhere else), some of which leave at minute 10: n0 has 2 CPUs free, n1 0.5, n2 3, n3 0.5, n4
    runs one 0.5-CPU pod, n5 is empty. The simulated scheduler places pods with ``rule``."""

    LAYOUT = (
        ((4, False), (1, False), (1, False), (2, True)),
        ((4, False), (2, False), (1.5, False), (0.5, True)),
        ((4, False), (1, False), (3, True)),
        ((4, False), (3.5, False), (0.5, True)),
        ((0.5, False), (4, True), (3.5, True)),
        ((4, True), (4, True)),
    )

    def __init__(self, rule: str) -> None:
        from clusterman.cloud.groups_view import GroupsCloudView
        from clusterman.cloud.simulated_group import SimulatedGroup
        from clusterman.cloud.simulated_group import SimulatedMarket
        from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
        from clusterman.cluster.simulated_scheduler import SimulatedConnector
        from clusterman.cluster.simulated_scheduler import SimulatedScheduler
        from clusterman.cluster.simulated_scheduler import TaskList
        from clusterman.cluster.simulated_scheduler import WorkItem

        work = [
            WorkItem(f"n{m}p{k}", Resources(cpus=cpus), start=60.0 * m + 30, end=600.0 if leaves else math.inf)
            for m, pods in enumerate(self.LAYOUT)
            for k, (cpus, leaves) in enumerate(pods)
        ]
        self.now = 0.0
        self.group = SimulatedGroup("g1", [SimulatedMarket("m", "z", 1.0, Resources(cpus=8))], lambda: self.now)
        self.scheduler = SimulatedScheduler(TaskList(work), placement=rule)
        self.cloud = GroupsCloudView([self.group])
        self.connector = SimulatedConnector(self.cloud, self.scheduler)
        self.lifecycle = SimulatedLifecycle(self.scheduler)
        for minute in range(len(self.LAYOUT)):
            self.now = 60.0 * minute
            self.group.set_target_capacity(minute + 1)
            self.connector.snapshot(self.now + 30)
        self.now = 900.0
        self.ids = [n.id for n in sorted(self.connector.snapshot(self.now).nodes, key=lambda n: n.launched_at)]


def consolidating(rule: str = "first_fit") -> ScalingPolicy:
    """The reserve (2 places, on n4 and n5) holds back the scale-down to 5 nodes 34 CPUs ask for."""
    return replace(scaling(reserve=2, placement=rule), setpoint=Fraction(95, 100))


@pytest.mark.parametrize(("rule", "onto"), [("first_fit", 0), ("most_allocated", 1)])
def test_the_simulated_scheduler_puts_evicted_pods_where_the_plan_said(rule, onto):
    """The decision drains n4; the simulated scheduler places its pod again with the same rule,
    where the plan said: first fit on the first node with room, MostAllocated on the fullest."""
    from clusterman.decision import AutoscalerState
    from clusterman.decision import decide
    from clusterman.run.apply import apply
    from clusterman.run.permit import Permit
    from tests.scaling_builders import request

    pool = SimulatedPool(rule)
    snap = pool.connector.snapshot(pool.now)
    d = decide(snap, {"app": request(cpus=34)}, consolidating(rule), AutoscalerState(), pool.now)
    assert [(c.choice, c.node) for c in d.consolidation.chosen] == [(Choice.REMOVE, pool.ids[4])], d.explanation
    assert dict(d.consolidation.chosen[0].moves) == {"n4p0": pool.ids[onto]}
    apply(d, snap, {"g1": pool.group}, pool.lifecycle, pool.now, Permit(pool.now))
    after = pool.connector.snapshot(pool.now + 60)
    assert [n.id for n in after.nodes for t in n.tasks if t.id == "n4p0"] == [pool.ids[onto]]
    assert after.pending == ()


def test_a_run_records_the_consolidation_as_events_and_counters():
    from clusterman.events.exporter import AutoscalerMetrics
    from clusterman.events.publisher import EventPublisher
    from clusterman.events.recorder import Recorder
    from clusterman.events.ring import EventRing
    from clusterman.run.cycle import Cycle
    from clusterman.run.demand_source import InternalDemand

    pool = SimulatedPool("first_fit")
    ring = EventRing(1000)
    publisher = EventPublisher(ring)
    metrics = AutoscalerMetrics("c", "p")
    cycle = Cycle(
        connector=pool.connector,
        cloud=pool.cloud,
        lifecycle=pool.lifecycle,
        demand=InternalDemand(),  # 26.5 CPUs running: 4 nodes at 95%
        policy=consolidating(),
        recorder=Recorder(publisher, metrics, "p", lambda: int(pool.now * 1e9)),
    )
    report = cycle.run_once(pool.now)
    assert "consolidation: remove" in report.line()
    publisher.flush()
    events = {r.event.detail.name: r.event for r in ring.read(0, 100).records}
    assert events["DECISION_CONSOLIDATION"].message.endswith(report.decision.explanation)
    node = events["NODE_CONSOLIDATE"]
    assert node.object_id == pool.ids[4] and node.reference_id == "g1"
    assert (
        node.message
        == f"consolidation: remove {pool.ids[4]} (1 pods onto {pool.ids[0]}; 3 → 2 free 4-CPU slots; saves 1 units)"
    )
    text = metrics.exposition().decode()
    assert 'clusterman_consolidated_nodes_total{choice="remove",cluster="c",pool="p"} 1.0' in text
    assert 'clusterman_evictions_total{cluster="c",pool="p"} 1.0' in text


def test_the_plan_says_when_a_smaller_instance_type_would_hold_a_nodes_pods():
    from clusterman.core.model import Offer
    from tests.scaling_builders import group

    offers = (
        Offer("m5.2xlarge", 2, Resources(cpus=8, mem=32000)),
        Offer("m5.xlarge", 1, Resources(cpus=4, mem=16000)),
        Offer("m5.large", 0.5, Resources(cpus=2, mem=8000)),
    )
    members = [
        replace(n, weight=2, instance_type="m5.2xlarge", allocatable=Resources(cpus=7.5, mem=30000))
        for n in pool((4, 2), (4, 2), (2, 1), (4,))
    ]
    view = view_of(snapshot(members, [group("g1", 8, offers=offers)]))
    places = Places(view, largest_in(view))
    c = consolidate(view, places, scaling(reserve=4), Fraction(8), DisruptionState(), NOW)
    # n2 runs 3 CPUs: an m5.xlarge gives its pods 4 × 7.5 / 8 = 3.75 CPUs; an m5.large 1.88, too few
    assert (
        c.replace
        == "n2 (m5.2xlarge, 2 units): its 2 pods would fit on a m5.xlarge (1 units): replacing it would save 1 units"
    )
    assert c.as_json()["replace"] == c.replace
    # no smaller type offered: nothing to say
    one = view_of(snapshot(members, [group("g1", 8, offers=offers[:1])]))
    assert (
        consolidate(one, Places(one, largest_in(one)), scaling(reserve=4), Fraction(8), DisruptionState(), NOW).replace
        == ""
    )


# --- what a choice spends, taken back when its node was never tainted ------------------------------


def test_untaken_takes_back_exactly_what_choosing_the_nodes_now_spent():
    state = DisruptionState(
        evictions=((NOW - 60, "a", 2), (NOW, "a", 3), (NOW, "b", 4), (NOW - 60, "", 5)),
        keeping=(("a", NOW), ("c", NOW), ("d", NOW - 60)),
    )
    back = state.untaken(["a", "d"], NOW)
    # a's earlier drain and d's earlier keep were carried out: they still count
    assert back.evictions == ((NOW - 60, "a", 2), (NOW, "b", 4), (NOW - 60, "", 5))
    assert back.keeping == (("c", NOW), ("d", NOW - 60))
    assert back.evicted(NOW) == 11 and state.evicted(NOW) == 14
    assert state.untaken([], NOW) == state


def test_the_kept_state_of_the_version_before_names_no_node_and_still_counts():
    from clusterman.decision import AutoscalerState

    disruption = {"evictions": [[NOW - 60, 2], [NOW - 30, 3.0]], "keeping": {"b": NOW}}
    old = {**AutoscalerState().as_json(), "disruption": disruption}  # as the version before wrote it
    state = AutoscalerState.from_json(old).disruption
    assert state.evictions == ((NOW - 60, "", 2), (NOW - 30, "", 3)) and state.evicted(NOW) == 5
    assert state.untaken(["b"], NOW).evictions == state.evictions  # no node named: never taken back
    mixed = {"evictions": [[NOW - 60, 2], [NOW, "n1", 1]]}
    again = DisruptionState.from_json(DisruptionState.from_json(mixed).as_json())
    assert again.evictions == ((NOW - 60, "", 2), (NOW, "n1", 1))
    for bad in ([NOW, 1, 2], [NOW, "n1"], [NOW, "n1", 1, 2], [NOW, "n1", -1]):
        with pytest.raises(ValueError, match=r"disruption\.evictions"):
            DisruptionState.from_json({"evictions": [bad]})


# --- a choice whose taint's outcome is unknown, settled by the next run's snapshot ----------------


def chosen_state() -> DisruptionState:
    """a and b chosen at NOW (a to remove with 2 pods, b to keep with 3), both candidates since
    NOW - 700; c a candidate that stays one; d drained to be kept an hour ago; e removed a minute ago."""
    before = DisruptionState(
        since=(("a", NOW - 700), ("b", NOW - 700), ("c", NOW - 100)),
        evictions=((NOW - 60, "e", 1),),
        keeping=(("d", NOW - 1200),),
    )
    return before.after(NOW, ["a", "b", "c"], {"a": 2, "b": 3}, ["b"])


def test_a_choice_is_unknown_until_the_run_learns_its_taint():
    state = chosen_state()
    assert state.unknown == (("a", NOW, NOW - 700), ("b", NOW, NOW - 700))
    assert state.evicted(NOW) == 6 and state.kept == {"b": NOW, "d": NOW - 1200}
    assert state.candidate_since("a") is None and state.candidate_since("c") == NOW - 100
    done = state.confirmed(["a", "b"])
    assert done.unknown == () and done.evictions == state.evictions and done.keeping == state.keeping
    assert state.confirmed(["x"]) is state
    # an entry left unknown for an hour (no run settled it) no longer matters: dropped
    later = state.after(NOW + 3600, [], {}, [])
    assert later.unknown == () and later.evicted(NOW + 3600) == 0


def test_untaken_gives_a_node_back_its_candidate_time():
    """It was a candidate all along: the next run may choose it without waiting consolidate_after again."""
    back = chosen_state().untaken(["a"], NOW)
    assert back.candidate_since("a") == NOW - 700 and back.candidate_since("b") is None
    assert back.evictions == ((NOW - 60, "e", 1), (NOW, "b", 3)) and back.unknown == (("b", NOW, NOW - 700),)
    # not chosen at that time: nothing taken back, no time restored
    assert chosen_state().untaken(["a"], NOW - 1) == chosen_state()


@pytest.mark.parametrize("b_found", ["tainted", "untainted", "gone"])
@pytest.mark.parametrize("a_found", ["tainted", "untainted", "gone"])
def test_the_next_run_settles_an_unknown_taint_from_its_snapshot(a_found, b_found):
    """Found tainted: the taint landed, the spend stands (a node to remove stays one, a node to
    keep stays kept). Found untainted: it did not, the spend is taken back and the node is a
    candidate since its old time. Gone: nothing was evicted for it, the spend is taken back."""
    found = {"a": a_found, "b": b_found}
    present = {"c", "d", "e", *(n for n, f in found.items() if f != "gone")}
    tainted = {"d", *(n for n, f in found.items() if f == "tainted")}
    settled, how = chosen_state().settled(tainted, present)
    assert how == found and settled.unknown == ()
    evictions = [(NOW - 60, "e", 1)]
    evictions += [(NOW, "a", 2)] if a_found == "tainted" else []
    evictions += [(NOW, "b", 3)] if b_found == "tainted" else []
    assert list(settled.evictions) == evictions
    assert settled.kept == {"d": NOW - 1200, **({"b": NOW} if b_found == "tainted" else {})}
    for n, f in found.items():
        assert settled.candidate_since(n) == (NOW - 700 if f == "untainted" else None), n
    assert settled.candidate_since("c") == NOW - 100
    assert settled.settled(tainted, present) == (settled, {})


def test_the_state_written_by_the_version_before_loads_and_the_unknown_survives_a_restart():
    """The version before wrote no ``unknown``: its state loads with none; the new one round-trips."""
    from clusterman.decision import AutoscalerState

    before = {
        "since": {"c": NOW - 100},
        "evictions": [[NOW - 60, "e", 1], [NOW - 90, 4]],
        "keeping": {"d": NOW - 1200},
        "grew_at": None,
        "given_up": {},
    }
    old = DisruptionState.from_json(before)
    assert old.unknown == () and old.evicted(NOW) == 5 and old.kept == {"d": NOW - 1200}
    state = AutoscalerState(disruption=chosen_state())
    assert state.as_json()["disruption"]["unknown"] == {"a": [NOW, NOW - 700], "b": [NOW, NOW - 700]}
    assert AutoscalerState.from_json(state.as_json()) == state
    for bad in ({"a": NOW}, {"a": [NOW]}, {"a": [NOW, -1]}, {"a": ["x", NOW]}, ["a"]):
        with pytest.raises(ValueError, match=r"disruption\.unknown"):
            DisruptionState.from_json({"unknown": bad})


class SlowStore:
    """A state store whose writes of the autoscaler state take ``seconds`` of the run's clock (a
    slow or loaded API), or fail from the ``fail_from``-th on (``writes`` counts them)."""

    def __init__(self, store: object, pool: SimulatedPool) -> None:
        self.store, self.pool = store, pool
        self.seconds = 0.0
        self.writes = 0
        self.fail_from = math.inf

    def get(self, *args: object) -> object:
        return self.store.get(*args)  # type: ignore[attr-defined]

    def put(self, item: object) -> None:
        from clusterman.state.carried import AUTOSCALER_STATE
        from clusterman.state.store import StateError

        if item.state != AUTOSCALER_STATE:  # type: ignore[attr-defined]  # the groups' targets
            self.store.put(item)  # type: ignore[attr-defined]
            return
        self.writes += 1
        if self.writes >= self.fail_from:
            raise StateError("the state store refused the write")
        self.pool.elapsed += self.seconds
        self.store.put(item)  # type: ignore[attr-defined]


def consolidating_cycle(
    pool: SimulatedPool, store: SlowStore, budget: float | None = None, reserve: int = 2, after: float = 0.0
):
    from clusterman.core.config import PoolIdentity
    from clusterman.core.config import Scheduler
    from clusterman.events.exporter import AutoscalerMetrics
    from clusterman.events.publisher import EventPublisher
    from clusterman.events.recorder import Recorder
    from clusterman.events.ring import EventRing
    from clusterman.run.cycle import Cycle
    from clusterman.run.demand_source import InternalDemand
    from clusterman.state.carried import StoredState

    pool.elapsed = 0.0
    keeper = StoredState(store, PoolIdentity("c", "p", Scheduler.SIMULATED))  # type: ignore[arg-type]
    cycle = Cycle(
        connector=pool.connector,
        cloud=pool.cloud,
        lifecycle=pool.lifecycle,
        demand=InternalDemand(),  # 26.5 CPUs running: 4 nodes at 95%, n4 removed
        policy=replace(  # reserve 3: n4 is drained to be kept
            consolidating(),
            slot_reserve=reserve,
            consolidation=replace(consolidating().consolidation, consolidate_after_seconds=after),
        ),
        recorder=Recorder(EventPublisher(EventRing(1000)), AutoscalerMetrics("c", "p"), "p", lambda: 0),
        keeper=keeper,
        budget_seconds=budget,
        clock=lambda: pool.now + pool.elapsed,
    )
    return cycle, keeper


def failing_taint(pool: SimulatedPool, node_id: str) -> None:
    """The scheduler refuses ``node_id``'s taint (an API error), once."""
    from clusterman.cluster.lifecycle import NodeResult
    from clusterman.cluster.lifecycle import Outcome

    taint = pool.lifecycle.taint

    def refusing(node_ids, now):
        pool.lifecycle.taint = taint  # type: ignore[method-assign]
        others = [n for n in node_ids if n != node_id]
        done = dict(taint(others, now)) if others else {}
        return {**done, node_id: NodeResult(node_id, Outcome.FAILED, "the API server refused the patch")}

    pool.lifecycle.taint = refusing  # type: ignore[method-assign]


def unanswered_taint(pool: SimulatedPool, node_id: str, applied: bool) -> None:
    """``node_id``'s taint is not answered (a timeout), once: carried out all the same, or not."""
    from clusterman.cluster.lifecycle import NodeResult
    from clusterman.cluster.lifecycle import Outcome

    taint = pool.lifecycle.taint

    def silent(node_ids, now):
        pool.lifecycle.taint = taint  # type: ignore[method-assign]
        done = dict(taint([n for n in node_ids if applied or n != node_id], now))
        return {**done, node_id: NodeResult(node_id, Outcome.FAILED, "timed out", unknown=True)}

    pool.lifecycle.taint = silent  # type: ignore[method-assign]


@pytest.mark.parametrize("choice", ["remove", "keep"])
@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not applied"])
def test_a_taint_not_answered_is_settled_by_the_next_run(tmp_path, applied, choice):
    """The run cannot tell a taint that landed from one that did not: the spend stands, kept as
    unknown. The next run finds the node tainted (the spend stands: one count of its pod, the
    node goes on as chosen) or untainted (taken back: chosen again, counted once then)."""
    from clusterman.state.store import SqliteStateStore

    pool = SimulatedPool("first_fit")
    store = SlowStore(SqliteStateStore(tmp_path / "state.sqlite"), pool)
    cycle, keeper = consolidating_cycle(pool, store, reserve=3 if choice == "keep" else 2)
    n4, first = pool.ids[4], pool.now
    unanswered_taint(pool, n4, applied)
    report = cycle.run_once(pool.now)
    assert [(c.choice.value, c.node) for c in report.decision.consolidation.chosen] == [(choice, n4)], report.line()
    assert not report.applied.tainted[n4].ok
    assert pool.connector.snapshot(pool.now).node(n4).state.value == ("tainted" if applied else "ready")
    for state in (cycle.state.disruption, keeper.load().disruption):  # the spend stands, marked unknown
        assert state.evictions == ((first, n4, 1),) and state.unknown == ((n4, first, first),)
        assert state.kept == ({n4: first} if choice == "keep" else {})

    pool.now += 60
    again = cycle.run_once(pool.now)
    chosen = [c.node for c in again.decision.consolidation.chosen]
    assert chosen == ([] if applied else [n4]), again.line()
    at = first if applied else pool.now  # counted once, when the taint was done
    for state in (cycle.state.disruption, keeper.load().disruption):
        assert state.evictions == ((at, n4, 1),) and state.unknown == ()
        assert state.kept == ({n4: at} if choice == "keep" else {})
    assert pool.connector.snapshot(pool.now).node(n4).state.value == "tainted"


def test_a_node_whose_spend_is_taken_back_keeps_its_candidate_time(tmp_path):
    """Chosen after consolidate_after, its taint refused: it was a candidate all along, so the next
    run chooses it again rather than waiting consolidate_after once more."""
    from clusterman.state.store import SqliteStateStore

    pool = SimulatedPool("first_fit")
    store = SlowStore(SqliteStateStore(tmp_path / "state.sqlite"), pool)
    cycle, keeper = consolidating_cycle(pool, store, after=300.0)
    n4, since = pool.ids[4], pool.now
    waiting = cycle.run_once(pool.now)
    assert waiting.decision.consolidation.chosen == () and cycle.state.disruption.candidate_since(n4) == since
    pool.now += 300
    failing_taint(pool, n4)
    refused = cycle.run_once(pool.now)
    assert [c.node for c in refused.decision.consolidation.chosen] == [n4], refused.line()
    assert not refused.applied.tainted[n4].ok
    assert cycle.state.disruption.candidate_since(n4) == since == keeper.load().disruption.candidate_since(n4)
    pool.now += 60
    again = cycle.run_once(pool.now)
    assert [c.node for c in again.decision.consolidation.chosen] == [n4], again.line()
    assert again.applied.tainted[n4].ok and cycle.state.disruption.evictions == ((pool.now, n4, 1),)


@pytest.mark.parametrize("choice", ["remove", "keep"])
@pytest.mark.parametrize("stop", ["overrun before changing taints", "taint refused"])
def test_a_node_chosen_but_never_tainted_spends_no_budget(tmp_path, stop, choice):
    """The state is kept before acting (a kill mid-drain must still count the spend); when the run
    then stops before changing taints or the node's taint fails, none of its pods leave for that
    choice: the spend is taken back, in memory and in the store, and the next run that drains it
    counts its pods once."""
    from clusterman.state.store import SqliteStateStore

    pool = SimulatedPool("first_fit")
    store = SlowStore(SqliteStateStore(tmp_path / "state.sqlite"), pool)
    cycle, keeper = consolidating_cycle(pool, store, budget=60.0, reserve=3 if choice == "keep" else 2)
    n4 = pool.ids[4]
    if stop == "taint refused":
        failing_taint(pool, n4)
    else:
        store.seconds = 61.0  # keeping the state before acting took longer than the budget
    report = cycle.run_once(pool.now)
    assert [(c.choice.value, c.node) for c in report.decision.consolidation.chosen] == [(choice, n4)], report.line()
    spent = report.decision.state.disruption  # at choice time, kept before acting
    assert spent.evicted(pool.now) == 1 and spent.kept == ({n4: pool.now} if choice == "keep" else {})
    assert report.applied.stopped_before == ("changing taints" if stop.startswith("overrun") else "")
    assert pool.connector.snapshot(pool.now).node(n4).state.value == "ready"
    assert pool.group.read().group.target_capacity == 6  # not lowered for a node that stays
    if stop == "taint refused" and choice == "remove":
        assert "target 6 -> 5, 6 set (a node to remove not tainted)" in report.line()
    assert cycle.state.disruption.evicted(pool.now) == 0 and cycle.state.disruption.kept == {}
    assert keeper.load() == cycle.state
    assert store.writes == 2  # before acting, and again with the spend taken back

    store.seconds = 0.0
    pool.now += 60
    pool.elapsed = 0.0
    again = cycle.run_once(pool.now)
    assert [c.node for c in again.decision.consolidation.chosen] == [n4], again.line()
    assert again.applied.tainted[n4].ok and not again.applied.stopped_before
    assert cycle.state.disruption.evicted(pool.now) == 1  # its one pod, counted once
    assert keeper.load().disruption.evictions == ((pool.now, n4, 1),)
    assert keeper.load().disruption.kept == ({n4: pool.now} if choice == "keep" else {})
    assert pool.group.read().group.target_capacity == (5 if choice == "remove" else 6)


def test_a_spend_taken_back_that_cannot_be_kept_is_kept_by_the_next_run(tmp_path, caplog):
    from clusterman.state.store import SqliteStateStore

    pool = SimulatedPool("first_fit")
    store = SlowStore(SqliteStateStore(tmp_path / "state.sqlite"), pool)
    cycle, keeper = consolidating_cycle(pool, store)
    n4 = pool.ids[4]
    failing_taint(pool, n4)
    store.fail_from = 2  # the state kept before acting is written; the corrected one is not
    report = cycle.run_once(pool.now)
    assert report.outcome.value == "acted" and not report.applied.tainted[n4].ok
    assert "cannot keep the autoscaler state with consolidation's spend taken back or confirmed" in caplog.text
    assert cycle.state.disruption.evicted(pool.now) == 0  # corrected in memory
    assert keeper.load().disruption.evicted(pool.now) == 1  # the store still has the spend

    store.fail_from = math.inf
    pool.now += 60
    cycle.run_once(pool.now)  # chooses n4 again, taints it, and keeps the state before acting
    assert keeper.load().disruption.evictions == ((pool.now, n4, 1),)


def test_a_dry_run_spends_nothing_and_keeps_nothing(tmp_path):
    from clusterman.state.store import SqliteStateStore

    pool = SimulatedPool("first_fit")
    store = SlowStore(SqliteStateStore(tmp_path / "state.sqlite"), pool)
    cycle, keeper = consolidating_cycle(pool, store)
    cycle.dry_run = True
    report = cycle.run_once(pool.now)
    assert [c.node for c in report.decision.consolidation.chosen] == [pool.ids[4]], report.line()
    assert store.writes == 0 and cycle.state.disruption.evictions == () == keeper.load().disruption.evictions

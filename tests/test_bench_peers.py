"""The scoreboard's peers follow their autoscalers' rules (bench/_peers.py)."""

from __future__ import annotations

import random

from bench._peers import ClusterAutoscaler
from bench._peers import Karpenter
from bench._peers import new_nodes
from bench._peers import pack
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision import AutoscalerState
from clusterman.decision.fit import need_of
from tests.scaling_builders import NOW
from tests.scaling_builders import ORPHAN
from tests.scaling_builders import node
from tests.scaling_builders import policy
from tests.scaling_builders import snapshot


def pod(name: str, cpus: float) -> Task:
    return Task(name, Resources(cpus=cpus, mem=0))


def busy(node_id: str, *cpus: float, **kw: object):
    return node(node_id, cpus=8, mem=32000, tasks=tuple(pod(f"{node_id}-{k}", c) for k, c in enumerate(cpus)), **kw)  # type: ignore[arg-type]


def test_pending_pods_are_packed_onto_free_room_then_nodes_in_flight_then_new_nodes():
    eight = list(need_of(8, 32000, 0, 0))
    four, one = need_of(4, 0, 0, 0), need_of(1, 0, 0, 0)
    # 3 CPUs free on a ready node, one node in flight: two 4-CPU pods fill it, two more take a new
    # node, the 1-CPU pod (last: largest first) fits in the 3 free CPUs
    assert new_nodes([four] * 4 + [one], [[3_000_000, 32000 * 10**6, 0, 0], list(eight)], eight) == 1
    assert new_nodes([one, one, one], [[3_000_000, 32000 * 10**6, 0, 0]], eight) == 0


def first_fit_decreasing(needs, bins):
    """The plain rule: each need, largest first, on the first bin with room, looked for from the first."""
    for need in sorted(needs, reverse=True):
        room = next((r for r in bins if all(n <= f for n, f in zip(need, r, strict=True))), None)
        if room is None:
            return False
        for d, n in enumerate(need):
            room[d] -= n
    return True


def test_packing_places_every_pod_where_plain_first_fit_decreasing_does():
    rng = random.Random(7)
    sizes = [need_of(c, m, 0, 0) for c, m in ((0.5, 500), (1, 500), (1, 2000), (2, 1000), (4, 4000))]
    for _ in range(300):
        needs = [rng.choice(sizes) for _ in range(rng.randint(0, 40))]
        bins = [[rng.randint(0, 8) * 500_000, rng.randint(0, 16) * 10**9, 0, 0] for _ in range(rng.randint(0, 12))]
        plain = [list(b) for b in bins]
        assert pack(needs, bins) == first_fit_decreasing(needs, plain)
        assert bins == plain  # the same room left on every bin: the same placement


def test_cluster_autoscaler_scales_up_for_pending_pods_only():
    ca = ClusterAutoscaler()
    full = snapshot([busy("a", 4, 4), busy("b", 4, 4)])
    # a full pool with nothing pending: no scale-up, whatever the signals would say
    assert ca(full, {}, policy(), AutoscalerState(), NOW).target_capacity == 2
    waiting = snapshot([busy("a", 4, 4), busy("b", 4, 4)], pending=(pod("p1", 4), pod("p2", 4), pod("p3", 2)))
    assert ClusterAutoscaler()(waiting, {}, policy(), AutoscalerState(), NOW).target_capacity == 4


def test_cluster_autoscaler_removes_a_node_under_half_requested_after_ten_minutes_unneeded():
    ca = ClusterAutoscaler()
    pool = [busy("a", 4, 2), busy("b", 1), busy("c", 6)]  # b is 12.5% requested; its pod fits on a
    first = ca(snapshot(pool), {}, policy(), AutoscalerState(), NOW)
    assert first.taint == () and first.target_capacity == 3
    assert ca(snapshot(pool), {}, policy(), AutoscalerState(), NOW + 540).taint == ()
    later = ca(snapshot(pool), {}, policy(), AutoscalerState(), NOW + 600)
    assert later.taint == ("b",) and later.target_capacity == 2
    # pods pending start the clock again
    ca2 = ClusterAutoscaler()
    ca2(snapshot(pool), {}, policy(), AutoscalerState(), NOW)
    ca2(snapshot(pool, pending=(pod("x", 8),)), {}, policy(), AutoscalerState(), NOW + 300)
    assert ca2(snapshot(pool), {}, policy(), AutoscalerState(), NOW + 600).taint == ()


def test_karpenter_consolidates_at_once_within_its_budget():
    pool = [busy("a", 4, 2), busy("b", 1), busy("c", 6), node("e", cpus=8, mem=32000)]
    decision = Karpenter()(snapshot(pool), {}, policy(), AutoscalerState(), NOW)
    # a budget of 10% of 4 nodes is one node: the empty one goes first, and at once
    assert decision.taint == ("e",) and decision.terminate == ("e",)
    ten = [busy(f"n{k}", 6) for k in range(9)] + [busy("b", 1), node("e", cpus=8, mem=32000)]
    decision = Karpenter()(snapshot(ten), {}, policy(), AutoscalerState(), NOW)
    assert decision.taint == ("e", "b") and decision.target_capacity == 9  # b's pod fits in a gap


def test_karpenter_keeps_a_node_whose_pods_the_pending_ones_would_need():
    pool = [busy("a", 6), busy("b", 2)]
    joining = node("j", state=ORPHAN, cpus=8, mem=32000, launched_at=NOW - 60)
    # the pending 6-CPU pod takes the node in flight; b's 2 CPUs fit on a: b may go
    decision = Karpenter()(snapshot([*pool, joining], pending=(pod("p", 6),)), {}, policy(), AutoscalerState(), NOW)
    assert decision.taint == ("b",)
    # with two pending 6-CPU pods, the second needs b's room: b stays, and nothing is launched
    crowded = snapshot([*pool, joining], pending=(pod("p", 6), pod("q", 6)))
    decision = Karpenter()(crowded, {}, policy(), AutoscalerState(), NOW)
    assert decision.taint == () and decision.target_capacity == 3

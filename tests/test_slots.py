"""The slot reserve (clusterman/decision/slots.py): room for the largest pod kept on a few nodes."""

from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision.slots import largest_request
from clusterman.decision.slots import node_slots
from tests.scaling_builders import node
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


def fragmented(count: int, free: float = 3.0) -> list:
    """8-CPU nodes each with ``free`` CPUs left, in 1-CPU pods, and one 4-CPU pod on the first."""
    out = []
    for i in range(count):
        used = 8 - free
        tasks = pods(int(used), cpus=1, mem=0)
        if i == 0:
            tasks = (*pods(int(used) - 4, cpus=1, mem=0), Task("big", Resources(cpus=4)))
        out.append(node(f"n{i}", cpus=8, mem=0, tasks=tasks))
    return out


def test_the_largest_request_is_per_resource_and_ignores_daemons():
    tasks = [Task("a", Resources(cpus=4, mem=100)), Task("b", Resources(cpus=1, mem=900)),
             Task("d", Resources(cpus=16), daemon=True)]  # fmt: skip
    slot = largest_request([node("a", cpus=8, mem=2000, tasks=tuple(tasks[:2]))], tasks[2:])
    assert slot is not None and node_slots(node("x", cpus=8, mem=2000).vector, slot) == 2
    assert largest_request([node("b", tasks=(Task("z", Resources()),))]) is None


def test_free_cpus_split_over_nodes_none_with_room_for_the_largest_pod_add_a_node():
    # 10 nodes at 5/8 used: utilisation 62.5% < setpoint 70%, but no node has 4 CPUs free
    snap = snapshot(fragmented(10))
    used = sum(n.usage.allocated_unreserved.cpus for n in snap.nodes)
    without = run(snap, request(cpus=used), policy())
    assert without.target_capacity <= 10
    kept = run(snap, request(cpus=used), policy(slot_reserve=2))
    assert kept.target_capacity == 11  # one new 8-CPU node: two 4-CPU slots
    # the explanation says where the room went: 30 CPUs free, none of it a whole slot
    why = "slot reserve: 0 free 4-CPU slots < 2 (30 free CPUs, split over 10 nodes in pieces smaller than a slot) → 11"
    assert why in kept.explanation
    # full nodes: no room split anywhere, nothing to say about it
    full = run(snapshot(fragmented(10, free=0.0)), request(cpus=80), policy(slot_reserve=2, setpoint=1))
    assert "slot reserve: 0 free 4-CPU slots < 2 → " in full.explanation and "split over" not in full.explanation


def test_enough_slots_leave_the_target_alone():
    snap = snapshot(fragmented(10, free=4.0))
    used = sum(n.usage.allocated_unreserved.cpus for n in snap.nodes)
    assert (
        run(snap, request(cpus=used), policy(slot_reserve=3)).target_capacity
        == run(snap, request(cpus=used), policy()).target_capacity
    )


def test_a_scale_down_keeps_the_nodes_that_hold_the_reserve():
    # 6 busy nodes without room, 4 empty ones: the request wants 7 nodes; removing all 3 surplus
    # empty nodes would leave one empty node (2 slots): with a reserve of 4 slots two stay
    busy = fragmented(6, free=3.0)
    empty = [node(f"e{i}", cpus=8, mem=0) for i in range(4)]
    snap = snapshot([*busy, *empty])
    req = request(cpus=7 * 8 * 0.7)
    assert run(snap, req, policy()).target_capacity == 7
    kept = run(snap, req, policy(slot_reserve=4))
    assert kept.target_capacity == 8
    assert "slot reserve" in kept.explanation


def test_pending_pods_count_for_the_slot_size():
    snap = snapshot([node(f"n{i}", cpus=8, mem=0, tasks=pods(6, cpus=1, mem=0)) for i in range(4)],
                    pending=(Task("wide", Resources(cpus=3)),))  # fmt: skip
    d = run(snap, request(cpus=24), policy(setpoint=0.9, slot_reserve=1))
    assert d.target_capacity == 5 and "3-CPU slots" in d.explanation


def test_a_scale_down_keeps_band_more_slots_but_a_scale_up_does_not_ask_for_them():
    # hysteresis: the reserve alone must not remove a node that the next large pods take back
    busy = fragmented(6, free=3.0)
    empty = [node(f"e{i}", cpus=8, mem=0) for i in range(4)]
    snap = snapshot([*busy, *empty])
    req = request(cpus=7 * 8 * 0.7)
    assert run(snap, req, policy(slot_reserve=2)).target_capacity == 7  # one empty node: 2 slots
    kept = run(snap, req, policy(slot_reserve=2, slot_reserve_band=2))
    assert kept.target_capacity == 8  # two empty nodes: 2 + 2 slots
    assert "a scale-down keeps 2 + 2 free 4-CPU slots → 8" in kept.explanation
    # never above the current target: a band larger than the pool holds has the target kept
    assert run(snap, req, policy(slot_reserve=2, slot_reserve_band=20)).target_capacity == 10
    # a scale-up adds what the reserve misses, no more
    frag = snapshot(fragmented(10))
    used = sum(n.usage.allocated_unreserved.cpus for n in frag.nodes)
    assert run(frag, request(cpus=used), policy(slot_reserve=2, slot_reserve_band=2)).target_capacity == 11


def test_a_large_pool_keeps_a_fraction_of_its_places_free():
    # 40 nodes, none with room for a 4-CPU pod: 80 places in the ready capacity, 5% of them is 4
    snap = snapshot(fragmented(40))
    used = sum(n.usage.allocated_unreserved.cpus for n in snap.nodes)
    assert run(snap, request(cpus=used), policy(slot_reserve=2)).target_capacity == 41
    d = run(snap, request(cpus=used), policy(slot_reserve=2, slot_reserve_fraction=0.05))
    assert d.target_capacity == 42 and "0 free 4-CPU slots < 4" in d.explanation
    # a small pool keeps the fixed number: 10 nodes, 5% of 20 places is 1 < 2
    small = snapshot(fragmented(10))
    used = sum(n.usage.allocated_unreserved.cpus for n in small.nodes)
    assert run(small, request(cpus=used), policy(slot_reserve=2, slot_reserve_fraction=0.05)).target_capacity == 11


def test_the_remembered_chunks_give_what_a_fresh_pass_gives_as_the_pool_changes():
    # largest_in and the reserve's counts are remembered per chunk of 32 nodes (core/fold.py):
    # a pool of 100 nodes changed a few nodes at a time must get the same answers as a fresh count
    import random
    from dataclasses import replace

    from clusterman.core.model import NodeState
    from clusterman.decision.pool_view import view_of
    from clusterman.decision.slots import largest_in
    from clusterman.decision.slots import reserve

    rng = random.Random(7)
    states = [NodeState.READY] * 6 + [NodeState.TAINTED, NodeState.CORDONED]

    def random_node(i: int):
        tasks = tuple(Task(f"t{i}-{k}", Resources(cpus=rng.choice([0.5, 1, 2, 4]))) for k in range(rng.randint(0, 5)))
        return replace(node(f"n{i}", cpus=8, mem=0, tasks=tasks), state=rng.choice(states))

    nodes = [random_node(i) for i in range(100)]
    for _ in range(30):
        for i in rng.sample(range(len(nodes)), 3):
            nodes[i] = random_node(i)
        view = view_of(snapshot(nodes))
        slot = largest_in(view)
        assert slot == largest_request((*view.ready, *view.tainted))
        assert slot is not None
        fresh = sum(node_slots(n.vector, slot) for n in view.ready)
        assert reserve(view, view.ready_total, slot, fresh).reason == ""  # exactly enough: unchanged
        assert reserve(view, view.ready_total, slot, fresh + 1).reason  # one more: a node is added

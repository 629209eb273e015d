"""Room on the nodes that stay (clusterman/decision/fit.py), checked against brute force."""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision.exact import MICRO
from clusterman.decision.fit import Room

SIZES = st.sampled_from([(0.5, 500.0), (1.0, 1000.0), (2.0, 500.0), (4.0, 4000.0), (1.0, 0.0)])


def make(i, shapes, gpus=0):
    tasks = tuple(Task(f"n{i}-{k}", Resources(cpus=c, mem=m, gpus=gpus)) for k, (c, m) in enumerate(shapes))
    return Node(f"n{i}", NodeState.READY, Resources(cpus=8, mem=8000, gpus=gpus), tasks=tasks)


def check(room, initial):
    """Maxima consistent with their leaves; no node that stays holds more than it has room for."""
    for d, tree in enumerate(room.trees):
        if not tree:
            continue
        for k in range(1, room.size):
            assert tree[k] == max(tree[2 * k], tree[2 * k + 1])
        for i in range(len(initial)):
            if i not in room.gone:
                assert tree[room.size + i] >= min(0, initial[i][d])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(SIZES, max_size=4), min_size=2, max_size=5), st.data())
def test_moves_never_overfill_a_node_and_an_undo_restores_everything(shapes, data):
    nodes = [make(i, s) for i, s in enumerate(shapes)]
    initial = [[round((8 - sum(c for c, _ in s)) * MICRO), round((8000 - sum(m for _, m in s)) * MICRO), 0, 0]
               for s in shapes]  # fmt: skip
    room = Room(nodes)
    for n in data.draw(st.permutations(nodes)):
        before = [list(t) for t in room.trees]
        why = room.try_move(n)
        check(room, initial)
        if why:
            assert "fits on no remaining node" in why
            assert all(room.trees[d] == t for d, t in enumerate(before) if t)  # nothing changed


@given(st.lists(SIZES, min_size=1, max_size=4), SIZES)
def test_a_single_pod_is_refused_exactly_when_no_other_node_has_room(busy, pod):
    nodes = [make(0, [pod])] + [make(i + 1, [b, b]) for i, b in enumerate(busy)]
    room_for = any(8 - 2 * c >= pod[0] and 8000 - 2 * m >= pod[1] for c, m in busy)
    assert (Room(nodes).try_move(nodes[0]) == "") == room_for


def test_a_resource_first_asked_for_late_sees_the_nodes_already_gone():
    """Trees are built when a request first needs their resource; nodes removed before still count as gone."""
    gpu_pod = make(0, [(1.0, 100.0)], gpus=1)
    empty, gpu_node = make(1, []), make(2, [], gpus=1)
    room = Room([gpu_pod, empty, gpu_node])
    room.remove("n2")  # the only other node with a GPU leaves first
    assert room.try_move(gpu_pod) == "its 1-CPU, 100 MB mem, 1-GPU pod fits on no remaining node"
    assert room.trees[3]  # built now
    room2 = Room([gpu_pod, empty, gpu_node])
    assert room2.try_move(gpu_pod) == ""

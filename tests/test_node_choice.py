"""Which nodes a decision untaints, taints and terminates, and when it may not."""

import math
from dataclasses import replace

import pytest

from clusterman.core.model import NO_TIME
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision import Action
from tests.scaling_builders import NOW
from tests.scaling_builders import ORPHAN
from tests.scaling_builders import TAINTED
from tests.scaling_builders import group
from tests.scaling_builders import node
from tests.scaling_builders import nodes
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


def tainted(node_id, ago, tasks=0, launched_at=NOW - 86400, **kw):
    return node(node_id, state=TAINTED, tainted_at=NOW - ago if ago is not None else NO_TIME,
                tasks=pods(tasks), launched_at=launched_at, **kw)  # fmt: skip


def test_untaint_newest_first_before_asking_the_cloud():
    old = [tainted(f"t{i}", ago=30, tasks=1, launched_at=NOW - 1000 + i) for i in range(3)]
    d = run(snapshot(nodes(4) + old, [group("g1", 4)]), request(4.2), policy(soft_delete_grace_period_seconds=600))
    assert d.target_capacity == 6  # ceil(4 × 105 / 70)
    assert d.untaint == ("t2", "t1")  # the two newest cover the shortfall: no new instance needed beyond them
    assert d.action is Action.SCALE_UP and d.taint == () and d.terminate == ()
    assert "untaint: group g1 is short" in d.node_reasons["t2"]


def test_taint_order_stale_idle_fewest_batch_tasks_fewest_tasks_oldest():
    members = [
        node("busy", tasks=pods(3)),
        node("batchy", cpus=16, tasks=pods(1, batch=True)),  # room for every other node's pods
        node("one", tasks=pods(1)),
        node("idle-new", launched_at=NOW - 100),
        node("idle-old", launched_at=NOW - 5000),
        node("stale", group="g0", tasks=pods(5)),
    ]
    groups = [group("g0", 0, stale=True), group("g1", 5)]
    d = run(snapshot(members, groups), request(0.7), policy(min_capacity=1))
    assert d.target_capacity == 1
    assert d.taint == ("stale", "idle-old", "idle-new", "one", "busy")  # batch work is kept longest
    assert set(d.terminate) == {"idle-old", "idle-new"}  # empty and the soft grace period is 0


def full(node_id, *sizes, cpus=8, mem=32000, **kw):
    """A node with one pod per size in ``sizes`` (CPUs, 1,000 MB each)."""
    tasks = tuple(Task(f"{node_id}-p{i}", Resources(cpus=c, mem=1000)) for i, c in enumerate(sizes))
    return node(node_id, cpus=cpus, mem=mem, tasks=tasks, **kw)


# (case, nodes oldest first (8 CPUs unless said), target in nodes, tainted, kept and why)
FIT_CASES = [
    (
        "a 4-CPU pod with 3 free CPUs on each remaining node stays; the next node's small pod goes",
        [full("big", 4), full("small", 1, cpus=4), full("a", 5), full("b", 5), full("c", 5)],
        4,
        ("small",),
        {"big": "its 4-CPU, 1000 MB mem pod"},
    ),
    (
        "room taken by an earlier choice in the same run counts",
        [full("x", 3), full("y", 3), full("a", 4), full("b", 6)],
        2,  # x's pod takes a's room; y's finds none; a and b are too busy to go
        ("x",),
        {"y": "its 3-CPU, 1000 MB mem pod", "a": "its 3-CPU, 1000 MB mem pod", "b": "its 6-CPU, 1000 MB mem pod"},
    ),
    (
        "every resource: CPUs to spare but no memory",
        [full("m", 1, mem=8000), full("a", 1, mem=1500), full("b", 1, mem=1500)],
        2,  # m's pod finds no node with 1000 MB free; a's goes to m
        ("a",),
        {"m": "its 1-CPU, 1000 MB mem pod"},
    ),
    (
        "empty nodes always qualify, however full the rest",
        [full("e1"), full("e2"), full("a", 8), full("b", 8)],
        2,
        ("e1", "e2"),
        {},
    ),
    (
        "a node that received pods earlier in the run takes them along when it goes",
        [full("s", 2), full("r", 4), full("a", 6)],
        1,  # s's pod goes to r (a has no room); r's 4 + 2 CPUs then fit nowhere
        ("s",),
        {"r": "its 4-CPU, 1000 MB mem pod", "a": "its 6-CPU, 1000 MB mem pod"},
    ),
    (
        "pods that only several nodes' free CPUs together hold, first fit decreasing",
        [full("f", 2, 2, 1, 1), full("a", *[1] * 6), full("b", *[1] * 6), full("c", *[1] * 7), full("d", *[1] * 7)],
        4,
        ("f",),
        {},
    ),
]


@pytest.mark.parametrize(("case", "members", "target", "taint", "kept"), FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_a_node_is_tainted_only_when_its_pods_fit_on_the_nodes_that_stay(case, members, target, taint, kept):
    members = [replace(n, launched_at=NOW - 90000 + i) for i, n in enumerate(members)]  # oldest first
    cpus = sum(n.allocatable.cpus for n in members)
    d = run(snapshot(members), request(cpus * 0.7 * target / len(members)), policy(min_capacity=1))
    assert d.target_capacity == target
    assert d.taint == taint
    why = {n: r for n, r in d.node_reasons.items() if r.startswith("kept")}
    assert why == {n: f"kept: {pod} fits on no remaining node" for n, pod in kept.items()}
    if kept:
        first = next(iter(kept))
        assert f"node {first}" in d.explanation and why[first] in d.explanation


def test_a_tainted_node_with_tasks_is_terminated_only_when_they_fit():
    members = [full("a", 5), full("b", 5), replace(full("t", 4), state=TAINTED, tainted_at=NOW - 90)]
    pol = policy(soft_delete_grace_period_seconds=60, max_tasks_to_kill=5, hard_delete_grace_period_seconds=600)
    d = run(snapshot(members, [group("g1", 2)]), request(8), pol)
    assert d.target_capacity == 2 and d.terminate == ()
    assert d.node_reasons["t"] == "not terminated: its 4-CPU, 1000 MB mem pod fits on no remaining node"
    roomy = [full("a", 5), full("b", 3), replace(full("t", 4), state=TAINTED, tainted_at=NOW - 90)]
    assert run(snapshot(roomy, [group("g1", 2)]), request(8), pol).terminate == ("t",)
    late = [full("a", 5), full("b", 5), replace(full("t", 4), state=TAINTED, tainted_at=NOW - 700)]
    assert run(snapshot(late, [group("g1", 2)]), request(8), pol).terminate == ("t",)  # hard: regardless


def test_young_nodes_are_tainted_last():
    members = [node("young", launched_at=NOW - 10), node("old", launched_at=NOW - 5000)]
    d = run(snapshot(members), request(0.5), policy(min_node_scalein_uptime_seconds=600))
    assert d.taint == ("old",)


def test_never_taints_a_pinned_node_nor_below_target_nor_past_max_weight_to_remove():
    members = [node("pinned", tasks=pods(1, safe_to_evict=False)), *nodes(5)]
    d = run(snapshot(members), request(0.1), policy(max_weight_to_remove=3, min_capacity=0))
    assert d.target_capacity == 3  # 6 − max_weight_to_remove
    assert "pinned" not in d.taint and len(d.taint) == 3


def test_heavy_node_is_not_tainted_when_that_takes_ready_below_target():
    members = [node("big", weight=4, cpus=4), node("small", weight=1)]
    d = run(snapshot(members, [group("g1", 5)]), request(1.75))  # ceil(5 × 35 / 70) = 3: excess 2
    assert d.taint == ("small",)


class TestTermination:
    def test_soft_grace_period_waits_for_empty_nodes(self):
        members = [*nodes(2), tainted("recent", ago=30), tainted("old", ago=90), tainted("busy", ago=90, tasks=2)]
        d = run(snapshot(members, [group("g1", 2)]), request(1), policy(soft_delete_grace_period_seconds=60))
        assert d.terminate == ("old",)
        assert "empty, tainted 90s ≥ soft_delete_grace_period 60s" in d.node_reasons["old"]
        assert d.terminate_with == {"old": 0}  # it goes only as empty as it was read

    def test_hard_grace_period_terminates_regardless(self):
        members = [*nodes(2), tainted("busy", ago=700, tasks=4)]
        pol = policy(soft_delete_grace_period_seconds=60, hard_delete_grace_period_seconds=600)
        d = run(snapshot(members, [group("g1", 2)]), request(1), pol)
        assert d.terminate == ("busy",)
        assert "hard_delete_grace_period 600s" in d.node_reasons["busy"]
        assert d.terminate_with == {}  # it goes whatever runs there

    def test_max_tasks_to_kill_is_a_budget_per_run(self):
        members = [
            *nodes(2),
            tainted("a", ago=90, tasks=3),
            tainted("b", ago=80, tasks=3),
            tainted("c", ago=70, tasks=1),
        ]
        d = run(snapshot(members, [group("g1", 2)]), request(1), policy(max_tasks_to_kill=5))
        assert d.terminate == ("a", "c")  # b's 3 tasks would take the run to 6 > 5
        assert d.terminate_with == {"a": 3, "c": 1}  # no more than the budget counted
        d = run(snapshot(members, [group("g1", 2)]), request(1), policy(max_tasks_to_kill=0))
        assert d.terminate == ()

    def test_taint_of_unknown_age_is_past_soft_never_past_hard(self):
        members = [*nodes(2), tainted("empty", ago=None), tainted("busy", ago=None, tasks=1)]
        pol = policy(soft_delete_grace_period_seconds=60, hard_delete_grace_period_seconds=600)
        d = run(snapshot(members, [group("g1", 2)]), request(1), pol)
        assert d.terminate == ("empty",)

    def test_never_takes_joined_capacity_below_the_target(self):
        """Rolling a stale group: its tainted nodes stay until the replacements have joined."""
        stale = [tainted(f"s{i}", ago=900, group="g0") for i in range(3)]
        joining = nodes(3, prefix="o", state=ORPHAN, launched_at=NOW - 60)
        groups = [group("g0", 0, stale=True), group("g1", 5)]
        d = run(snapshot(nodes(2) + stale + joining, groups), request(3.5))
        assert d.target_capacity == 5  # ceil(2 × 175 / 70)
        assert d.terminate == () and d.untaint == ()
        assert "3 already requested, waiting to join" in d.explanation

    def test_orphans(self):
        members = [
            *nodes(2),
            node("lost", state=ORPHAN, launched_at=NOW - 2000),
            node("joining", state=ORPHAN, launched_at=NOW - 60),
            node("surplus", state=ORPHAN, launched_at=NOW - 30),
            node("stale-orphan", group="g0", state=ORPHAN, launched_at=NOW - 30),
        ]
        groups = [group("g0", 0, stale=True), group("g1", 3)]
        d = run(snapshot(members, groups), request(2.1))  # ceil(2 × 105 / 70) = 3: one more needed
        assert d.target_capacity == 3
        assert set(d.terminate) == {"lost", "surplus", "stale-orphan"}
        assert d.terminate_with == {}  # never joined: nothing runs there
        assert "not joined 2000s after launch (limit 1800s)" in d.node_reasons["lost"]
        assert "joining" not in d.terminate


def test_hard_grace_default_is_never():
    assert policy().hard_delete_grace_period_seconds == math.inf

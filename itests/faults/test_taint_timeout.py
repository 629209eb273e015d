"""A taint the API server applies but answers only after the client gave up: the node is tainted
in the cluster while the run cannot tell whether it is. The run keeps the spend counted, its
outcome unknown, and the next run settles it from its snapshot: found tainted, the spend stands
and the node goes on as chosen. Real autoscaler, the stateful fake API server, Auto Scaling groups
in moto's server. Both choices converge without harm, each pod counted once in the hour's budget.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEYS
from itests.faults import drains
from itests.faults.autoscaler_procs import acted
from itests.pool_harness import PoolHarness

LATE = drains.BUDGET  # three times the client's timeout (BUDGET / 3)


def answered_late(pool: PoolHarness, node: str) -> threading.Event:
    """The node's first PATCH that taints it for scale-down is applied, then answered only after
    the client gave up (an API server slow to answer, etcd slow to confirm). Set once it was."""
    assert pool.kube is not None
    late = threading.Event()

    def after(request: Any, answer: Any) -> None:
        if late.is_set() or request.method != "PATCH" or request.path != f"/api/v1/nodes/{node}":
            return
        taints = json.loads(answer[1]).get("spec", {}).get("taints") or ()
        if answer[0] == 200 and any(t["key"] in SCALE_DOWN_TAINT_KEYS for t in taints):
            late.set()
            time.sleep(LATE)

    pool.kube.after_answer = after
    return late


def patches(pool: PoolHarness, node: str) -> int:
    assert pool.kube is not None
    return sum(1 for r in pool.kube.requests if r.method == "PATCH" and r.path == f"/api/v1/nodes/{node}")


def settled(stderr: str, node: str) -> bool:
    """Whether the run kept the node's spend as unknown, and the next found it tainted."""
    unknown = f"spend on {node} stands until the next run reads it: its taint was not answered"
    found = f"spend on {node} stands: its taint's outcome was unknown, found tainted"
    return unknown in stderr and found in stderr and f"spend on {node} taken back" not in stderr


def test_a_node_to_remove_whose_taint_is_answered_late_is_removed_once(tmp_path, moto_server):
    """The run cannot tell whether the node is tainted: it keeps its group's target (a node to
    remove not tainted stays) but the spend stays counted. The next runs find it tainted, lower
    the target by it, drain it (once the client's silence after the timeout ends) and terminate it:
    one node for one, each pod asked to leave once, and its two evictions counted once in the
    hour's budget."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        late = answered_late(pool, nodes[2])
        with drains.running(config, world.cluster) as autoscaler:
            assert late.wait(30), autoscaler.lines()
            autoscaler.wait_for(lambda line: "terminate 1" in line and acted(line), timeout=40)
            time.sleep(2 * drains.PERIOD)
            stderr = autoscaler.stderr()
        spent = drains.kept(pool)
    assert settled(stderr, nodes[2]) and "did not answer patching node" in stderr, stderr[-3000:]
    assert drains.evictions(pool) == pods, autoscaler.lines()  # each asked to leave once, no other pod
    states = [world.ec2_state(m) for m in members]
    assert states == ["running", "running", "terminated", "running"] and world.desired(asg) == 3, autoscaler.lines()
    assert [(node, n) for _, node, n in spent.evictions] == [(nodes[2], len(pods))], spent  # counted once
    assert spent.evicted(time.time()) == len(pods) == 2 and spent.unknown == (), spent


def test_a_process_killed_while_its_taint_is_unanswered_is_settled_by_the_next(tmp_path, moto_server):
    """The neighbour across a restart: the process is killed (SIGKILL) while the applied taint's
    answer is held back, so its kept state still has the choice unknown. The next process reads
    that state, finds the node tainted in its first snapshot, and lets the spend stand: the node
    is drained and terminated once, its two evictions counted once."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        late = answered_late(pool, nodes[2])
        with drains.running(config, world.cluster) as first:
            assert late.wait(30), first.lines()
            first.signal(signal.SIGKILL)
        assert [n for n, _, _ in drains.kept(pool).unknown] == [nodes[2]], drains.kept(pool)
        assert pool.tainted() == [nodes[2]] and drains.evictions(pool) == []
        with drains.running(config, world.cluster) as second:
            second.wait_for(lambda line: "terminate 1" in line and acted(line), timeout=40)
            time.sleep(2 * drains.PERIOD)
            stderr = second.stderr()
        spent = drains.kept(pool)
    found = f"spend on {nodes[2]} stands: its taint's outcome was unknown, found tainted"
    assert found in stderr and f"spend on {nodes[2]} taken back" not in stderr, stderr[-3000:]
    assert drains.evictions(pool) == pods, second.lines()
    states = [world.ec2_state(m) for m in members]
    assert states == ["running", "running", "terminated", "running"] and world.desired(asg) == 3, second.lines()
    assert [(node, n) for _, node, n in spent.evictions] == [(nodes[2], len(pods))], spent
    assert spent.unknown == (), spent


def test_a_node_to_keep_whose_taint_is_answered_late_is_kept(tmp_path, moto_server):
    """The run cannot tell whether the node is tainted: it stays among the nodes kept, its spend
    counted, its outcome unknown. The next run finds it tainted: it drains it and untaints it once
    empty. Nothing terminated, each pod asked to leave once and counted once, no taint more."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        late = answered_late(pool, nodes[3])
        with drains.running(config, world.cluster) as autoscaler:
            assert late.wait(30), autoscaler.lines()
            deadline = time.monotonic() + 40
            while not (drains.evictions(pool) == pods and drains.kept(pool).keeping == ()):
                assert time.monotonic() < deadline, autoscaler.lines()
                time.sleep(0.2)
            time.sleep(3 * drains.PERIOD)
            stderr = autoscaler.stderr()
        spent = drains.kept(pool)
    assert pool.kube is not None
    assert settled(stderr, nodes[3]) and "did not answer patching node" in stderr, stderr[-3000:]
    assert drains.evictions(pool) == pods, autoscaler.lines()  # each asked to leave once, no other pod
    assert [(node, n) for _, node, n in spent.evictions] == [(nodes[3], 2)], spent  # counted once
    assert spent.unknown == (), spent
    # tainted (late), untainted once empty
    assert patches(pool, nodes[3]) == 2 and drains.untainted(pool, nodes[3]), autoscaler.lines()
    assert not pool.kube.nodes[nodes[3]]["spec"].get("taints"), pool.kube.nodes[nodes[3]]
    assert [world.ec2_state(m) for m in members] == ["running"] * 4 and world.desired(asg) == 4, autoscaler.lines()

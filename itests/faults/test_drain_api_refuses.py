"""Neighbours of a silent API server during a consolidation drain: a server that refuses an
eviction or the taint of the node chosen with an error (500: a failing admission webhook), and a
node deleted by someone else mid-drain. Real autoscaler, the stateful fake API server, Auto
Scaling groups in moto's server."""

from __future__ import annotations

import time

from itests.faults import drains
from itests.faults.autoscaler_procs import acted
from itests.stateful_api import status


def test_an_eviction_refused_with_500_leaves_the_node_until_the_server_takes_it(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, _, pods = drains.to_remove(pool, members)
        webhook = 'Internal error occurred: failed calling webhook "pods.example.com": connection refused'
        pool.kube.eviction_errors[f"default/{pods[1]}"] = status(500, "InternalError", webhook)
        with drains.running(config, world.cluster) as autoscaler:
            autoscaler.wait_for(lambda line: "(1 errors)" in line, timeout=30)
            time.sleep(3 * drains.PERIOD)
            refused = drains.evictions(pool).count(pods[1])
            there, instance = pool.kube.pod("default", pods[1]) is not None, world.ec2_state(members[2])
            answering = time.monotonic()
            pool.kube.eviction_errors.clear()
            done, _ = autoscaler.wait_for(lambda line: "terminate 1" in line, timeout=20, after=answering)
            print(f"terminated {done - answering:.1f} s after the webhook answered again")
            stderr = autoscaler.stderr()
        assert there and instance == "running", autoscaler.lines()  # never terminated with its pod on it
        assert refused >= 2  # asked again each run, the budget counted once
    assert f"1 failed: evicting pod default/{pods[1]}: 500 Internal Server Error: {webhook}" in stderr, stderr[-3000:]
    assert world.ec2_state(members[2]) == "terminated" and world.desired(asg) == 3


def test_a_taint_refused_with_500_spends_no_budget(tmp_path, moto_server):
    """The node consolidation chose is not tainted, so none of its pods leave for that choice: what
    the run kept before acting for it is taken back, and the run that taints it counts its two pods
    once (the version before counted them twice: 4 evictions spent, 2 carried out). Its group's
    target is not lowered for it either: the version before lowered it anyway, and the next run
    removed the node again, from the lowered target (4 -> 3 -> 2, the empty node terminated too)."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        webhook = 'Internal error occurred: failed calling webhook "nodes.example.com": connection refused'
        pool.kube.patch_errors[nodes[2]] = [status(500, "InternalError", webhook)]
        with drains.running(config, world.cluster) as autoscaler:
            autoscaler.wait_for(lambda line: "terminate 1" in line and acted(line), timeout=30)
            stderr = autoscaler.stderr()
        spent = drains.kept(pool)
    patches = [r for r in pool.kube.requests if r.method == "PATCH" and r.path == f"/api/v1/nodes/{nodes[2]}"]
    assert len(patches) >= 2 and not pool.kube.patch_errors[nodes[2]], autoscaler.lines()  # refused, then taken
    refused = f"{nodes[2]}: taint: patching node {nodes[2]}: 500 Internal Server Error: {webhook}"
    assert refused in stderr and f"spend on {nodes[2]} taken back" in stderr, stderr[-3000:]
    assert [(node, n) for _, node, n in spent.evictions] == [(nodes[2], 2)], spent
    assert drains.evictions(pool) == pods  # each asked to leave once
    states = [world.ec2_state(m) for m in members]
    assert states == ["running", "running", "terminated", "running"] and world.desired(asg) == 3, autoscaler.lines()


def test_a_node_deleted_mid_drain_is_let_go(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, _, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        pool.kube.hang("evictions")
        with drains.running(config, world.cluster) as autoscaler:
            drains.wait_for_unanswered(pool, autoscaler)
            gone = time.monotonic()
            for pod in pods:  # an operator deletes the node; the pod garbage collector its pods
                pool.kube.delete("pods", pod, "default")
            pool.kube.delete("nodes", nodes[3])
            pool.kube.answer_again()
            time.sleep(4 * drains.PERIOD)
            after = [line for at, line in autoscaler.out if at > gone]
            stderr = autoscaler.stderr()
        kept = drains.kept(pool)
    assert autoscaler.proc.returncode == -9 and "Traceback" not in stderr, stderr[-3000:]
    assert kept.keeping == (), kept  # the kept node is let go
    assert not any("(1 errors)" in line for line in after[-2:]), after  # no error run after run
    assert set(drains.evictions(pool)) <= set(pods)  # no other pod was asked to leave

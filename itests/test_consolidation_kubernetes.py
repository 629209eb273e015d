"""Consolidation on Kubernetes, end to end: a real autoscaler process, real Auto Scaling groups in
moto's server, and the stateful fake API server (``itests/stateful_api.py``) answering the real
``kubernetes`` client: nodes are drained through the Eviction API, and a disruption budget's refusal
leaves the node and its pod where they are until it lets go."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.aws_world import World
from itests.pool_harness import POOL
from itests.pool_harness import harness


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def fragmented(tmp_path, pool, members, **pool_extra):
    """Four 8-CPU nodes: two with 2 CPUs free in pieces, one running a single 1-CPU pod, one empty.
    13 CPUs run: at the setpoint 95% two nodes would do, but the slot reserve (two 4-CPU places)
    keeps the emptiest ones, so only consolidation can shrink the pool: it moves the 1-CPU pod into
    a gap and removes its node."""
    nodes = pool.join(members, cpus=8)
    for node in nodes[:2]:
        pool.run_pods(node, 1, 4, prefix=f"{node}-big")
        pool.run_pods(node, 1, 2, prefix=f"{node}-mid")
    lone = pool.run_pods(nodes[2], 1, 1, prefix="lone")[0]
    config = pool.configure(
        max_tasks_to_kill=0,
        draining=True,
        autoscaling={
            "setpoint": 0.95,
            "target_capacity_margin": 0,
            "slot_reserve": 2,
            "consolidation": {"enabled": True, "consolidate_after": 0, "surplus": 0},  # a pool of four
        },
        pool_extra=pool_extra,
    )
    return config, nodes, lone


def autoscaler(config, world, runs):
    command = [sys.executable, "-m", "clusterman.batch.autoscaler", "--env-config-path", config,
               "--cluster", world.cluster, "--pool", POOL, "--scheduler", "kubernetes",
               "--runs", str(runs), "--period-seconds", "2", "--budget-seconds", "30", "--no-splay"]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FAKE_CREDENTIALS}
    )


def test_a_fragmented_pool_consolidates_through_the_eviction_api(tmp_path, world):
    asg = world.asg(POOL, desired=4)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        config, nodes, lone = fragmented(tmp_path, pool, members)
        proc = autoscaler(config, world, runs=4)
        out, err = proc.communicate(timeout=120)
        evictions = [r.path for r in pool.kube.requests if r.method == "POST"]
    assert proc.returncode == 0, err
    runs = [line for line in out.splitlines() if "| target" in line]
    assert len(runs) == 4, out
    assert f"consolidation: remove {nodes[2]} (1 pods onto " in runs[0] and "target 4 -> 3" in runs[0], runs[0]
    assert evictions == [f"/api/v1/namespaces/default/pods/{lone}/eviction"], out
    assert sum("terminate 1" in r for r in runs[1:]) == 1, out  # once the watch saw the pod gone
    assert world.ec2_state(members[2]) == "terminated"
    assert world.desired(asg) == 3 and sorted(world.asg_members(asg)) == sorted(members[:2] + members[3:])


def test_a_disruption_budget_that_refuses_keeps_the_node_until_it_lets_go(tmp_path, world):
    asg = world.asg(POOL, desired=4)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        # a drain step each run (2 s): by default one at most every 15 s (redraining_delay_seconds)
        config, nodes, lone = fragmented(tmp_path, pool, members, draining={"redraining_delay_seconds": 1})
        pool.kube.budget_refuses.add(f"default/{lone}")
        seen: dict[str, str] = {}

        def let_go_after_two_refusals() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                tries = [r for r in pool.kube.requests if r.method == "POST"]
                if len(tries) >= 2:
                    # while the budget refused, the pod stayed and its node ran on, tainted
                    seen["pod"] = "there" if pool.kube.pod("default", lone) else "gone"
                    seen["instance"] = world.ec2_state(members[2])
                    seen["tainted"] = ",".join(pool.tainted())
                    pool.kube.budget_refuses.clear()
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=let_go_after_two_refusals, daemon=True)
        watcher.start()
        proc = autoscaler(config, world, runs=5)
        out, err = proc.communicate(timeout=180)
        watcher.join(timeout=5)
        posts = [r.path for r in pool.kube.requests if r.method == "POST"]
    assert proc.returncode == 0, err
    assert seen == {"pod": "there", "instance": "running", "tainted": nodes[2]}, (seen, out)
    assert posts[:3] == [f"/api/v1/namespaces/default/pods/{lone}/eviction"] * 3  # refused twice, then taken
    runs = [line for line in out.splitlines() if "| target" in line]
    assert "consolidation: remove" in runs[0] and not any("consolidation: remove" in r for r in runs[1:]), out
    assert world.ec2_state(members[2]) == "terminated" and world.desired(asg) == 3

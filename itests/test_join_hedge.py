"""The scale-up hedge and the hold while pods wait, end to end: an Auto Scaling group in moto's
server, the fake Kubernetes API server saying which instances joined and where pods run, the cycle
wired from srv-configs (docs/scaling.md, "While nodes join"). Times are real: moto stamps launches
with the clock."""

from __future__ import annotations

import copy
import time

import pytest

from itests.aws_world import World
from itests.pool_harness import harness


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def test_a_hedged_scale_up_holds_while_pods_wait_and_gives_back_what_they_did_not_need(tmp_path, world):
    """2 busy nodes and 3 pods waiting: 8 asked for (5 and a hedge of 3); while pods wait the
    target holds; once the first two new nodes run them, the 4 still joining are terminated."""
    asg = world.asg("web", desired=2)
    first = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        ready = pool.join(first)
        for node in ready:
            pool.run_pods(node, 1, 1.4)
        waiting = pool.run_pods("", 3, 1.4)  # 7 of 4 CPUs asked: ceil(2 × 175 / 70) = 5, a rise of 3
        pool.configure(autoscaling={"scale_up_hedge": 1})
        now = time.time()

        up = pool.cycle().run_once(now)
        assert up.decision is not None and up.decision.target_capacity == 8
        assert "hedge +3 for the join delay's spread (scale_up_hedge 100% of 3)" in up.decision.explanation
        assert world.desired(asg) == 8 and len(world.asg_members(asg)) == 8
        launched = [i for i in world.asg_members(asg) if i not in first]

        kube = pool.kube
        assert kube is not None
        kube.delete("pods", waiting[0], "default")  # one job gave up: the sizing dips to 4
        held = pool.cycle().run_once(now + 60)  # a fresh cycle lists what changed: no race with its watch
        assert held.decision is not None and held.decision.target_capacity == 8
        assert "pods wait for 6 launched nodes still joining: keep target 8" in held.decision.explanation
        assert world.desired(asg) == 8 and not pool.tainted()

        early = pool.join(launched[:2])  # the first two to join take the two waiting pods
        for node in early:
            kube.put("nodes", kube.nodes[node])
        for node, name in zip(early, waiting[1:], strict=True):
            pod = copy.deepcopy(kube.pods[("default", name)])
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Running"}
            kube.put("pods", pod)
        settled = pool.cycle().run_once(now + 120)
        assert settled.decision is not None and settled.decision.target_capacity < 8
        assert "still joining" not in settled.decision.explanation
        assert settled.decision.target_capacity == 4
        assert sorted(settled.decision.terminate) == sorted(launched[2:])  # the hedge, still joining
        assert not set(pool.tainted()) & (set(ready) | set(early))
    assert {world.ec2_state(i) for i in launched[2:]} == {"terminated"}
    assert world.desired(asg) == 4 and sorted(world.asg_members(asg)) == sorted(first + launched[:2])

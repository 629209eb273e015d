"""The safety guards, end to end: real resource groups in moto's server, the cycle wired from srv-configs.

Each test builds the autoscaler as the batch does (``build_cycle``) and runs it with ``run_once``;
the scheduler is simulated, or a fake Kubernetes API server where the test needs to say exactly
which instances joined and which pods run where. Times are real (moto stamps launches with the
clock), so runs are placed relative to ``time.time()``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.run.report import Outcome
from clusterman.state.carried import GROUP_TARGETS
from clusterman.state.pause import entity
from clusterman.state.store import StateItem
from clusterman.wiring.state_store import open_state_store
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.aws_world import pool_tag
from itests.pool_harness import harness


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def test_never_above_the_pool_max_nor_a_group_max_moto_does_not_enforce(tmp_path, world):
    small = world.asg("web", desired=1, max_size=3)  # moto would launch past MaxSize; we never ask it to
    large = world.asg("web", desired=1, max_size=10)
    with harness(tmp_path, world) as pool:
        pool.configure(tasks=40, max_capacity=7, max_weight_to_add=20)
        report = pool.cycle().run_once(time.time())
    assert report.decision is not None and report.decision.target_capacity == 7
    assert "max_capacity 7" in report.decision.explanation
    assert (world.desired(small), world.desired(large)) == (3, 4)
    assert (len(world.asg_members(small)), len(world.asg_members(large))) == (3, 4)


def test_never_below_the_pool_min_nor_a_group_min(tmp_path, world):
    loose = world.asg("web", desired=4)
    held = world.asg("web", desired=2, min_size=2)
    before = set(world.asg_members(loose))
    with harness(tmp_path, world) as pool:
        pool.configure(tasks=0, min_capacity=3)
        cycle = pool.cycle()
        first = cycle.run_once(time.time())
        second = cycle.run_once(time.time() + 60)
    assert first.decision is not None and first.decision.target_capacity == 3
    assert second.decision is not None and second.decision.target_capacity == 3 and not second.decision.terminate
    assert (world.desired(loose), world.desired(held)) == (1, 2)
    assert len(world.asg_members(loose)) == 1 and len(world.asg_members(held)) == 2
    assert set(world.asg_members(loose)) < before  # the survivor is one of the originals


@pytest.mark.parametrize("protected", [True, False], ids=["protected", "unprotected"])
def test_busy_nodes_are_never_killed_past_max_tasks_to_kill(tmp_path, world, protected):
    """Also in a group whose instances are not protected from scale-in, where a lowered desired
    capacity would let AWS (and moto) kill instances of its choosing, the busy one first here."""
    asg = world.asg("web", desired=4, protected=protected)
    with harness(tmp_path, world, "kubernetes") as pool:
        nodes = pool.join(world.asg_members(asg))
        pool.run_pods(nodes[0], 3, 0.1)
        for node in nodes[1:]:
            pool.run_pods(node, 1, 0.1)  # 0.6 cpus on 8: one node is plenty
        pool.configure(max_tasks_to_kill=0)
        now = time.time()
        first = pool.cycle().run_once(now)
        assert first.decision is not None and first.decision.target_capacity == 1
        assert pool.tainted() == sorted(nodes[1:])  # fewest tasks first; the 3-pod node stays
        assert not first.decision.terminate and len(world.asg_members(asg)) == 4  # busy: not killed

        pool.configure(max_tasks_to_kill=2)  # a restart with a budget of 2 tasks a run
        second = pool.cycle().run_once(now + 60)
        assert second.decision is not None and len(second.decision.terminate) == 2
        killed = {n.removeprefix("node-") for n in second.decision.terminate}
        assert {world.ec2_state(i) for i in killed} == {"terminated"}
        # protected, the target is the decision's; else no lower than the instances that stay
        assert len(world.asg_members(asg)) == 2 and world.desired(asg) == (1 if protected else 2)

        pool.forget_terminated()
        third = pool.cycle().run_once(now + 120)
        assert third.decision is not None and len(third.decision.terminate) == 1
        assert world.asg_members(asg) == [nodes[0].removeprefix("node-")]
    kills = pool.events("NODE_TERMINATE")
    assert len(kills) == 3 and all("within max_tasks_to_kill 2" in e.event.message for e in kills)


def test_capacity_loss_blocks_scale_down_even_across_a_restart(tmp_path, world):
    asg = world.asg("web", desired=6)
    with harness(tmp_path, world, "kubernetes") as pool:
        nodes = pool.join(world.asg_members(asg))
        for node in nodes:
            pool.run_pods(node, 1, 1.4)  # 70%: nothing to do
        pool.configure(autoscaling={"prevent_scale_down_after_capacity_loss": True, "instance_loss_threshold": 1})
        now = time.time()
        calm = pool.cycle().run_once(now)
        assert calm.decision is not None and calm.decision.target_capacity == 6 and not calm.decision.taint

        # two spot reclaims (the group replaces them) and most of the work finishes
        for node in nodes[:2]:
            world.autoscaling.terminate_instance_in_auto_scaling_group(
                InstanceId=node.removeprefix("node-"), ShouldDecrementDesiredCapacity=False
            )
        pool.remove_nodes(nodes[:2])
        for node in nodes[2:5]:
            pool.kube.pods.pop(("default", f"{node}-0"))

        restarted = pool.cycle()  # the memory of the six joined nodes comes from the state store
        blocked = restarted.run_once(now + 60)
        assert blocked.decision is not None and blocked.decision.reason.name == "CAPACITY_LOSS"
        assert "2 nodes lost since the last run > instance_loss_threshold 1" in blocked.decision.explanation
        assert blocked.decision.target_capacity == 6 and not blocked.decision.taint and not pool.tainted()

        shrunk = restarted.run_once(now + 120)  # no new loss: the guard lets go
        assert shrunk.decision is not None and shrunk.decision.target_capacity < 6 and pool.tainted()
    assert "DECISION_CAPACITY_LOSS" in {e.event.detail.name for e in pool.events()}


def test_orphans_are_terminated_past_the_threshold_and_joined_nodes_are_not(tmp_path, world):
    asg = world.asg("web", desired=4)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        joined = pool.join(members[:2])
        for node in joined:
            pool.run_pods(node, 1, 1.4)
        pool.run_pods("", 2, 1.4)  # pending: the pool needs all four
        pool.configure(autoscaling={"orphan_instance_uptime_threshold_seconds": 600})
        cycle = pool.cycle()
        launched = time.time()

        early = cycle.run_once(launched + 60)
        assert early.decision is not None and early.decision.terminate == ()
        assert world.asg_members(asg) == members  # still joining: kept

        late = cycle.run_once(launched + 700)
        assert late.decision is not None
        assert sorted(late.decision.terminate) == members[2:]
        assert "not joined" in late.decision.node_reasons[members[2]]
    assert {world.ec2_state(i) for i in members[2:]} == {"terminated"}
    now_in = world.asg_members(asg)
    assert set(members[:2]) <= set(now_in) and world.desired(asg) == 4 and len(now_in) == 4  # replaced
    cleaned = {e.event.object_id for e in pool.events("NODE_ORPHAN")}
    assert cleaned == set(members[2:])


@pytest.mark.parametrize("action", ["DescribeAutoScalingGroups", "SetDesiredCapacity"])
def test_a_failing_group_does_not_stop_the_other(tmp_path, world, moto_server, action):
    """Both groups read once (an unreadable group's capacity counts within max_capacity, so the
    run must have read it before), then more work comes while one group fails."""
    broken = world.asg("web", desired=1)
    good = world.asg("web", desired=1)
    with (
        FaultyProxy(moto_server.url) as proxy,
        harness(tmp_path, world, "kubernetes", aws_url=proxy.url) as pool,
    ):
        nodes = pool.join(world.asg_members(broken) + world.asg_members(good))
        for node in nodes:
            pool.run_pods(node, 1, 1.4)  # 70%: nothing to do
        pool.configure(max_weight_to_add=20)
        cycle = pool.cycle()
        now = time.time()
        calm = cycle.run_once(now)
        assert calm.decision is not None and calm.decision.target_capacity == 2
        proxy.add(Fault(action=action, contains=broken, code="AccessDenied", status=403, times=None))
        for node in nodes:  # 120%: the pool needs more (put: the watches see them)
            for name in pool.run_pods(node, 1, 1.0, prefix=f"{node}-more"):
                pool.kube.put("pods", pool.kube.pods.pop(("default", name)))  # an ADDED event
        watched = cycle.connector.cache().pod_reflector  # type: ignore[attr-defined]
        deadline = time.monotonic() + 15
        while int(watched.version or 0) < pool.kube.version:  # the run reads them from its watch cache
            assert time.monotonic() < deadline, "the watch cache did not see the new pods"
            time.sleep(0.02)
        report = cycle.run_once(now + 60)
    assert report.outcome is Outcome.ACTED and report.decision is not None
    assert world.desired(broken) == 1 and world.desired(good) > 1, report.line()
    errors = [e.event.object_id + e.event.message for e in pool.events("ERROR_CLOUD")]
    assert any(broken in e for e in errors) and not any(good in e for e in errors)


def test_a_spot_fleet_follows_decisions_and_loses_exactly_the_chosen_instances(tmp_path, world):
    fleet = world.fleet("web", target=2)
    with harness(tmp_path, world) as pool:
        pool.configure(groups=("sfr",), tasks=10, max_weight_to_add=20)
        up = pool.cycle().run_once(time.time())
        assert up.decision is not None and up.decision.target_capacity == 8
        assert world.fleet_target(fleet) == 8 and len(world.fleet_members(fleet)) == 8
        before = set(world.fleet_members(fleet))

        pool.configure(groups=("sfr",), tasks=1)  # the work is gone (a restart with the new file)
        down = pool.cycle().run_once(time.time() + 60)
        assert down.decision is not None and down.decision.target_capacity == 1
    chosen = set(down.decision.terminate)
    assert len(chosen) == 7 and chosen <= before
    assert set(world.fleet_members(fleet)) == before - chosen and world.fleet_target(fleet) == 1
    assert {world.ec2_state(i) for i in chosen} == {"terminated"}


def test_throttling_through_whole_runs_never_doubles_a_scale_up(tmp_path, world, moto_server):
    asg = world.asg("web", desired=1)
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, aws_url=proxy.url) as pool:
        config = pool.configure(tasks=10)
        # applied, then throttled (botocore tries again with the same absolute value); reads throttled too
        proxy.add(Fault(action="SetDesiredCapacity", after=True, times=2))
        proxy.add(Fault(action="DescribeAutoScalingGroups", times=2))
        proxy.add(Fault(action="DescribeInstances", after=True, times=1))
        command = [sys.executable, "-m", "clusterman.batch.autoscaler", "--env-config-path", config,
                   "--cluster", world.cluster, "--pool", "web", "--scheduler", "simulated",
                   "--runs", "3", "--period-seconds", "1", "--budget-seconds", "30", "--no-splay"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **FAKE_CREDENTIALS})  # fmt: skip
        sent = [c["DesiredCapacity"] for c in proxy.calls("SetDesiredCapacity")]
    assert done.returncode == 0, done.stderr
    runs = [line for line in done.stdout.splitlines() if "| target" in line]
    assert len(runs) == 3, done.stdout
    assert "target 1 -> 8" in runs[0] and all("target 8 -> 8" in r for r in runs[1:]), done.stdout
    assert sent == ["8", "8", "8"]  # one change, sent (and retried) as the same absolute value
    assert world.desired(asg) == 8 and len(world.asg_members(asg)) == 8


def test_a_mistagged_group_of_another_pool_is_reported_and_holds_nothing(tmp_path, world):
    key = f"itest:pool-{world.cluster}"  # seen by this test only (moto is shared by the session)
    ours = world.asg("web", desired=4, extra_tags={key: pool_tag(world.cluster, "web")})
    world.asg("other", desired=1, extra_tags={key: "batch-pool"})  # someone else's, tagged by hand
    with harness(tmp_path, world) as pool:
        pool.configure(tag_key=key, tasks=1)
        report = pool.cycle().run_once(time.time())
    assert report.decision is not None and report.decision.target_capacity == 1, report.line()
    assert world.desired(ours) == 1 and len(world.asg_members(ours)) == 1
    (warning,) = pool.events("ERROR_CLOUD")
    assert "expected JSON like" in warning.event.message


def test_a_group_that_cannot_be_read_still_counts_within_max_capacity(tmp_path, world, moto_server):
    """A pool at its max_capacity 6 (groups of 5 and 1) whose larger group then cannot be read,
    under demand for more: the other group may not grow past what the maximum leaves. A restart
    meanwhile counts the group at its target as the last process read it (kept in the state store);
    a restart that finds no targets kept does not grow the pool at all."""
    broken = world.asg("web", desired=5)
    good = world.asg("web", desired=1)
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, aws_url=proxy.url) as pool:
        pool.configure(tasks=12, max_weight_to_add=20, max_capacity=6)
        cycle = pool.cycle()
        full = cycle.run_once(time.time())
        assert full.decision is not None and full.decision.target_capacity == 6  # at its max, as it is
        proxy.add(
            Fault(action="DescribeAutoScalingGroups", contains=broken, code="AccessDenied", status=403, times=None)
        )
        partial = cycle.run_once(time.time() + 60)
        assert partial.decision is not None and "max_capacity 6 less 5 in groups not read" in partial.line()
        assert (world.desired(broken), world.desired(good)) == (5, 1), partial.line()  # before: (5, 6)

        restarted = pool.cycle().run_once(time.time() + 120)
        assert restarted.decision is not None and "max_capacity 6 less 5 in groups not read" in restarted.line()
        assert (world.desired(broken), world.desired(good)) == (5, 1), restarted.line()

        forgotten = pool.setup()
        empty = StateItem(GROUP_TARGETS, entity(forgotten.identity), 0, payload={"targets": {}})
        open_state_store(forgotten.main).put(empty)  # as a store written before targets were kept
        unknown = pool.cycle().run_once(time.time() + 180)
        assert unknown.decision is not None and "of unknown capacity: no growth" in unknown.line()
        assert (world.desired(broken), world.desired(good)) == (5, 1), unknown.line()

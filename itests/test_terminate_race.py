"""A node's work read right before it is terminated, not only in the snapshot: a pod that came
onto a tainted node after the run read the pool (bound by name, or tolerating the taint) keeps
the node, and so does a task a Mesos framework launched on an agent in its maintenance window
(frameworks may ignore the inverse offers). Real Auto Scaling groups in moto's server, the
stateful fake API server or master, the cycle wired from srv-configs (``itests/pool_harness.py``)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from itests.aws_world import World
from itests.pool_harness import harness


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def bound_pod(node: str, name: str) -> dict[str, Any]:
    """A Job's pod bound by name to ``node`` (``spec.nodeName``: no scheduler, no taint check)."""
    return {
        "metadata": {"name": name, "namespace": "default", "ownerReferences": [{"kind": "Job", "name": "j"}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Running"},
    }


def test_a_pod_bound_after_the_snapshot_keeps_its_node(tmp_path, world):
    asg = world.asg("web", desired=2)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        assert pool.kube is not None
        kube = pool.kube
        busy, empty = pool.join(members)
        pool.run_pods(busy, 2, 0.1)
        pool.configure(max_tasks_to_kill=0, draining=True)

        def bind(request, answer):  # the pod arrives as the run taints the empty node
            if request.method == "PATCH" and request.path.endswith(empty) and kube.pod("default", "job-0") is None:
                kube.put("pods", bound_pod(empty, "job-0"))

        kube.after_answer = bind
        report = pool.cycle().run_once(time.time())
        assert report.decision is not None and report.decision.terminate == (empty,)  # it read the node empty
        assert pool.tainted() == [empty]
        assert world.ec2_state(empty.removeprefix("node-")) == "running", report.applied
        assert report.applied is not None
        assert any("1 task(s) on it now, 0 when decided" in m for _, m in report.applied.errors), report.applied.errors

        assert kube.pod("default", "job-0") is None  # evicted in the same run
        kube.after_answer = lambda request, answer: None
        later = [pool.cycle().run_once(time.time() + 60 * k) for k in (1, 2)]  # then it goes
        evicted = [r.path for r in kube.requests if r.method == "POST"]
        assert evicted == ["/api/v1/namespaces/default/pods/job-0/eviction"], [r.line() for r in later]
        assert world.ec2_state(empty.removeprefix("node-")) == "terminated", [r.line() for r in later]
        assert world.ec2_state(busy.removeprefix("node-")) == "running" and world.desired(asg) == 1


def test_a_pod_the_watch_cache_has_not_seen_keeps_its_node(tmp_path, world):
    """The node tainted and empty; a pod comes onto it while the watches send nothing (within the
    cache's stale limit, so its view counts as fresh): the run after reads the node empty."""
    asg = world.asg("web", desired=2)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        assert pool.kube is not None
        kube = pool.kube
        busy, empty = pool.join(members)
        pool.run_pods(busy, 2, 0.1)
        pool.configure(max_tasks_to_kill=0, draining=True, autoscaling={"soft_delete_grace_period_seconds": 30})
        cycle = pool.cycle()
        now = time.time()
        first = cycle.run_once(now)
        assert first.decision is not None and first.decision.taint == (empty,) and not first.decision.terminate
        assert world.ec2_state(empty.removeprefix("node-")) == "running"

        kube.hang("streams")  # watches answered, then silent: the cache hears nothing new
        kube.put("pods", bound_pod(empty, "job-0"))
        second = cycle.run_once(now + 60)
        assert second.decision is not None and second.decision.terminate == (empty,), second.line()
        assert world.ec2_state(empty.removeprefix("node-")) == "running", second.line()
        assert second.applied is not None
        assert any("1 task(s) on it now, 0 when decided" in m for _, m in second.applied.errors), second.line()
        assert kube.pod("default", "job-0") is None  # drained in the same run: the next may remove it
        kube.answer_again()


# --- Mesos ----------------------------------------------------------------------------------------


def mesos_pool(tmp_path, world, pool):
    """Two instances of an ASG registered as agents, the first running 2 tasks; returns (asg,
    {agent id: instance id}, busy agent, empty agent)."""
    asg = world.asg("web", desired=2)
    members = world.asg_members(asg)
    assert pool.mesos is not None
    agents = pool.register(members)
    busy, empty = agents
    for i in range(2):
        pool.mesos.add_task(busy, f"web.{i}", 0.1)
    pool.configure(max_tasks_to_kill=0, draining=True)
    return asg, dict(zip(agents, members, strict=True)), busy, empty


def on_window_posted(master, act):
    """``act`` once, as the master answers the run's maintenance schedule (the taint): after the
    snapshot, before the termination."""

    def hook(request, answer):
        if (request.method, request.path) == ("POST", "/master/maintenance/schedule"):
            master.after_answer = lambda request, answer: None
            act()

    master.after_answer = hook


def downs(master):
    return [r.json() for r in master.writes if r.path == "/master/machine/down"]


def test_a_task_launched_after_the_snapshot_keeps_its_agent(tmp_path, world):
    with harness(tmp_path, world, "mesos") as pool:
        asg, instances, busy, empty = mesos_pool(tmp_path, world, pool)
        master = pool.mesos
        assert master is not None
        on_window_posted(master, lambda: master.add_task(empty, "batch.0", 0.1, framework="chronos"))
        report = pool.cycle().run_once(time.time())
        assert report.decision is not None and report.decision.terminate == (empty,)  # it read the agent empty
        assert report.applied is not None
        assert world.ec2_state(instances[empty]) == "running", report.applied
        assert any("1 task(s) on it now, 0 when decided" in m for _, m in report.applied.errors), report.applied.errors
        assert downs(master) == [] and master.tasks_on(empty) == ["batch.0"]  # never brought down
        drained = report.applied.drains[empty]  # drained in the same run: it waits for the framework
        assert (drained.status.value, drained.remaining) == ("not_now", 1), drained

        master.finish_tasks(empty)  # the framework moves its task off
        later = [pool.cycle().run_once(time.time() + 60 * k) for k in (1, 2)]
        assert world.ec2_state(instances[empty]) == "terminated", [r.line() for r in later]
        assert len(downs(master)) == 1 and world.ec2_state(instances[busy]) == "running"
        assert world.desired(asg) == 1


def test_an_agent_chosen_with_a_task_keeps_it_when_one_more_comes(tmp_path, world):
    """Chosen within max_tasks_to_kill with one task that also uses revocable CPUs: the snapshot
    counts it once, as the master does, so one more task launched after it keeps the agent."""
    with harness(tmp_path, world, "mesos") as pool:
        _, instances, busy, light = mesos_pool(tmp_path, world, pool)
        master = pool.mesos
        assert master is not None
        master.add_task(busy, "web.2", 0.1)  # the busiest either way: the other agent is chosen
        master.add_task(light, "spark.0", 0.1, revocable_cpus=0.5)
        pool.configure(max_tasks_to_kill=3, draining=True)
        on_window_posted(master, lambda: master.add_task(light, "batch.0", 0.1, framework="chronos"))
        report = pool.cycle().run_once(time.time())
        assert report.decision is not None and report.decision.terminate == (light,), report.line()
        assert report.applied is not None
        assert world.ec2_state(instances[light]) == "running", report.applied
        assert report.decision.terminate_with == {light: 1}
        assert any("2 task(s) on it now, 1 when decided" in m for _, m in report.applied.errors), report.applied.errors
        assert downs(master) == [] and master.tasks_on(light) == ["spark.0", "batch.0"]


def test_a_master_that_hangs_right_before_termination_keeps_the_agent(tmp_path, world, caplog):
    """The frameworks' tasks cannot be read (the master holds the GET past the lifecycle's timeout,
    a third of the run's budget): the agent's work is unknown, so it is not brought down."""
    with harness(tmp_path, world, "mesos") as pool:
        _, instances, _, empty = mesos_pool(tmp_path, world, pool)
        master = pool.mesos
        assert master is not None
        on_window_posted(master, lambda: master.hang("/master/frameworks"))
        with caplog.at_level(logging.WARNING, logger="clusterman.cluster.mesos_lifecycle"):
            report = pool.cycle(budget_seconds=6).run_once(time.time())
        master.answer_again()
        assert report.decision is not None and report.decision.terminate == (empty,)
        assert report.applied is not None
        assert world.ec2_state(instances[empty]) == "running", report.applied
        errors = [m for n, m in report.applied.errors if n == empty]
        assert "not terminated: its work could not be read right before termination" in errors[0], errors
        assert downs(master) == []
        # held twice: the read right before termination, then the same run's drain of the agent kept
        assert [r.path for r in master.unanswered] == ["/master/frameworks"] * 2
        assert report.applied.drains[empty].status.value == "failed"
        read = [r for r in caplog.records if "before terminating" in r.getMessage()]
        assert len(read) == 1 and "Read timed out" in read[0].getMessage(), [r.getMessage() for r in read]


def test_a_master_that_refuses_right_before_termination_keeps_the_agent(tmp_path, world, caplog):
    with harness(tmp_path, world, "mesos") as pool:
        _, instances, _, empty = mesos_pool(tmp_path, world, pool)
        master = pool.mesos
        assert master is not None
        on_window_posted(master, lambda: master.refusing.update({"/master/frameworks": 503}))
        cycle = pool.cycle()
        with caplog.at_level(logging.WARNING, logger="clusterman.cluster.mesos_lifecycle"):
            report = cycle.run_once(time.time())
        assert report.applied is not None
        assert world.ec2_state(instances[empty]) == "running", report.applied
        assert any("its work could not be read" in m for n, m in report.applied.errors if n == empty)
        assert downs(master) == []
        read = [r.getMessage() for r in caplog.records if "before terminating" in r.getMessage()]
        assert len(read) == 1 and "503 Service Unavailable: No leader elected" in read[0], read

        master.refusing.clear()  # a leader again: the next run reads the agent empty, and it goes
        later = cycle.run_once(time.time() + 60)
        assert world.ec2_state(instances[empty]) == "terminated", later.line()
        assert len(downs(master)) == 1

"""A node's work read right before it is terminated, not only in the snapshot: a pod that came
onto a tainted node after the run read the pool (bound by name, or tolerating the taint) keeps
the node. Real Auto Scaling groups in moto's server, the stateful fake API server, the cycle wired
from srv-configs (``itests/pool_harness.py``)."""

from __future__ import annotations

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

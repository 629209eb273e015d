"""A node migration end to end, in the pool's own runs: ``clusterman migrate`` creates the
NodeMigration on the stateful fake API server, the autoscaler's run (the real cycle, wired from
srv-configs) replaces the pool's old-kernel nodes two at a time through the drain machinery, an
Auto Scaling group in moto's server launches their replacements, and the resource's label and
status say how it goes."""

from __future__ import annotations

import time

import pytest

from clusterman.cli.main import main
from clusterman.decision.migration_request import STATUS_LABEL
from itests.aws_world import World
from itests.pool_harness import POOL
from itests.pool_harness import harness

OLD, NEW = "5.10.0-1034-aws", "5.15.0-1051-aws"
MIGRATION = {
    "trigger": {"event": True},
    "strategy": {"rate": 2, "bootstrap_wait": 0, "bootstrap_timeout": "10m"},
    "health_check_interval": "1m",
}


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def configure(pool, **migration):
    """A pool kept at 4 nodes by its minimum, whose disruption budget is half of it."""
    budget = {"consolidation": {"max_disrupted_share": 0.5}}
    return pool.configure(min_capacity=4, draining=True, node_migration={**MIGRATION, **migration}, autoscaling=budget)


def settle_cloud(pool, asg):
    """What the cloud and the kubelets do between runs: new instances join with the new kernel,
    terminated ones leave the cluster."""
    pool.forget_terminated(watched=True)
    members = pool.world.asg_members(asg)
    new = [i for i in members if f"node-{i}" not in pool.kube.nodes and pool.world.ec2_state(i) == "running"]
    pool.join(new, kernel=NEW, watched=True)


def migrate(config, world, *words):
    assert main(["--env-config-path", config, "migrate", "--cluster", world.cluster, "--pool", POOL, *words]) == 0


def test_an_event_replaces_every_old_node_two_at_a_time_replacements_first(tmp_path, world, capsys):
    asg = world.asg(POOL, desired=4)
    old = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        for node in pool.join(old, kernel=OLD):
            pool.run_pods(node, 1, 0.1)
        config = configure(pool)
        migrate(config, world, "kernel", "ge", "5.15")
        (name,) = pool.kube.migrations
        cycle = pool.cycle()
        lines, desired = [], []
        where = ["--cluster", world.cluster, "--pool", POOL]
        for _ in range(12):
            report = cycle.run_once(time.time())
            lines.append(report.line())
            desired.append(world.desired(asg))
            settle_cloud(pool, asg)
            if len(lines) == 1:  # what an operator sees meanwhile
                assert main(["--env-config-path", config, "status", *where, "--no-events"]) == 0
                shown = [line for line in capsys.readouterr().out.splitlines() if "node migration" in line]
            if pool.kube.migrations[name]["metadata"]["labels"][STATUS_LABEL] == "completed":
                break
        resource = pool.kube.migrations[name]
    assert resource["metadata"]["labels"][STATUS_LABEL] == "completed", "\n".join(lines)
    status = resource["status"]
    assert (status["state"], status["nodesDone"], status["nodesLeft"], status["failedDrains"]) == (
        "completed", 4, 0, 0,
    )  # fmt: skip
    assert not set(old) & set(world.asg_members(asg))  # every old instance replaced
    assert {n["status"]["nodeInfo"]["kernelVersion"] for n in pool.kube.nodes.values()} == {NEW}
    # replacements first: the group grew to 6 before any old node went, and never shrank below 4
    assert desired[0] == 6 and min(desired) >= 4, desired
    assert shown[0].startswith(f"node migration {name} (event): step 1: replacing 2 node(s), 0 done, 4 left, ")
    assert "drains failed 0 of 3 allowed" in shown[0] and "(within expected_duration)" in shown[0]
    assert "migration " + name + ": step 1: replacing 2 node(s)" in lines[0]
    assert "node_migration: noticed" in lines[0] and "tainted" not in lines[0]
    # the replacements joined (a run or two later, as moto starts them), then the old nodes drained
    draining = next(i for i, line in enumerate(lines) if "step 1: draining 2 node(s)" in line)
    assert "node_migration: tainted, evicted 1, 0 left" in lines[draining]
    assert all("tainted" not in line for line in lines[:draining])
    assert "node_migration: terminated" in lines[draining + 1]  # once its pod was gone
    events = [e.event.message for e in pool.events("POOL_MIGRATION")]
    assert events[0] == f"{name}: started: kernel ge 5.15: 4 node(s) to replace"
    assert events[-1].startswith(f"{name}: step 2: replacements ready") or "completed" in events[-1]
    notices = pool.events("NODE_NOTICE")
    assert len(notices) == 4 and all("node_migration" in e.event.message for e in notices)
    evictions = [r for r in pool.kube.requests if r.method == "POST" and r.path.endswith("/eviction")]
    assert len(evictions) == 4  # each pod moved once, through the Eviction API


def test_a_pool_that_takes_resources_where_the_crd_is_missing_runs_on_and_says_so(tmp_path, world):
    asg = world.asg(POOL, desired=2)
    with harness(tmp_path, world, "kubernetes") as pool:
        pool.join(world.asg_members(asg), kernel=OLD)
        configure(pool)
        pool.kube.crd_installed = False
        report = pool.cycle().run_once(time.time())
        (error,) = [e.event.message for e in pool.events("ERROR_CLOUD") if "NodeMigration" in e.event.message]
    assert report.outcome.value == "acted" and report.decision is not None  # the run goes on without it
    assert error.startswith("cannot read the notices of nodes to replace: node migration: cannot read the ")
    assert "404 Not Found" in error and error.endswith("(is the NodeMigration CRD installed? deploy/kubernetes/shared)")

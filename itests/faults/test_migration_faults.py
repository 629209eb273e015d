"""What goes wrong in a node migration, each against a real autoscaler process, its Auto Scaling
group in moto's server and the stateful fake API server, the cluster played around them
(``itests/faults/migrations.py``): replacements that never become ready, a disruption budget that
refuses a node's drain, ``migrate-stop`` mid-step, two migrations for one pool, and a resource
that cannot run. Each ends with the resource's status saying so and the pool healthy."""

from __future__ import annotations

import pytest

from clusterman.cli.main import main
from clusterman.decision.migration_request import STATUS_LABEL
from itests.faults.autoscaler_procs import acted
from itests.faults.migrations import PERIOD
from itests.faults.migrations import autoscaler
from itests.faults.migrations import cluster
from itests.faults.migrations import configure
from itests.faults.migrations import label
from itests.faults.migrations import migrate
from itests.faults.migrations import old_pool
from itests.faults.migrations import record
from itests.faults.migrations import status
from itests.faults.migrations import wait_until
from itests.pool_harness import POOL
from itests.stateful_api import status as status_code


def tainted_ever(pool, nodes):
    """The nodes of ``nodes`` the autoscaler ever wrote a taint on."""
    patched = {r.path.rsplit("/", 1)[1] for r in pool.kube.requests if r.method == "PATCH" and "/nodes/" in r.path}
    return sorted(n for n in nodes if n in patched)


def test_replacements_that_never_become_ready_fail_the_migration_and_leave_the_pool_as_it_was(tmp_path, moto_server):
    with old_pool(tmp_path, moto_server, count=4) as (world, asg, old, pool), cluster(pool, asg) as around:
        around.joining = False  # the new instances boot, and never join
        config = configure(pool, count=4, strategy={"bootstrap_timeout": "6s"})
        name = migrate(pool, config, "kernel", "ge", "5.15")
        proc = autoscaler(config, world)
        try:
            wait_until(lambda: world.desired(asg) == 6, 60, "replacements asked for", proc)
            wait_until(lambda: label(pool, name) == "failed", 60, "failed", proc)
            # its replacements are withdrawn at once: the pool goes back to its 4 nodes
            wait_until(lambda: world.desired(asg) == 4, 60, "the replacements withdrawn", proc)
        finally:
            proc.stop()
        reason = status(pool, name)["reason"]
    assert reason.startswith("replacements not ready within bootstrap_timeout 6s (4 of target 6 joined)"), reason
    assert reason.endswith("the step's nodes are left as they were")
    assert tainted_ever(pool, [f"node-{i}" for i in old]) == []  # never drained
    assert all(world.ec2_state(i) == "running" for i in old) and sorted(world.asg_members(asg)) == sorted(old)


def test_a_disruption_budget_refusing_a_drain_counts_against_allowed_failed_drains(tmp_path, moto_server):
    with old_pool(tmp_path, moto_server, count=4) as (world, asg, old, pool), cluster(pool, asg):
        stuck = sorted(old)[0]  # the oldest by id: all launched together, the first chosen
        (pod,) = [k[1] for k, p in pool.kube.pods.items() if p["spec"].get("nodeName") == f"node-{stuck}"]
        pool.kube.budget_refuses.add(f"default/{pod}")
        config = configure(pool, count=4, strategy={"allowed_failed_drains": 1})
        main_file = pool.dir / "pools" / world.cluster / f"{POOL}.kubernetes"
        main_file.write_text(main_file.read_text() + "draining: {draining_time_threshold_seconds: 3}\n")
        name = migrate(pool, config, "kernel", "ge", "5.15")
        proc = autoscaler(config, world)
        try:
            wait_until(lambda: label(pool, name) == "failed", 100, "failed", proc)
        finally:
            proc.stop()
        final = status(pool, name)
        evictions = [r.path for r in pool.kube.requests if r.method == "POST" and r.path.endswith(f"/{pod}/eviction")]
    assert final["reason"] == "2 drains failed > allowed_failed_drains 1" and final["failedDrains"] == 2, final
    assert final["nodesDone"] == 3  # the others were replaced; the stuck one was tried twice, requeued once
    assert len(evictions) >= 2 and pool.kube.pod("default", pod) is not None  # never evicted: it runs on
    assert world.ec2_state(stuck) == "running" and f"node-{stuck}" not in pool.tainted()  # back in the pool


def test_migrate_stop_mid_step_withdraws_the_step_s_replacements(tmp_path, moto_server):
    with old_pool(tmp_path, moto_server, count=4) as (world, asg, _, pool), cluster(pool, asg) as around:
        config = configure(pool, count=4)
        name = migrate(pool, config, "kernel", "ge", "5.15")
        proc = autoscaler(config, world)
        try:
            in_step_2 = lambda: status(pool, name).get("step", "").startswith("step 2: replacing")  # noqa: E731
            wait_until(in_step_2, 60, "replacing in step 2", proc)
            around.joining = False  # step 2's replacements are still booting when it is stopped
            batch = [n.removeprefix("node-") for n in record_batch(pool)]
            command = ["--env-config-path", config, "migrate-stop", "--cluster", world.cluster, "--pool", POOL]
            assert main(command) == 0
            stopped = wait_until(lambda: label(pool, name) == "skipped", 30, "stopped", proc)
            wait_until(lambda: world.desired(asg) == 4, 60, "back to 4", proc)
            proc.wait_for(acted, timeout=30, after=stopped + PERIOD)
            after = [line for at, line in proc.out if at > stopped + PERIOD]
        finally:
            proc.stop()
        final = status(pool, name)
    assert (final["state"], final["reason"], final["nodesDone"]) == ("skipped", "stopped by migrate-stop", 2)
    assert len(batch) == 2 and not set(batch) & set(around.terminated[:2])  # step 1's were the two done
    assert after and not any("node_migration" in line or "| migration" in line for line in after), after


def record_batch(pool):
    active = record(pool).active
    assert active is not None
    return active.batch


def test_a_second_migration_for_the_pool_waits_for_the_first(tmp_path, moto_server):
    with old_pool(tmp_path, moto_server, count=4) as (world, asg, _, pool), cluster(pool, asg):
        config = configure(pool, count=4)
        first = migrate(pool, config, "kernel", "ge", "5.15")
        second = migrate(pool, config, "uptime", "lt", "1d")  # the replacements meet it: nothing to do
        proc = autoscaler(config, world)
        seen: list[tuple[str, str]] = []

        def both() -> bool:
            now = (label(pool, first), label(pool, second))
            if not seen or seen[-1] != now:
                seen.append(now)
            return now == ("completed", "completed")

        try:
            wait_until(lambda: status(pool, second).get("reason", "").startswith("waiting"), 30, "waiting", proc)
            reason = status(pool, second)["reason"]
            wait_until(both, 100, "both completed", proc)
        finally:
            proc.stop()
    assert reason == f"waiting: {first} migrates the pool first"
    assert ("inprogress", "pending") in seen and ("inprogress", "inprogress") not in seen, seen


@pytest.mark.parametrize(
    ("spec", "reason", "status_fails"),
    [
        ({"condition": {"trait": "kernel", "operator": "ge", "target": "ok"}}, "refused: spec.condition: target", 0),
        # its status write fails once: the reason is written at a later run (its label waits for it)
        ({"label_selectors": ["team in (web"]}, "refused: spec.label_selectors: label selector 'team in (web'", 1),
    ],
)
def test_a_malformed_resource_is_refused_with_its_reason_and_nothing_else_is_affected(
    tmp_path, moto_server, spec, reason, status_fails
):
    with old_pool(tmp_path, moto_server, count=2) as (world, asg, _, pool), cluster(pool, asg):
        config = configure(pool, count=2)
        good = {
            "cluster": world.cluster,
            "pool": POOL,
            "condition": {"trait": "kernel", "operator": "ge", "target": "5.15"},
        }
        # as kubectl apply writes it: the schema's types hold, our reading refuses it
        meta = {"name": "bad", "labels": {STATUS_LABEL: "pending"}, "creationTimestamp": "2026-01-01T00:00:00Z"}
        pool.kube.put("nodemigrations", {"metadata": meta, "spec": {**good, **spec}})
        pool.kube.patch_errors["nodemigrations/bad/status"] = [
            status_code(500, "InternalError", "etcdserver: request timed out")
        ] * status_fails
        name = migrate(pool, config, "kernel", "ge", "5.15")
        proc = autoscaler(config, world)
        try:
            wait_until(lambda: label(pool, "bad") == "failed", 30, "refused", proc)
            wait_until(lambda: label(pool, name) == "completed", 60, "the good one completed", proc)
        finally:
            proc.stop()
        bad = status(pool, "bad")
    assert bad.get("reason", "").startswith(reason), bad
    assert status(pool, name)["nodesDone"] == 2

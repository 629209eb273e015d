"""``clusterman status``, ``manage``, ``list-clusters`` and ``list-pools`` over moto's server.

The commands run in process through ``clusterman.cli.main`` against real Auto Scaling groups; for
``status`` an autoscaler (the real cycle) runs first and serves its event API, as the batch does.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
import yaml

from clusterman.cli.main import main
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.pool_harness import harness
from itests.recorded_api import silent_api


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def cli(capsys, config, *args):
    status = main(["--env-config-path", config, *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_status_shows_groups_nodes_utilisation_and_the_autoscalers_last_decisions(tmp_path, world, capsys):
    asg = world.asg("web", desired=1, max_size=20)
    with harness(tmp_path, world) as pool:
        config = pool.configure(tasks=10)
        url = pool.serve_events()
        pool.cycle().run_once(time.time())
        pool.service.publisher.flush()
        pool_args = ["--cluster", world.cluster, "--pool", "web"]

        status, out, err = cli(capsys, config, "status", *pool_args, "--events-url", url)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0] == f"{world.cluster}/web.simulated: enabled"
        assert f"  asg {asg}: target 8, fulfilled 8, min 0, max 20" in lines
        assert "nodes: 8 ready; tasks: 10 running, 0 pending" in lines
        # the autoscaler saw 10 cpus on one 2-cpu node when it decided
        assert "utilisation (last decision): cpus 500.0%, mem 0.0% (setpoint 70%)" in lines
        assert "autoscaler state: scale lock free, breaker closed" in lines
        assert "consolidation: off" in lines
        assert "node migration: off (no node_migration block)" in lines
        decision = lines[lines.index("last decisions:") + 1]
        assert " utilisation +7: " in decision and "target 8" in decision
        assert lines[-1] == "autoscaler health: ok"

        # what the autoscaler's /healthz finds wrong is shown, not taken for an unreachable API
        pool.service.server.health_checks.append(lambda: "the bootstrap has not looked at the tree for 40 s")
        status, out, err = cli(capsys, config, "status", *pool_args, "--events-url", url)
        assert status == 4, err  # unhealthy
        assert out.splitlines()[-1] == "autoscaler health: the bootstrap has not looked at the tree for 40 s"
        pool.service.server.health_checks.clear()

        status, out, _ = cli(capsys, config, "status", *pool_args, "--events-url", url, "--json")
        doc = json.loads(out)
        assert doc["groups"][0] | {"id": asg} == {"id": asg, "kind": "asg", "target": 8.0, "fulfilled": 8.0,
                                                  "min": 0.0, "max": 20.0, "stale": False}  # fmt: skip
        assert doc["nodes"]["by_state"]["ready"] == 8 and doc["pause"]["paused"] is False
        assert doc["utilisation"]["source"] == "last decision" and doc["utilisation"]["ratios"]["cpus"] == 5.0
        assert [d["reason"] for d in doc["last_decisions"]] == ["utilisation"]
        assert doc["autoscaler_health"] == {"state": "ok", "problems": [], "degraded": []}
        assert doc["consolidation"] == {"enabled": False, "text": "consolidation: off"}

        # turned on for a pool that does not drain: off, and why
        config = pool.configure(tasks=10, autoscaling={"consolidation": {"enabled": True}})
        status, out, err = cli(capsys, config, "status", *pool_args, "--events-url", url)
        assert "consolidation off: draining is disabled for this pool" in out.splitlines(), out

        # with consolidation on, the budget it has used: nothing yet
        config = pool.configure(tasks=10, draining=True, autoscaling={"consolidation": {"enabled": True}})
        status, out, err = cli(capsys, config, "status", *pool_args, "--events-url", url)
        assert status == 0, err
        want = "consolidation budget: 0 of 1 nodes disrupted at once, 0 of 60 evictions in the last hour"
        assert want in out.splitlines()

        cli(capsys, config, "disable", *pool_args, "--until", "1h", "--reason", "upgrade")
        status, out, _ = cli(capsys, config, "status", *pool_args, "--events-url", "http://127.0.0.1:9")
    assert status == 5  # the autoscaler's health unknown
    lines = out.splitlines()
    assert lines[0].startswith(f"{world.cluster}/web.simulated: paused until ") and "(upgrade)" in lines[0]
    # no event API: said so, and the utilisation is measured now (10 cpus on eight 2-cpu nodes)
    assert any(line.startswith("last decisions: unknown: cannot reach the event API") for line in lines)
    assert "utilisation (measured now): cpus 62.5%, mem 0.0% (setpoint 70%)" in lines


def test_status_reports_an_unreadable_group_and_shows_the_rest(tmp_path, world, moto_server, capsys):
    good = world.asg("web", desired=2)
    broken = world.asg("web", desired=1)
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, aws_url=proxy.url) as pool:
        proxy.add(Fault(action="DescribeAutoScalingGroups", contains=broken, code="AccessDenied", status=403,
                        times=None, message="not for you"))  # fmt: skip
        config = pool.configure(tasks=1)
        status, out, _ = cli(capsys, config, "status", "--cluster", world.cluster, "--pool", "web", "--no-events")
    assert status == 0
    assert f"  asg {good}: target 2, fulfilled 2, min 0, max 10" in out
    assert f"  cannot read: asg {broken}: DescribeAutoScalingGroups failed: AccessDenied: not for you" in out
    assert "nodes: 2 ready; tasks: 1 running, 0 pending" in out
    assert "last decisions: unknown: no event API to ask" in out
    assert "autoscaler health: unknown (as last decisions)" in out  # said once


def test_status_reports_while_the_pool_file_on_disk_is_refused(tmp_path, world, capsys):
    """A typo in the pool file used to stop `status` (and `disable`) although the running
    autoscaler goes on with its last good copy: now it says the file is refused and why, and shows
    what the autoscaler and the state store tell."""
    world.asg("web", desired=1)
    with harness(tmp_path, world) as pool:
        config = pool.configure(tasks=10)
        url = pool.serve_events()
        pool.cycle().run_once(time.time())
        pool.service.publisher.flush()
        pool_file = tmp_path / "pools" / world.cluster / "web.simulated"
        pool_file.write_text(pool_file.read_text().replace("scaling_limits:", "scaling_limit:"))
        pool_args = ["--cluster", world.cluster, "--pool", "web"]
        assert cli(capsys, config, "disable", *pool_args, "--until", "1h")[0] == 0  # needs no pool file either

        status, out, err = cli(capsys, config, "status", *pool_args, "--events-url", url)
        assert status == 0, err
        lines = out.splitlines()
        assert lines[0].startswith(f"{world.cluster}/web.simulated: paused until ")
        assert lines[1].startswith(f"pool file refused: {pool_file}: ") and "scaling_limit" in lines[1]
        assert lines[1].endswith("(a running autoscaler keeps its last good copy)")
        assert "  cannot read: not read while the pool file is refused" in lines
        assert "nodes: unknown: not read while the pool file is refused" in lines
        assert "utilisation (last decision): cpus 500.0%, mem 0.0% (setpoint 70%)" in lines
        decision = lines[lines.index("last decisions:") + 1]
        assert " utilisation +7: " in decision
        assert lines[-1] == "autoscaler health: ok"

        status, out, _ = cli(capsys, config, "status", *pool_args, "--events-url", url, "--json")
        assert status == 0 and "scaling_limit" in json.loads(out)["pool_file_refused"]

        # a pool with no file at all is still a one-line error (a typo in --pool)
        status, _, err = cli(capsys, config, "status", "--cluster", world.cluster, "--pool", "wbe",
                             "--scheduler", "simulated", "--no-events")  # fmt: skip
        assert status == 1 and err.count("\n") == 1


def test_status_and_manage_with_a_cloud_that_does_not_answer_end_within_their_timeout(tmp_path, world, capsys):
    group = world.asg("web", desired=1)
    with silent_api() as silent, harness(tmp_path, world, aws_url=silent.url) as pool:
        config = pool.configure(tasks=1)
        args = ("status", "--cluster", world.cluster, "--pool", "web", "--no-events", "--timeout", "2")
        started = time.monotonic()
        status, out, _ = cli(capsys, config, *args)
        took = time.monotonic() - started
        with pytest.raises(SystemExit) as refused:
            cli(capsys, config, *args[:-1], "0")
        assert refused.value.code == 2
        assert "argument --timeout: expected a number of seconds > 0, got '0'" in capsys.readouterr().err
        manage = ("manage", "--cluster", world.cluster, "--pool", "web", "--target-capacity", "3", "--yes")
        started = time.monotonic()
        changed, _, manage_err = cli(capsys, config, *manage, "--timeout", "2")
        manage_took = time.monotonic() - started
    print(f"status took {took:.1f} s, manage {manage_took:.1f} s:\n{out}{manage_err}")
    assert status == 5  # nothing of the pool could be read
    assert "cannot read" in out and "no answer within the call budget of 2 s" in out, out
    assert took < 8, out  # botocore alone: 60 s per attempt, 5 attempts
    assert changed == 1 and "cannot find every resource group, nothing changed" in manage_err, manage_err
    assert manage_took < 8 and world.desired(group) == 1


def test_disable_with_a_state_table_that_does_not_answer_ends_within_its_timeout(tmp_path, world, capsys):
    world.asg("web", desired=1)
    with silent_api() as silent, harness(tmp_path, world, aws_url=silent.url) as pool:
        config = pool.configure(tasks=1)
        path = Path(config)
        main = yaml.safe_load(path.read_text())
        main["aws"]["state_table"] = "clusterman-state"
        main["state"] = {"backend": "dynamodb"}
        path.write_text(yaml.safe_dump(main))
        started = time.monotonic()
        status, _, err = cli(capsys, config, "disable", "--cluster", world.cluster, "--pool", "web", "--timeout", "2")
        took = time.monotonic() - started
    assert status == 1 and "no answer within the call budget of 2 s" in err, err
    assert took < 8  # botocore alone: 60 s per attempt, 5 attempts


def test_manage_clamps_exactly_like_the_autoscaler_and_spreads_over_groups(tmp_path, world, capsys, monkeypatch):
    a = world.asg("web", desired=1)
    b = world.asg("web", desired=1, max_size=2)
    with harness(tmp_path, world) as pool:
        config = pool.configure(max_capacity=12, max_weight_to_add=6, max_weight_to_remove=3)
        args = ["manage", "--cluster", world.cluster, "--pool", "web", "--yes"]

        status, out, _ = cli(capsys, config, *args, "--target-capacity", "max", "--dry-run")
        assert status == 0 and "would set target capacity 2 -> 8 (asked 12; limited by max_weight_to_add 6)" in out
        assert (world.desired(a), world.desired(b)) == (1, 1)

        status, out, _ = cli(capsys, config, *args, "--target-capacity", "max")
        assert status == 0 and "set target capacity 2 -> 8" in out
        assert f"  {b}: 1 -> 2" in out and f"  {a}: 1 -> 6" in out  # b stops at its MaxSize
        assert "the autoscaler is not paused" in out
        assert (world.desired(a), world.desired(b)) == (6, 2) and len(world.asg_members(a)) == 6

        status, out, _ = cli(capsys, config, *args, "--target-capacity", "0")
        assert (
            status == 0
            and "set target capacity 8 -> 5 (asked 0; limited by min_capacity 1, max_weight_to_remove 3)" in out
        )
        assert "terminates nothing" in out and len(world.asg_members(a)) == 6  # nodes leave through the autoscaler

        cli(capsys, config, *args, "--target-capacity", "min")  # 5 -> 2 (min 1, at most 3 a step)
        assert world.desired(a) + world.desired(b) == 2

        status, _, err = cli(capsys, config, *args, "--target-capacity", "lots")
        assert status == 1 and "--target-capacity 'lots': expected min, max or a number" in err

        unconfirmed = ["manage", "--cluster", world.cluster, "--pool", "web", "--target-capacity", "4"]
        monkeypatch.setattr("sys.stdin", io.StringIO(""))  # nobody answers (no terminal): nothing changes
        status, out, err = cli(capsys, config, *unconfirmed)
        assert status == 1 and world.desired(a) + world.desired(b) == 2
        assert "nothing changed: nobody answered [y/N] (no terminal): give --yes (-y)" in err, err
        monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
        status, out, _ = cli(capsys, config, *unconfirmed)
        assert status == 1 and "nothing changed" in out and world.desired(a) + world.desired(b) == 2
        monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
        status, out, _ = cli(capsys, config, *unconfirmed)
        assert status == 0 and "set target capacity 2 -> 4" in out and world.desired(a) + world.desired(b) == 4


def test_manage_refuses_when_a_group_cannot_be_read(tmp_path, world, moto_server, capsys):
    good = world.asg("web", desired=1)
    broken = world.asg("web", desired=1)
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, aws_url=proxy.url) as pool:
        proxy.add(Fault(action="DescribeAutoScalingGroups", contains=broken, code="AccessDenied", status=403,
                        times=None))  # fmt: skip
        config = pool.configure()
        status, _, err = cli(capsys, config, "manage", "--cluster", world.cluster, "--pool", "web", "--yes",
                             "--target-capacity", "3")  # fmt: skip
        assert not proxy.calls("SetDesiredCapacity")
    assert status == 1 and "cannot read every resource group, nothing changed" in err and broken in err
    assert (world.desired(good), world.desired(broken)) == (1, 1)


def test_list_clusters_and_pools(tmp_path, world, capsys):
    with harness(tmp_path, world) as pool:
        config = pool.configure()
        (tmp_path / "pools" / world.cluster / "batch.kubernetes").write_text("{}")
        (tmp_path / "pools" / world.cluster / "notes.txt").write_text("not a pool")
        assert cli(capsys, config, "list-clusters")[1].split() == [world.cluster]
        assert json.loads(cli(capsys, config, "list-clusters", "--json")[1]) == [world.cluster]
        _, out, _ = cli(capsys, config, "list-pools", "--cluster", world.cluster)
        assert out.split("\n\n") == ["Kubernetes pools\nbatch", "Simulated pools\nweb\n"]
        doc = json.loads(cli(capsys, config, "list-pools", "--cluster", world.cluster, "--json")[1])
        assert doc == {"kubernetes": ["batch"], "mesos": [], "simulated": ["web"]}
        assert cli(capsys, config, "list-pools", "--cluster", world.cluster, "--scheduler", "simulated")[1] == "web\n"
        status, _, err = cli(capsys, config, "list-pools", "--cluster", "elsewhere")
    assert status == 1 and f"unknown cluster (known: {world.cluster})" in err

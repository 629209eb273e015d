"""``clusterman migrate`` and ``migrate-stop`` with Clusterman's arguments, against the stateful fake
API server (the NodeMigration resource checked against the CRD's schema in ``deploy/``), through
the real ``kubernetes`` client."""

from __future__ import annotations

import time

import pytest

from clusterman.cli.main import main
from clusterman.decision import migration_request
from clusterman.decision.migration_request import ATTEMPTS_LABEL
from clusterman.decision.migration_request import STATUS_LABEL
from itests.aws_world import World
from itests.pool_harness import POOL
from itests.pool_harness import harness
from itests.stateful_api import MIGRATIONS


@pytest.fixture
def world(moto_server):
    return World(moto_server.url)


def cli(capsys, config, *args):
    status = main(["--env-config-path", config, *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_migrate_creates_a_pending_resource_as_clusterman_does_and_migrate_stop_marks_it(tmp_path, world, capsys):
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure()
        where = ["--cluster", world.cluster, "--pool", POOL]
        status, out, err = cli(
            capsys, config, "migrate", *where, "kernel", "ge", "5.15.0-1034-aws",
            "--label-selector", "node.kubernetes.io/instance-type in (m5.large,m5.xlarge)",
            "--label-selector", "team=web",
        )  # fmt: skip
        assert status == 0, err
        (name,) = pool.kube.migrations
        assert name.startswith(f"{world.cluster}-{POOL}-")
        assert out == (
            f"{world.cluster}/{POOL}.kubernetes: created nodemigrations/{name} (pending): kernel ge 5.15.0-1034-aws "
            "on nodes node.kubernetes.io/instance-type in (m5.large,m5.xlarge), team=web\n"
        )
        created = pool.kube.migrations[name]
        assert created["metadata"]["labels"] == {
            STATUS_LABEL: "pending",
            ATTEMPTS_LABEL: "0",
            "clusterman.com/pool": POOL,
        }
        assert created["spec"] == {
            "cluster": world.cluster,
            "pool": POOL,
            "label_selectors": ["node.kubernetes.io/instance-type in (m5.large,m5.xlarge)", "team=web"],
            "condition": {"trait": "kernel", "operator": "ge", "target": "5.15.0-1034-aws"},
        }
        # another pool's migration, and one of this pool that has ended, are not stopped
        other = {**created, "metadata": {"name": "other", "labels": {STATUS_LABEL: "inprogress"}}}
        pool.kube.put("nodemigrations", {**other, "spec": {**created["spec"], "pool": "batch"}})
        pool.kube.put("nodemigrations", {**other, "metadata": {"name": "done", "labels": {STATUS_LABEL: "completed"}}})

        # a pool file without node_migration.trigger.event: created all the same, with a warning
        assert err == (
            f"{world.cluster}/{POOL}.kubernetes: warning: its pool file does not set node_migration.trigger.event: "
            "true, so its autoscaler will mark the migration skipped\n"
        )

        status, out, err = cli(capsys, config, "migrate-stop", *where)
        assert status == 0, err
        assert out == (
            f"{world.cluster}/{POOL}.kubernetes: nodemigrations/{name} (kernel ge 5.15.0-1034-aws on nodes "
            "node.kubernetes.io/instance-type in (m5.large,m5.xlarge), team=web): marked stop\n"
        )
        labels = {n: m["metadata"]["labels"][STATUS_LABEL] for n, m in pool.kube.migrations.items()}
        assert labels == {name: "stop", "other": "inprogress", "done": "completed"}
        patch = next(r for r in pool.kube.requests if r.method == "PATCH")
        assert patch.path == f"{MIGRATIONS}/{name}" and patch.headers["content-type"] == "application/merge-patch+json"

        status, out, _ = cli(capsys, config, "migrate-stop", *where)
        assert (
            status == 0 and out == f"{world.cluster}/{POOL}.kubernetes: no pending or running node migration to stop\n"
        )

        config = pool.configure(node_migration={"trigger": {"event": True}, "strategy": {"rate": 2}})
        for _ in range(2):  # the second in the same second, most likely: not refused for its name
            status, _, err = cli(capsys, config, "migrate", *where, "uptime", "lt", "30d")
            assert status == 0 and err == ""  # the pool takes NodeMigrations: no warning
        assert len(pool.kube.migrations) == 5


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["kernel", "ge", "latest"], "target of kernel: 'latest' is not a version"),
        (
            ["instance_type", "gt", "m5.large"],
            "operator gt does not apply to instance_type (it takes eq, ne, in, notin)",
        ),
        (["uptime", "lt", "ninety days"], "target of uptime: expected a duration"),
        (["lsbrelease", "in", "22.04,,24.04"], "target '22.04,,24.04': an empty item in the list"),
        (["uptime", "lt", "30d", "--label-selector", "team in (web"], "label selector 'team in (web': '(' without ')'"),
        (["uptime", "lt", "30d", "--label-selector", "bad_=x"], "'bad_' is not a label name"),
    ],
)
def test_a_bad_condition_or_selector_is_one_line_and_creates_nothing(tmp_path, world, capsys, words, error):
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure()
        status, out, err = cli(capsys, config, "migrate", "--cluster", world.cluster, "--pool", POOL, *words)
        assert status == 1 and out == ""
        assert err.startswith("clusterman migrate: ") and error in err and err.count("\n") == 1, err
        assert pool.kube.requests == []


def test_an_unknown_trait_is_refused_by_the_arguments(tmp_path, world, capsys):
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure()
        with pytest.raises(SystemExit) as exit_:
            cli(capsys, config, "migrate", "--cluster", world.cluster, "--pool", POOL, "ami", "eq", "ami-1")
        assert exit_.value.code == 2
        assert "argument condition_trait: invalid choice: 'ami'" in capsys.readouterr().err


def test_the_api_server_refusing_or_gone_is_one_line(tmp_path, world, capsys):
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure()
        where = ["migrate", "--cluster", world.cluster, "--pool", POOL, "uptime", "lt", "30d", "--timeout", "2"]
        now = time.time()
        taken = {migration_request.resource_name(world.cluster, POOL, now + s) for s in range(3)}
        for name in taken:  # Clusterman's name for this second is taken: the next free suffix
            pool.kube.put("nodemigrations", {"metadata": {"name": name}, "spec": {}})
        status, _, err = cli(capsys, config, *where)
        assert status == 0, err
        (created,) = set(pool.kube.migrations) - taken
        assert created.endswith("-2") and created.removesuffix("-2") in taken
        pool.kube.go_down()
        status, out, err = cli(capsys, config, *where)
        assert status == 1 and out == ""
        assert err.startswith(f"clusterman migrate: kubernetes API {pool.kube.url}: creating nodemigrations/"), err
        assert "cannot reach it" in err and err.count("\n") == 1


def test_a_mesos_pool_has_no_node_migration(tmp_path, world, capsys):
    with harness(tmp_path, world, "mesos") as pool:
        config = pool.configure()
        status, _, err = cli(
            capsys, config, "migrate", "--cluster", world.cluster, "--pool", POOL, "uptime", "lt", "9d"
        )
        assert status == 1
        want = f"node migration is for Kubernetes pools; {world.cluster}/{POOL}.mesos is mesos"
        assert err == f"clusterman migrate: arguments: {want}\n"

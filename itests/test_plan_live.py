"""``clusterman plan --cluster C --pool P``: what the pool's next run would do, read live, and a
snapshot of it for a bug report that ``plan --snapshot`` replays to the same decision.

Before, ``plan`` took only ``--snapshot FILE``, a document nothing produced. Here the pool is an
Auto Scaling group in moto's server with a simulated scheduler (its instances are the nodes, six
1-cpu tasks on 2-cpu nodes): the plan is a dry run of the autoscaler's own run, which changes
nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import write_config


def clusterman(config: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterman", "--env-config-path", config, "plan", *args],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **FAKE_CREDENTIALS},
    )  # fmt: skip


def test_plan_reads_the_live_pool_and_its_snapshot_replays_the_same_decision(tmp_path, moto_server):
    world = World(moto_server.url)
    group = world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=6)
    snapshot = tmp_path / "bug-report.json"
    pool = ["--cluster", world.cluster, "--pool", POOL, "--scheduler", "simulated"]
    live = clusterman(config, *pool, "--write-snapshot", str(snapshot))
    assert live.returncode == 0, live.stderr
    decision = json.loads(live.stdout)
    assert decision["action"] == "scale_up" and decision["current_target"] == 1, decision
    assert decision["explanation"].startswith("cpus 300% > setpoint 70%"), decision["explanation"]
    assert f"wrote {snapshot}: clusterman plan --snapshot {snapshot} replays it" in live.stderr
    assert world.desired(group) == 1  # a dry run: nothing changed

    replayed = clusterman(config, "--snapshot", str(snapshot))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == decision
    document = json.loads(snapshot.read_text())
    assert document["config"]["scheduler"] == "simulated" and len(document["pods"]) == 6

    both = clusterman(config, *pool, "--snapshot", str(snapshot))
    neither = clusterman(config)
    for done in (both, neither):
        assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr


def test_the_snapshot_holds_the_pool_file_the_plan_read(tmp_path, moto_server):
    """With ``--cluster-config-directory`` the plan reads the pool file there, and the snapshot's
    ``config`` is that file's, not the main file's directory's."""
    import shutil

    import yaml

    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=6)
    other = tmp_path / "other-pools"
    shutil.copytree(tmp_path / "pools", other)
    (pool_file,) = other.rglob(f"{POOL}.simulated")
    raw = yaml.safe_load(pool_file.read_text())
    raw["scaling_limits"]["max_capacity"] = 7
    pool_file.write_text(yaml.safe_dump(raw))
    snapshot = tmp_path / "bug-report.json"
    pool = ["--cluster", world.cluster, "--pool", POOL, "--scheduler", "simulated"]
    live = subprocess.run(
        [sys.executable, "-m", "clusterman", "--env-config-path", config, "--cluster-config-directory", str(other),
         "plan", *pool, "--write-snapshot", str(snapshot)],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **FAKE_CREDENTIALS},
    )  # fmt: skip
    assert live.returncode == 0, live.stderr
    assert json.loads(snapshot.read_text())["config"]["scaling_limits"]["max_capacity"] == 7

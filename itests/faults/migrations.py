"""Node migrations on Kubernetes for the fault tests: a pool of old-kernel nodes on the stateful fake
API server (``itests/stateful_api.py``), its Auto Scaling group in moto's server, the real
autoscaler processes over them, and a thread that plays the cluster around them: each instance the
group launches joins as a node with the new kernel (unless ``joining`` is off), each terminated
one leaves the cluster, as the cloud controller and the kubelets do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clusterman.cli.main import main
from clusterman.decision.migration import MigrationRecord
from clusterman.decision.migration_request import STATUS_LABEL
from clusterman.state.node_migration import StoredMigration
from clusterman.wiring.state_store import open_state_store
from itests.aws_world import World
from itests.faults.autoscaler_procs import Autoscaler
from itests.pool_harness import POOL
from itests.pool_harness import PoolHarness
from itests.pool_harness import harness

OLD, NEW = "5.10.0-1034-aws", "5.15.0-1051-aws"
PERIOD, BUDGET = 2.0, 3.0


class Cluster(threading.Thread):
    """What happens around the autoscaler, every 0.1 s, until ``stop``."""

    def __init__(self, pool: PoolHarness, asg: str) -> None:
        super().__init__(daemon=True)
        self.pool, self.asg = pool, asg
        self.joining = True  # new instances join as nodes; off: they never become ready
        self.terminated: list[str] = []  # instances seen terminated, in order
        self._done = threading.Event()

    def run(self) -> None:
        world, kube = self.pool.world, self.pool.kube
        assert kube is not None
        while not self._done.wait(0.1):
            for name in self.pool.forget_terminated(watched=True):
                self.terminated.append(name.removeprefix("node-"))
            if self.joining:
                members = world.asg_members(self.asg)
                new = [i for i in members if f"node-{i}" not in kube.nodes and world.ec2_state(i) == "running"]
                self.pool.join(new, kernel=NEW, watched=True)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


@contextmanager
def old_pool(tmp_path: Path, moto_server: Any, count: int = 6) -> Iterator[tuple[World, str, list[str], PoolHarness]]:
    """``count`` old-kernel nodes, one small pod each, in an Auto Scaling group in moto's server:
    the world, the group, its old instances, the pool."""
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=count, max_size=2 * count + 2)
    old = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        for node in pool.join(old, kernel=OLD):
            pool.run_pods(node, 1, 0.1)
        yield world, asg, old, pool


def configure(pool: PoolHarness, count: int = 6, **migration: Any) -> str:
    """Kept at ``count`` nodes by its minimum, half of it the disruption budget; migration's keys as
    given over: NodeMigrations taken, two nodes a step, no bootstrap_wait."""
    block: dict[str, Any] = {
        "trigger": {"event": True},
        "strategy": {"rate": 2, "bootstrap_wait": 0, "bootstrap_timeout": "2m"},
        "health_check_interval": "1m",
    }
    for key, value in migration.items():
        block[key] = {**block[key], **value} if isinstance(value, dict) else value
    budget = {"consolidation": {"max_disrupted_share": 0.5}}
    return pool.configure(
        min_capacity=count, max_capacity=2 * count + 2, draining=True, node_migration=block, autoscaling=budget
    )


def migrate(pool: PoolHarness, config: str, *words: str) -> str:
    """``clusterman migrate`` for the pool; the new resource's name."""
    assert pool.kube is not None
    before = set(pool.kube.migrations)
    command = ["--env-config-path", config, "migrate", "--cluster", pool.world.cluster, "--pool", POOL, *words]
    assert main(command) == 0
    (name,) = set(pool.kube.migrations) - before
    return name


@contextmanager
def cluster(pool: PoolHarness, asg: str) -> Iterator[Cluster]:
    around = Cluster(pool, asg)
    around.start()
    try:
        yield around
    finally:
        around.stop()


def autoscaler(config: str, world: World, *args: str) -> Autoscaler:
    own = ["--period-seconds", str(PERIOD), "--budget-seconds", str(BUDGET), "--no-splay"]
    return Autoscaler(config, world.cluster, *own, *args, scheduler="kubernetes")


def label(pool: PoolHarness, name: str) -> str:
    assert pool.kube is not None
    return str(pool.kube.migrations[name]["metadata"]["labels"][STATUS_LABEL])


def status(pool: PoolHarness, name: str) -> dict[str, Any]:
    assert pool.kube is not None
    return dict(pool.kube.migrations[name].get("status") or {})


def wait_until(check: Any, timeout: float, what: str, *procs: Autoscaler) -> float:
    """Poll ``check()`` until true; when (monotonic). Fails with what the autoscalers said."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            said = "\n".join(
                f"--- {p.proc.pid}\n" + "\n".join(p.lines()[-8:]) + f"\n{p.stderr()[-2000:]}" for p in procs
            )
            raise AssertionError(f"not {what} within {timeout} s:\n{said}")
        time.sleep(0.05)
    return time.monotonic()


def record(pool: PoolHarness) -> MigrationRecord:
    setup = pool.setup()
    return StoredMigration(open_state_store(setup.main), setup.identity).load()

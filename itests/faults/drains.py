"""Consolidation drains on Kubernetes for the fault tests: two small pools of 8-CPU nodes on the
stateful fake API server (``itests/stateful_api.py``) and real Auto Scaling groups in moto's server,
the real autoscaler over them, and what it keeps in its state store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEYS
from clusterman.decision.disruption import DisruptionState
from clusterman.state.carried import StoredState
from clusterman.wiring.state_store import open_state_store
from itests.aws_world import World
from itests.faults.autoscaler_procs import Autoscaler
from itests.pool_harness import POOL
from itests.pool_harness import PoolHarness
from itests.pool_harness import harness

PERIOD, BUDGET = 2.0, 3.0  # each call to the API server waits at most BUDGET / 3


def configure(pool: PoolHarness, reserve: int, consolidation: dict[str, Any] | None = None, **limits: Any) -> str:
    """The pool file (``consolidation`` and ``limits`` change its defaults here); the main file's path."""
    return pool.configure(
        max_tasks_to_kill=0,
        draining=True,
        autoscaling={
            "setpoint": 0.95,
            "target_capacity_margin": 0,
            "slot_reserve": reserve,
            # consolidate_after 0 and surplus 0: a pool of four
            "consolidation": {"enabled": True, "consolidate_after": 0, "surplus": 0, **(consolidation or {})},
        },
        # a drain step each run, as these faults expect: by default one at most every 15 s
        pool_extra={"draining": {"redraining_delay_seconds": 1}},
        **limits,
    )


def to_remove(pool: PoolHarness, members: list[str]) -> tuple[str, list[str], list[str]]:
    """Two nodes with 2 CPUs free in pieces, one running two 1-CPU pods, one empty; two 4-CPU places
    kept: the two pods fit in a gap, so their node is removed. The config, the nodes, its pods."""
    nodes = pool.join(members, cpus=8)
    for node in nodes[:2]:
        pool.run_pods(node, 1, 4, prefix=f"{node}-big")
        pool.run_pods(node, 1, 2, prefix=f"{node}-mid")
    pods = pool.run_pods(nodes[2], 2, 1, prefix="moving")
    return configure(pool, reserve=2), nodes, pods


def to_keep(pool: PoolHarness, members: list[str]) -> tuple[str, list[str], list[str]]:
    """As ``to_remove``, but the third node has 4 CPUs free and the fourth two 1-CPU pods; three
    4-CPU places kept and only two to be had: the fourth node is drained to be kept (its pods fill
    the gaps, and it becomes two places). The config, the nodes, its pods."""
    nodes = pool.join(members, cpus=8)
    for node in nodes[:2]:
        pool.run_pods(node, 1, 4, prefix=f"{node}-big")
        pool.run_pods(node, 1, 2, prefix=f"{node}-mid")
    pool.run_pods(nodes[2], 1, 2, prefix="stays")
    pool.run_pods(nodes[2], 2, 1, prefix="stays-small")
    pods = pool.run_pods(nodes[3], 2, 1, prefix="moving")
    return configure(pool, reserve=3), nodes, pods


@contextmanager
def four_nodes(tmp_path: Path, moto_server: Any) -> Iterator[tuple[World, str, list[str], PoolHarness]]:
    """An Auto Scaling group of four in moto's server and the pool over it on the stateful fake API
    server: the world, the group, its members, the pool."""
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=4)
    members = world.asg_members(asg)
    with harness(tmp_path, world, "kubernetes") as pool:
        assert pool.kube is not None
        yield world, asg, members, pool


@contextmanager
def running(
    config: str,
    cluster: str,
    prefix: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[Autoscaler]:
    """The autoscaler over the pool (``args`` added to its own, ``env`` to the environment),
    stopped on the way out whatever happened."""
    own = ["--period-seconds", str(PERIOD), "--budget-seconds", str(BUDGET), "--no-splay"]
    process = Autoscaler(config, cluster, *own, *args, scheduler="kubernetes", prefix=prefix, env=env)
    try:
        yield process
    finally:
        process.stop()


def on_tmpfs(directory: Path) -> tuple[str, ...]:
    """The command prefix that gives the autoscaler ``directory`` on a 4 MB tmpfs of its own (in a
    mount namespace of its own): a disk the test can fill without touching the host's."""
    mount = 'mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@"'
    return ("unshare", "-m", "sh", "-c", mount, str(directory))


def metrics_in(config: str, directory: Path) -> None:
    """The main file's metrics store moved into ``directory`` (to put it on a disk of its own)."""
    main = yaml.safe_load(Path(config).read_text())
    main["metrics"] = {"sqlite_path": str(directory / "metrics.sqlite3")}
    Path(config).write_text(yaml.safe_dump(main))


def wait_for_unanswered(pool: PoolHarness, autoscaler: Autoscaler, timeout: float = 30) -> float:
    """When (monotonic) the silent API server first held a request of the autoscaler's."""
    assert pool.kube is not None
    deadline = time.monotonic() + timeout
    while not pool.kube.unanswered:
        assert time.monotonic() < deadline, f"nothing was held: {autoscaler.lines()}"
        time.sleep(0.05)
    return time.monotonic()


def evictions(pool: PoolHarness) -> list[str]:
    """The pods whose eviction was asked for, in order (an unanswered request too)."""
    assert pool.kube is not None
    return [r.path.split("/")[-2] for r in pool.kube.requests if r.method == "POST"]


def kept(pool: PoolHarness) -> DisruptionState:
    """What consolidation remembers, as the autoscaler saved it."""
    setup = pool.setup()
    return StoredState(open_state_store(setup.main), setup.identity).load().disruption


def untainted(pool: PoolHarness, node: str) -> bool:
    """Whether the autoscaler wrote the node's taints without a scale-down taint (it may taint it
    again later: a new drain)."""
    assert pool.kube is not None
    patches = [r.json() for r in pool.kube.requests if r.method == "PATCH" and r.path == f"/api/v1/nodes/{node}"]
    return any(not any(t["key"] in SCALE_DOWN_TAINT_KEYS for t in p["spec"]["taints"]) for p in patches)

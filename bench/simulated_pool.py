"""The simulated pool over 30 days by the minute at ~1,000 nodes (the simulator's budget: 60 s in all).

A diurnal demand trace of 1-CPU tasks on 4-CPU nodes; every 10 minutes the group's target follows
the demand at 80% (a stand-in for the decision, which is not measured here) and idle nodes are
terminated when the pool is too big. Measured: the seconds the simulated pool takes (snapshots,
joins, placement, terminations), next to two baselines from the same run:
  rebuild_all_nodes  building every Node value afresh each step (what a naive pool would pay)
  empty_snapshot     a PoolSnapshot over an already-built tuple of the same nodes (the floor)
"""

from __future__ import annotations

import math
import time
from itertools import islice
from typing import Any

from bench._timing import best_of
from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cluster.simulated_scheduler import DemandTrace
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.core.model import Node
from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import Resources

NODE = Resources(cpus=4, mem=16000, disk=100000)
MARKET = SimulatedMarket("m5.xlarge", "us-west-2a", 1.0, NODE)
TASK = Resources(cpus=1, mem=2000)
PEAK_NODES = 1000


def demand_at(minute: int) -> Resources:
    """Between 40% and 100% of PEAK_NODES × 4 CPUs × 0.8, one cycle a day."""
    day = (1 - math.cos(2 * math.pi * minute / 1440)) / 2
    return TASK * (PEAK_NODES * 4 * 0.8 * (0.4 + 0.6 * day))


def simulate(days: int) -> dict[str, Any]:
    minutes = days * 1440
    trace = DemandTrace([(m * 60.0, demand_at(m)) for m in range(0, minutes, 5)], TASK)
    clock = [0.0]
    group = SimulatedGroup("g1", [MARKET], lambda: clock[0], max_capacity=PEAK_NODES * 1.2, target_capacity=500)
    scheduler = SimulatedScheduler(trace, join_delay_seconds=180, join_delay_stdev_seconds=60)
    pool = SimulatedConnector(GroupsCloudView([group]), scheduler)
    peak_nodes = peak_tasks = 0
    started = time.perf_counter()
    for minute in range(minutes):
        now = clock[0] = minute * 60.0
        snap = pool.snapshot(now)
        if minute % 10 == 0:
            wanted = math.ceil(demand_at(minute).cpus / NODE.cpus / 0.8)
            have = len(snap.nodes)
            if wanted > have:
                group.set_target_capacity(wanted)
            elif wanted < have:
                idle = list(islice((n.id for n in reversed(snap.nodes) if n.joined and not n.tasks), have - wanted))
                if idle:
                    group.terminate_instances(idle)
        peak_nodes = max(peak_nodes, len(snap.nodes))
        peak_tasks = max(peak_tasks, sum(len(n.tasks) for n in snap.nodes) if minute % 60 == 0 else 0)
    return {
        "seconds": time.perf_counter() - started,
        "steps": minutes,
        "peak_nodes": peak_nodes,
        "peak_tasks": peak_tasks,
    }


def baselines(nodes: tuple[Node, ...], steps: int) -> dict[str, float]:
    """Seconds for ``steps`` steps of each baseline (measured on fewer steps, scaled)."""
    sample = min(steps, 200)

    def rebuild() -> None:
        for step in range(sample):
            fresh = tuple(
                Node(n.id, n.state, n.allocatable, n.group_id, n.instance_id, n.weight, n.launched_at, tasks=n.tasks)
                for n in nodes
            )
            PoolSnapshot(float(step), fresh)

    def floor() -> None:
        for step in range(sample):
            PoolSnapshot(float(step), nodes)

    scale = steps / sample
    return {"rebuild_all_nodes": best_of(rebuild, 3) * scale, "empty_snapshot": best_of(floor, 3) * scale}


def run(quick: bool) -> dict[str, Any]:
    days = 2 if quick else 30
    result = simulate(days)
    group = SimulatedGroup("g1", [MARKET], lambda: 0.0, target_capacity=result["peak_nodes"])
    pool = SimulatedConnector(GroupsCloudView([group]), SimulatedScheduler(DemandTrace([(0.0, TASK * 3000)], TASK)))
    nodes = pool.snapshot(0.0).nodes
    base = baselines(nodes, result["steps"])
    return {
        "days": days,
        "steps": result["steps"],
        "peak_nodes": result["peak_nodes"],
        "peak_tasks": result["peak_tasks"],
        "simulated_pool_seconds": round(result["seconds"], 3),
        "rebuild_all_nodes_seconds": round(base["rebuild_all_nodes"], 3),
        "empty_snapshot_seconds": round(base["empty_snapshot"], 4),
        "ratio_to_rebuild_all_nodes": round(result["seconds"] / base["rebuild_all_nodes"], 3),
        "ratio_to_empty_snapshot": round(result["seconds"] / base["empty_snapshot"], 1),
    }

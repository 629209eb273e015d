"""Decision time for pools of 1,000 / 10,000 / 100,000 nodes with 30 pods per node.

Goal: 10,000 nodes and 300,000 pods decided in under 1 s. Each size is timed next to a baseline
measured in the same run: one plain Python pass summing the same pods' cpus and mem requests, the
least any decision over those pods must do. Three cases per size: a scale-up (the internal demand
is read from the pods, the target goes up), a scale-down (the same, plus choosing which nodes to
taint, which sorts the candidates), and a hold with the slot reserve and consolidation on (the
decision looks at the emptiest nodes and predicts where their pods would go, then drains one:
``consolidation_ratio`` is its time over the same hold's without consolidation, measured in the
same run). ``growth`` is each time over the previous size's: 10.0 is linear for a tenfold pool.
"""

from __future__ import annotations

import functools
import gc
from dataclasses import replace
from fractions import Fraction
from typing import Any

from bench._timing import best_of
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.decision import AutoscalerState
from clusterman.decision import ScalingPolicy
from clusterman.decision import decide
from clusterman.decision import demand_from_snapshot
from clusterman.decision.exact import exact
from clusterman.decision.policy import ConsolidationPolicy

PODS_PER_NODE = 30
NOW = 1_700_000_000.0
# a few pod shapes, as deployments repeat them; each pod is its own Task object
SHAPES = [Resources(cpus=c, mem=m) for c, m in ((0.1, 256), (0.25, 512), (0.5, 1024), (0.05, 128))]


def build(nodes: int, share: float, fragmented: bool = False) -> PoolSnapshot:
    """Pods fill ``share`` of each node's CPUs (0.9: a scale-up at 70%; 0.2: a scale-down).
    ``fragmented``: every tenth node a third as full, and one 8-CPU pod on node 1, so that only the
    tenth nodes hold a free 8-CPU place and draining one makes a second (consolidation keeps it)."""
    members = []
    for i in range(nodes):
        part = share / 3 if fragmented and i % 10 == 0 else share / 12 if fragmented and i == 1 else share
        cpus_each = 16 * part / PODS_PER_NODE
        tasks = tuple(
            Task(f"p{i}-{k}", Resources(cpus=cpus_each, mem=SHAPES[k % 4].mem), batch=k % 7 == 0)
            for k in range(PODS_PER_NODE)
        )
        if fragmented and i == 1:
            tasks = (*tasks, Task(f"p{i}-big", Resources(cpus=8, mem=1024)))
        members.append(
            Node(f"n{i}", NodeState.READY, Resources(cpus=16, mem=65536), group_id=f"g{i % 3}",
                 launched_at=NOW - 86400 + i, tasks=tasks)
        )  # fmt: skip
    share_of = [nodes // 3 + (1 if j < nodes % 3 else 0) for j in range(3)]  # node i is in group i % 3
    groups = tuple(ResourceGroup(f"g{j}", share_of[j], share_of[j]) for j in range(3))
    return PoolSnapshot(NOW, tuple(members), groups)


def baseline(snapshot: PoolSnapshot) -> tuple[float, float]:
    cpus = mem = 0.0
    for node in snapshot.nodes:
        for task in node.tasks:
            cpus += task.requests.cpus
            mem += task.requests.mem
    return cpus, mem


def decision(snapshot: PoolSnapshot, policy: ScalingPolicy, held: bool = False) -> object:
    """``held``: the request is the pool's own capacity at the setpoint, so the target holds."""
    demand = demand_from_snapshot(snapshot)
    if held:
        capacity = sum(n.allocatable.cpus for n in snapshot.nodes)
        demand = ResourceRequest(cpus=capacity * float(policy.setpoint) * 0.999)
    return decide(snapshot, {"__default__": demand}, policy, AutoscalerState(), NOW)


def run(quick: bool) -> dict[str, Any]:
    sizes = [100, 1_000] if quick else [1_000, 10_000, 100_000]
    repeat = 3
    policy = ScalingPolicy(
        min_capacity=exact(0),
        max_capacity=exact(1_000_000),
        max_weight_to_add=exact(1_000_000),
        max_weight_to_remove=exact(1_000_000),
    )
    results: dict[str, Any] = {"pods_per_node": PODS_PER_NODE, "sizes": {}}
    previous: dict[str, float] = {}
    for size in sizes:
        # one place short of the reserve: without consolidation the target rises by a node
        packing = replace(policy, slot_reserve=size // 10 + 1)
        # surplus 0: the shipped surplus would let this tight pool skip the work measured here
        eager = ConsolidationPolicy(enabled=True, consolidate_after_seconds=0, surplus=Fraction(0))
        consolidating = replace(packing, consolidation=eager)
        row: dict[str, Any] = {"nodes": size, "pods": size * PODS_PER_NODE}
        for case, share, pol, held in (
            ("scale_up", 0.9, policy, False),
            ("scale_down", 0.2, policy, False),
            ("consolidation", 0.6, consolidating, True),
        ):
            snapshot = build(size, share, fragmented=case == "consolidation")
            gc.collect()
            base = best_of(functools.partial(baseline, snapshot), repeat)
            took = best_of(functools.partial(decision, snapshot, pol, held), repeat)
            d = decision(snapshot, pol, held)
            row[case] = {
                "baseline_seconds": round(base, 4),
                "decision_seconds": round(took, 4),
                "ratio_to_baseline": round(took / base, 2),
                "action": d.action.value,  # type: ignore[attr-defined]
                "delta": float(d.delta),  # type: ignore[attr-defined]
            }
            if case == "consolidation":
                without = best_of(functools.partial(decision, snapshot, packing, held), repeat)
                row[case]["chosen"] = [c.choice.value for c in d.consolidation.chosen]  # type: ignore[attr-defined]
                row[case]["without_consolidation_seconds"] = round(without, 4)
                row[case]["consolidation_ratio"] = round(took / without, 2)
            if case in previous:
                row[case]["growth"] = round(took / previous[case], 2)
            previous[case] = took
            del snapshot
        results["sizes"][str(size)] = row
    if "10000" in results["sizes"]:
        at_10k = results["sizes"]["10000"]
        cases = ("scale_up", "scale_down", "consolidation")
        results["goal_10k_nodes_under_1s"] = max(at_10k[c]["decision_seconds"] for c in cases) < 1
    return results

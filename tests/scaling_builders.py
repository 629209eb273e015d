"""One-line builders for decision tests: nodes, pods, groups, policies, and applying a decision."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.decision import AutoscalerState
from clusterman.decision import Decision
from clusterman.decision import ScalingPolicy
from clusterman.decision import decide
from clusterman.decision.exact import exact

READY, TAINTED, CORDONED, ORPHAN = NodeState.READY, NodeState.TAINTED, NodeState.CORDONED, NodeState.ORPHAN
NOW = 1_700_000_000.0


def pods(count: int, cpus: float = 0.5, mem: float = 100, **flags: bool) -> tuple[Task, ...]:
    return tuple(Task(f"p{i}", Resources(cpus=cpus, mem=mem), **flags) for i in range(count))


def node(
    node_id: str,
    group: str = "g1",
    state: NodeState = READY,
    cpus: float = 1,
    mem: float = 4000,
    weight: float = 1,
    launched_at: float = NOW - 86400,
    tainted_at: float = NO_TIME,
    tasks: tuple[Task, ...] = (),
) -> Node:
    return Node(
        node_id,
        state,
        Resources(cpus=cpus, mem=mem),
        group_id=group,
        weight=weight,
        launched_at=launched_at,
        tainted_at=tainted_at,
        tasks=tasks,
    )


def nodes(count: int, prefix: str = "n", **kwargs: object) -> list[Node]:
    return [node(f"{prefix}{i}", **kwargs) for i in range(count)]  # type: ignore[arg-type]


def group(
    group_id: str = "g1", target: float = 0, lo: float = 0, hi: float = math.inf, stale: bool = False, **kw: object
) -> ResourceGroup:
    return ResourceGroup(group_id, target, target, lo, hi, stale, **kw)  # type: ignore[arg-type]


def snapshot(
    node_list: list[Node], groups: list[ResourceGroup] | None = None, pending: tuple[Task, ...] = ()
) -> PoolSnapshot:
    if groups is None:
        weight = sum(n.weight for n in node_list if n.state is not NodeState.UNKNOWN)
        groups = [group("g1", weight)]
    return PoolSnapshot(NOW, tuple(node_list), tuple(groups), pending)


def policy(**overrides: object) -> ScalingPolicy:
    """Wide limits, setpoint 70%, margin 0, unless overridden; numbers become exact fractions."""
    values: dict[str, object] = {
        "min_capacity": 0,
        "max_capacity": 1000,
        "max_weight_to_add": 1000,
        "max_weight_to_remove": 1000,
        "setpoint": 0.7,
        "target_capacity_margin": 0,
    }
    values.update(overrides)
    fractions = {"min_capacity", "max_capacity", "max_weight_to_add", "max_weight_to_remove", "setpoint",
                 "target_capacity_margin", "scale_up_hedge"}  # fmt: skip
    return ScalingPolicy(**{k: exact(v) if k in fractions else v for k, v in values.items()})  # type: ignore[arg-type]


def request(cpus: float | None = None, mem: float | None = None) -> ResourceRequest:
    return ResourceRequest(
        cpus=NO_OPINION if cpus is None else cpus,
        mem=NO_OPINION if mem is None else mem,
    )


def run(
    snap: PoolSnapshot,
    req: ResourceRequest,
    pol: ScalingPolicy | None = None,
    state: AutoscalerState | None = None,
    now: float = NOW,
) -> Decision:
    return decide(snap, {"app": req}, pol or policy(), state or AutoscalerState(), now)


def apply(snap: PoolSnapshot, d: Decision, now: float, template: Node | None = None) -> PoolSnapshot:
    """The pool after the decision is carried out and the cloud has filled every group's target:
    untainted nodes ready, tainted ones tainted at ``now``, terminated ones gone, joining ones
    joined, new ready nodes (copies of ``template`` or the group's first node) launched to reach
    each target."""
    untaint, taint, terminate = set(d.untaint), set(d.taint), set(d.terminate)
    kept = []
    for n in snap.nodes:
        if n.id in terminate:
            continue
        if n.id in untaint:
            n = replace(n, state=READY, tainted_at=NO_TIME)
        elif n.id in taint:
            n = replace(n, state=TAINTED, tainted_at=now)
        elif n.state is ORPHAN:
            n = replace(n, state=READY)
        kept.append(n)
    groups = []
    for g in snap.groups:
        target = d.group_targets[g.id]
        members = [n for n in kept if n.group_id == g.id and n.state in (READY, TAINTED, ORPHAN, CORDONED)]
        have = sum((exact(n.weight) for n in members), Fraction(0))
        model = template or next((n for n in snap.nodes if n.group_id == g.id), None)
        count = 0
        while model is not None and have < target:
            kept.append(replace(model, id=f"{g.id}-new-{now:g}-{count}", state=READY, tasks=(), launched_at=now,
                                tainted_at=NO_TIME))  # fmt: skip
            have += exact(model.weight)
            count += 1
        groups.append(replace(g, target_capacity=float(target), fulfilled_capacity=float(have)))
    return PoolSnapshot(now, tuple(kept), tuple(groups), snap.pending)

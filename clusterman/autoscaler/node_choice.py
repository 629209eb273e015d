"""Which nodes to untaint, taint and terminate, once the group targets are known (docs/scaling.md).

Untaint (newest first) where a group's ready and joining capacity is below its target: running
capacity comes back before the cloud is asked for more. Taint where ready capacity exceeds the
target, in Clusterman's order (stale groups, nodes past the minimum uptime, idle, fewest batch
tasks, fewest tasks, then oldest first as Escalator does), never taking the pool's ready capacity
or a group's below its target, never more than max_weight_to_remove a run, never a node with a
safe-to-evict=false pod. Terminate orphans past the orphan timeout (or not needed, or in stale
groups), and tainted nodes once empty after the soft grace period, or within max_tasks_to_kill,
or regardless after the hard grace period; never when that takes joined capacity below the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction

from clusterman.autoscaler.exact import ZERO
from clusterman.autoscaler.exact import exact
from clusterman.autoscaler.exact import show
from clusterman.autoscaler.policy import ScalingPolicy
from clusterman.autoscaler.pool_view import PoolView
from clusterman.cluster.model import NO_TIME
from clusterman.cluster.model import Node


@dataclass(frozen=True)
class NodeActions:
    untaint: tuple[str, ...] = ()
    taint: tuple[str, ...] = ()
    terminate: tuple[str, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    untainted_weight: Fraction = ZERO
    tainted_weight: Fraction = ZERO


@dataclass(frozen=True, slots=True)
class _Load:
    """What removing a node would disturb, counted in one pass over its tasks."""

    tasks: int
    batch: int
    pinned: bool

    @staticmethod
    def of(node: Node) -> _Load:
        tasks = batch = 0
        pinned = False
        for t in node.tasks:
            if t.daemon:
                continue
            tasks += 1
            batch += t.batch
            pinned = pinned or not t.safe_to_evict
        return _Load(tasks, batch, pinned)


def choose(
    view: PoolView, group_targets: dict[str, Fraction], policy: ScalingPolicy, now: float, may_remove: bool
) -> NodeActions:
    """``may_remove`` is False while scale-down is blocked (scale lock, capacity-loss guard)."""
    live_target = sum((group_targets[g.id] for g in view.live_groups), ZERO)
    ready_w = dict(view.ready_weight)
    reasons: dict[str, str] = {}

    untainted = _untaint(view, group_targets, ready_w, policy, now, reasons)
    tainted: list[Node] = []
    terminate: list[str] = []
    loads: dict[str, _Load] = {}
    if may_remove:
        tainted = _taint(view, group_targets, live_target, ready_w, policy, now, loads, reasons)
        terminate = _orphans(view, group_targets, ready_w, policy, now, reasons)
        untainted_ids = {n.id for n in untainted}
        still_tainted = [n for n in view.tainted if n.id not in untainted_ids]
        terminate += _expired(still_tainted, tainted, ready_w, live_target, policy, now, loads, reasons)
    return NodeActions(
        untaint=tuple(n.id for n in untainted),
        taint=tuple(n.id for n in tainted),
        terminate=tuple(terminate),
        reasons=reasons,
        untainted_weight=sum((exact(n.weight) for n in untainted), ZERO),
        tainted_weight=sum((exact(n.weight) for n in tainted), ZERO),
    )


def _untaint(
    view: PoolView,
    group_targets: dict[str, Fraction],
    ready_w: dict[str, Fraction],
    policy: ScalingPolicy,
    now: float,
    reasons: dict[str, str],
) -> list[Node]:
    joining = _joining_weight(view, policy, now)
    chosen: list[Node] = []
    for g in view.live_groups:
        short = group_targets[g.id] - ready_w[g.id] - joining.get(g.id, ZERO)
        if short <= 0:
            continue
        newest_first = sorted((n for n in view.tainted if n.group_id == g.id), key=lambda n: (-n.launched_at, n.id))
        for node in newest_first:
            if short <= 0:
                break
            w = exact(node.weight)
            chosen.append(node)
            ready_w[g.id] += w
            short -= w
            reasons[node.id] = f"untaint: group {g.id} is short of its target {show(group_targets[g.id])}"
    return chosen


def _taint(
    view: PoolView,
    group_targets: dict[str, Fraction],
    live_target: Fraction,
    ready_w: dict[str, Fraction],
    policy: ScalingPolicy,
    now: float,
    loads: dict[str, _Load],
    reasons: dict[str, str],
) -> list[Node]:
    excess = sum(ready_w.values(), ZERO) - live_target
    if excess <= 0:
        return []
    for node in view.ready:
        loads[node.id] = _Load.of(node)
    stale = {g.id for g in view.groups.values() if g.stale}
    min_uptime = policy.min_node_scalein_uptime_seconds

    def young(n: Node) -> bool:
        return n.launched_at != NO_TIME and now - n.launched_at < min_uptime

    def order(n: Node) -> tuple[int, int, int, int, int, float, str]:
        load = loads[n.id]
        return (
            n.group_id not in stale,
            young(n),
            load.tasks > 0,
            load.batch,
            load.tasks,
            n.launched_at,
            n.id,
        )

    chosen: list[Node] = []
    removed = ZERO
    for node in sorted((n for n in view.ready if not loads[n.id].pinned), key=order):
        if excess <= 0:
            break
        w = exact(node.weight)
        g = node.group_id
        if w > excess or ready_w[g] - w < group_targets[g] or removed + w > policy.max_weight_to_remove:
            continue
        chosen.append(node)
        ready_w[g] -= w
        excess -= w
        removed += w
        load = loads[node.id]
        why = "stale group" if g in stale else "idle" if not load.tasks else f"{load.tasks} tasks"
        reasons[node.id] = f"taint: ready capacity above target {show(live_target)} ({why})"
    return chosen


def _orphans(
    view: PoolView,
    group_targets: dict[str, Fraction],
    ready_w: dict[str, Fraction],
    policy: ScalingPolicy,
    now: float,
    reasons: dict[str, str],
) -> list[str]:
    """Orphans past the timeout, in stale groups, or beyond what their group still needs to join."""
    limit = policy.orphan_instance_uptime_threshold_seconds
    needed = {gid: group_targets[gid] - ready_w[gid] for gid in ready_w}
    chosen = []
    for node in sorted(view.orphans, key=lambda n: (n.launched_at, n.id)):
        g = view.groups[node.group_id]
        age = now - node.launched_at if node.launched_at != NO_TIME else None
        if age is not None and age >= limit:
            reasons[node.id] = f"terminate: orphan, not joined {show(exact(age))}s after launch (limit {limit:g}s)"
        elif g.stale:
            reasons[node.id] = f"terminate: orphan in stale group {g.id}"
        elif needed[g.id] > 0:
            needed[g.id] -= exact(node.weight)
            continue
        else:
            reasons[node.id] = f"terminate: orphan not needed, group {g.id} has its target ready"
        chosen.append(node.id)
    return chosen


def _expired(
    tainted_before: list[Node],
    tainted_now: list[Node],
    ready_w: dict[str, Fraction],
    live_target: Fraction,
    policy: ScalingPolicy,
    now: float,
    loads: dict[str, _Load],
    reasons: dict[str, str],
) -> list[str]:
    """Tainted nodes whose grace period is over, oldest taint first."""
    soft, hard = policy.soft_delete_grace_period_seconds, policy.hard_delete_grace_period_seconds
    nodes = [(n, n.tainted_at) for n in tainted_before] + [(n, now) for n in tainted_now]
    joined = sum(ready_w.values(), ZERO) + sum((exact(n.weight) for n, _ in nodes), ZERO)
    killed = 0
    chosen = []
    for node, tainted_at in sorted(nodes, key=lambda p: (p[1] if p[1] != NO_TIME else -math.inf, p[0].id)):
        # a taint of unknown age counts as past the soft grace period, never past the hard one
        age = now - tainted_at if tainted_at != NO_TIME else soft
        load = loads.get(node.id) or _Load.of(node)
        if age >= hard:
            why = f"tainted {show(exact(age))}s ≥ hard_delete_grace_period {hard:g}s"
            tasks = 0
        elif load.pinned or age < soft:
            continue
        elif load.tasks == 0:
            why, tasks = f"empty, tainted {show(exact(age))}s ≥ soft_delete_grace_period {soft:g}s", 0
        elif load.tasks < policy.max_tasks_to_kill and killed + load.tasks <= policy.max_tasks_to_kill:
            why, tasks = f"{load.tasks} tasks within max_tasks_to_kill {policy.max_tasks_to_kill:g}", load.tasks
        else:
            continue
        w = exact(node.weight)
        if joined - w < live_target:
            continue
        joined -= w
        killed += tasks
        chosen.append(node.id)
        reasons[node.id] = f"{reasons[node.id]}; terminate: {why}" if node.id in reasons else f"terminate: {why}"
    return chosen


def _joining_weight(view: PoolView, policy: ScalingPolicy, now: float) -> dict[str, Fraction]:
    """Orphans still within the orphan timeout: capacity on its way, per group."""
    limit = policy.orphan_instance_uptime_threshold_seconds
    joining: dict[str, Fraction] = {}
    for n in view.orphans:
        if n.launched_at == NO_TIME or now - n.launched_at < limit:
            joining[n.group_id] = joining.get(n.group_id, ZERO) + exact(n.weight)
    return joining

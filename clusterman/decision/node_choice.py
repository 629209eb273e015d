"""Which nodes to untaint, taint and terminate, once the group targets are known (docs/scaling.md).

Untaint (newest first) where a group's ready and joining capacity is below its target: running
capacity comes back before the cloud is asked for more. Taint where ready capacity exceeds the
target, in Clusterman's order (stale groups, nodes past the minimum uptime, idle, fewest batch
tasks, fewest tasks, then oldest first as Escalator does), never taking the pool's ready capacity
or a group's below its target, never more than max_weight_to_remove a run, never a node with a
safe-to-evict=false pod, never a node whose tasks fit on none of the nodes that stay (fit.py: a
drained node's pods must not wait while the free room is split). Terminate orphans past the
orphan timeout (or not needed, or in stale groups), and tainted nodes once empty after the soft
grace period, or within max_tasks_to_kill when their tasks fit elsewhere, or regardless after the
hard grace period; never when that takes joined capacity below the target.

Weights are counted in integer millionths (``exact.micro``) in these per-node loops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import from_micro
from clusterman.decision.exact import micro
from clusterman.decision.exact import show
from clusterman.decision.fit import Room
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView


@dataclass(frozen=True)
class NodeActions:
    untaint: tuple[str, ...] = ()
    taint: tuple[str, ...] = ()
    terminate: tuple[str, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    untainted_weight: Fraction = ZERO
    tainted_weight: Fraction = ZERO
    kept: tuple[str, ...] = ()  # would have been removed, but their tasks fit on no remaining node
    # the most tasks a node to terminate may run when it goes: the count it was chosen on (a node
    # past the hard grace period, or an orphan, is not named: it goes whatever runs there)
    terminate_with: dict[str, int] = field(default_factory=dict)


class _Choice:
    """The working figures of one choice, in millionths of a weight unit."""

    def __init__(
        self,
        view: PoolView,
        group_targets: dict[str, Fraction],
        policy: ScalingPolicy,
        now: float,
        keeping: frozenset[str] = frozenset(),
        leaving: frozenset[str] = frozenset(),
        resting: frozenset[str] = frozenset(),
    ):
        self.view, self.policy, self.now, self.keeping = view, policy, now, keeping
        self.leaving, self.resting = leaving, resting
        self.targets = {gid: micro(t) for gid, t in group_targets.items()}
        self.stale = {g.id for g in view.groups.values() if g.stale}
        self.live_target = sum(self.targets[g.id] for g in view.live_groups)
        self.ready = {gid: micro(w) for gid, w in view.ready_weight.items()}
        self.reasons: dict[str, str] = {}
        self.kept: list[str] = []
        self.terminate_with: dict[str, int] = {}
        self.untainted: list[Node] = []
        self.tainted: list[Node] = []
        self._order: list[Node] | None = None
        self._room: Room | None = None
        self._placed: dict[str, str] = {}  # nodes tainted before this run: "" once their tasks are placed

    def removal_order(self) -> list[Node]:
        """Ready nodes that may be tainted, in Clusterman's order (stale groups, past the minimum
        uptime, idle, fewest batch tasks, fewest tasks, oldest)."""
        if self._order is None:
            now, min_uptime, stale = self.now, self.policy.min_node_scalein_uptime_seconds, self.stale

            def order(n: Node) -> tuple[bool, bool, bool, int, int, float, str]:
                u = n.usage
                young = n.launched_at != NO_TIME and now - n.launched_at < min_uptime
                return (n.group_id not in stale, young, u.tasks > 0, u.batch_tasks, u.tasks, n.launched_at, n.id)

            resting = self.resting
            self._order = sorted((n for n in self.view.ready if not n.usage.pinned and n.id not in resting), key=order)
        return self._order

    def fits_elsewhere(self, node: Node) -> str:
        """ "" when ``node`` may leave: its tasks fit on the nodes that stay (fit.py); else why not.
        The room is measured only when a node with tasks is first considered."""
        if self._room is None:
            if not node.usage.tasks:
                return ""
            # receivers, those least likely to leave first: pinned, untainted now, last in the order
            pinned = [n for n in self.view.ready if n.usage.pinned]
            receivers = [*pinned, *self.untainted, *reversed(self.removal_order())]
            self._room = Room(receivers, gone=(n.id for n in self.tainted))
            # work still on nodes tainted earlier needs a home too (it stays demand): placed first,
            # so a run after a drain sees the room that drain took
            untainted = {n.id for n in self.untainted}
            for before in sorted(self.view.tainted, key=lambda n: (n.tainted_at, n.id)):
                if before.id not in untainted and before.usage.tasks:
                    self._placed[before.id] = self._room.try_move(before)
        if node.id in self._placed:
            return self._placed[node.id]
        return self._room.try_move(node)

    def keep(self, node: Node, why: str) -> None:
        self.kept.append(node.id)
        self.reasons[node.id] = why

    def untaint(self) -> list[Node]:
        joining = self._joining()
        chosen: list[Node] = []
        for g in self.view.live_groups:
            short = self.targets[g.id] - self.ready[g.id] - joining.get(g.id, 0)
            if short <= 0:
                continue
            # a node drained to be kept comes back first, once its pods are gone; newest first
            members = (
                n
                for n in self.view.tainted
                if n.group_id == g.id and not (n.id in self.keeping and n.usage.tasks) and n.id not in self.leaving
            )
            for node in sorted(members, key=lambda n: (n.id not in self.keeping, -n.launched_at, n.id)):
                if short <= 0:
                    break
                w = micro(node.weight)
                chosen.append(node)
                self.untainted.append(node)
                self.ready[g.id] += w
                short -= w
                self.reasons[node.id] = (
                    f"untaint: group {g.id} is short of its target {show(from_micro(self.targets[g.id]))}"
                )
        return chosen

    def consolidate(self, chosen: dict[str, tuple[bool, str]]) -> None:
        """Taint the nodes consolidation chose (by id: whether it removes the node, and why) before
        any other: a node removed leaves the ready capacity, one kept comes back once drained."""
        by_id = {n.id: n for n in self.view.ready}
        for node_id, (removed, why) in chosen.items():
            node = by_id[node_id]
            self.tainted.append(node)
            if removed:
                self.ready[node.group_id] -= micro(node.weight)
            self.reasons[node_id] = f"taint: {why}"

    def taint(self) -> list[Node]:
        excess = sum(self.ready.values()) - self.live_target
        chosen = self.tainted
        if excess <= 0:
            return chosen
        stale = self.stale
        budget = micro(self.policy.max_weight_to_remove)
        target_text = show(from_micro(self.live_target))
        already = {n.id for n in chosen}
        for node in self.removal_order():
            if excess <= 0:
                break
            w, g = micro(node.weight), node.group_id
            if node.id in already or w > excess or self.ready[g] - w < self.targets[g] or w > budget:
                continue
            stays = self.fits_elsewhere(node)
            if stays:
                self.keep(node, f"kept: {stays}")
                continue
            chosen.append(node)
            self.ready[g] -= w
            excess -= w
            budget -= w
            tasks = node.usage.tasks
            why = "stale group" if g in stale else "idle" if not tasks else f"{tasks} tasks"
            self.reasons[node.id] = f"taint: ready capacity above target {target_text} ({why})"
        return chosen

    def orphans(self) -> list[str]:
        """Orphans past the timeout, in stale groups, or beyond what their group still needs to join."""
        limit = self.policy.orphan_instance_uptime_threshold_seconds
        needed = {gid: self.targets[gid] - self.ready[gid] for gid in self.ready}
        chosen = []
        for node in sorted(self.view.orphans, key=lambda n: (n.launched_at, n.id)):
            g = node.group_id
            age = self.now - node.launched_at if node.launched_at != NO_TIME else None
            if age is not None and age >= limit:
                why = f"orphan, not joined {age:g}s after launch (limit {limit:g}s)"
            elif g in self.stale:
                why = f"orphan in stale group {g}"
            elif needed[g] > 0:
                needed[g] -= micro(node.weight)  # on its way to fill the group's target: keep
                continue
            else:
                why = f"orphan not needed, group {g} has its target ready"
            chosen.append(node.id)
            self.reasons[node.id] = f"terminate: {why}"
        return chosen

    def expired(self, tainted_before: list[Node], tainted_now: list[Node]) -> list[str]:
        """Tainted nodes whose grace period is over, oldest taint first."""
        policy, now = self.policy, self.now
        soft, hard = policy.soft_delete_grace_period_seconds, policy.hard_delete_grace_period_seconds
        nodes = [(n, n.tainted_at) for n in tainted_before] + [(n, now) for n in tainted_now]
        joined = sum(self.ready.values()) + sum(micro(n.weight) for n, _ in nodes)
        killed = 0
        chosen = []
        for node, tainted_at in sorted(nodes, key=lambda p: (p[1] if p[1] != NO_TIME else -math.inf, p[0].id)):
            # a taint of unknown age counts as past the soft grace period, never past the hard one
            age = now - tainted_at if tainted_at != NO_TIME else soft
            load = node.usage
            tasks = 0
            if age >= hard:
                why = f"tainted {age:g}s ≥ hard_delete_grace_period {hard:g}s"
            elif load.pinned or age < soft:
                continue
            elif load.tasks == 0:
                why = f"empty, tainted {age:g}s ≥ soft_delete_grace_period {soft:g}s"
            elif load.tasks < policy.max_tasks_to_kill and killed + load.tasks <= policy.max_tasks_to_kill:
                why, tasks = f"{load.tasks} tasks within max_tasks_to_kill {policy.max_tasks_to_kill:g}", load.tasks
            else:
                continue
            w = micro(node.weight)
            if joined - w < self.live_target:
                continue
            if tasks and tainted_at != now:  # a node tainted in this run has had its tasks placed
                stays = self.fits_elsewhere(node)
                if stays:
                    self.keep(node, f"not terminated: {stays}")
                    continue
            joined -= w
            killed += tasks
            chosen.append(node.id)
            if age < hard:
                self.terminate_with[node.id] = load.tasks
            before = self.reasons.get(node.id)
            self.reasons[node.id] = f"{before}; terminate: {why}" if before else f"terminate: {why}"
        return chosen

    def _joining(self) -> dict[str, int]:
        """Orphans still within the orphan timeout: capacity on its way, per group."""
        limit = self.policy.orphan_instance_uptime_threshold_seconds
        joining: dict[str, int] = {}
        for n in self.view.orphans:
            if n.launched_at == NO_TIME or self.now - n.launched_at < limit:
                joining[n.group_id] = joining.get(n.group_id, 0) + micro(n.weight)
        return joining


def choose(
    view: PoolView,
    group_targets: dict[str, Fraction],
    policy: ScalingPolicy,
    now: float,
    may_remove: bool,
    consolidated: dict[str, tuple[bool, str]] | None = None,
    keeping: frozenset[str] = frozenset(),
    leaving: frozenset[str] = frozenset(),
    resting: frozenset[str] = frozenset(),
) -> NodeActions:
    """``may_remove`` is False while scale-down is blocked (scale lock, capacity-loss guard).
    ``consolidated``: the nodes consolidation chose, by id: (removed, why); ``keeping``: nodes
    drained to be kept, untainted only once their pods are gone; ``leaving``: nodes leaving for a
    notice, which the drain machinery handles (``drains.py``); ``resting``: nodes whose drain was
    given up lately, not tainted again yet."""
    c = _Choice(view, group_targets, policy, now, keeping, leaving, resting)
    untainted = c.untaint()
    tainted: list[Node] = []
    terminate: list[str] = []
    if may_remove:
        if consolidated:
            c.consolidate(consolidated)
        tainted = c.taint()
        terminate = c.orphans()
        untainted_ids = {n.id for n in untainted}
        before = [n for n in view.tainted if n.id not in untainted_ids and n.id not in leaving]
        terminate += c.expired(before, tainted)
    return NodeActions(
        untaint=tuple(n.id for n in untainted),
        taint=tuple(n.id for n in tainted),
        terminate=tuple(terminate),
        reasons=c.reasons,
        kept=tuple(c.kept),
        terminate_with={n: c.terminate_with[n] for n in terminate if n in c.terminate_with},
        untainted_weight=from_micro(sum(micro(n.weight) for n in untainted)),
        # a node drained to be kept comes back: it is no scale-down
        tainted_weight=from_micro(
            sum(micro(n.weight) for n in tainted if consolidated is None or consolidated.get(n.id, (True,))[0])
        ),
    )

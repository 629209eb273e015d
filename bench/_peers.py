"""Other autoscalers' rules, replayed through the same simulated run as clusterman's decision, for
the scoreboard's peer rows (``bench/scoreboard.py``, docs/scoreboard.md "The peers").

Each peer is a decision function with ``decide``'s signature (``clusterman.run.cycle.Decider``),
with its own memory across runs, as the real autoscaler keeps it in its process. Neither reads a
signal: both act on the pods they see.

``ClusterAutoscaler``: Kubernetes' cluster-autoscaler with its default flags.
  scale-up     only for pods that are pending: they are packed first fit, largest first (its
               ``binpacking`` estimator), onto the ready nodes' free room, then the nodes still
               joining (its "upcoming nodes"), then new nodes; the new nodes are launched
  scale-down   a ready node is unneeded while its requests are under 50% of its allocatable in
               CPUs and in memory (``--scale-down-utilization-threshold`` 0.5) and its pods fit
               on the other nodes; once unneeded for 10 minutes (``--scale-down-unneeded-time``)
               it is drained and deleted; nothing is removed within 10 minutes of a scale-up
               (``--scale-down-delay-after-add``) nor while pods are pending; empty nodes up to 10
               at once (``--max-empty-bulk-delete``), one node with pods at a time
               (``--max-drain-parallelism`` 1); a drained node is deleted once empty or after
               10 minutes (``--max-graceful-termination-sec`` 600)
``Karpenter``: Karpenter v1 with ``consolidationPolicy: WhenEmptyOrUnderutilized`` and
``consolidateAfter: 0s``, one instance type (so consolidation deletes, never replaces).
  provisioning the same packing of the pending pods onto the free room, the nodes in flight and
               new nodes (a NodeClaim per new node)
  consolidation every run, within the default budget (``nodes: 10%`` of the pool's nodes disrupted
               at once, rounded up, nodes already leaving counted): empty nodes first, then the nodes with
               the fewest pods whose pods, with the pending ones, fit on the nodes that stay (its
               scheduling simulation includes pending pods and nodes in flight), up to 10
               candidates that do not fit a run (its searches run under time limits); no waiting
               period; a node leaves once drained (no termination grace period set: it waits)

Sources: cluster-autoscaler's FAQ ("How does scale-down work?", its flag table) and
Karpenter's "Disruption" concept page (v1), as of 2024-2025. Both move a drained node's pods
with the simulated scheduler, as clusterman's drains do.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import Task
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import Notice
from clusterman.core.resources import ResourceRequest
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.distribute import distribute
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import show
from clusterman.decision.fit import Need
from clusterman.decision.fit import need_of
from clusterman.decision.holds import Hold
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView
from clusterman.decision.pool_view import view_of
from clusterman.decision.result import Decision
from clusterman.decision.result import Reason
from clusterman.decision.result import action_of

MICRO = 1_000_000
UNNEEDED_SECONDS = 600.0  # --scale-down-unneeded-time
DELAY_AFTER_ADD_SECONDS = 600.0  # --scale-down-delay-after-add
UTILISATION_THRESHOLD = 0.5  # --scale-down-utilization-threshold
EMPTY_BULK = 10  # --max-empty-bulk-delete
GRACEFUL_SECONDS = 600.0  # --max-graceful-termination-sec
KARPENTER_BUDGET = Fraction(1, 10)  # the default disruption budget, nodes: 10%
SINGLE_TRIES = 10  # candidates that do not fit looked at in one run (its consolidation searches have time limits)


_NEEDS: dict[tuple[float, float, float, float], Need] = {}  # a pool's pods come in a few sizes


def _need(task: Task) -> Need:
    r = task.requests
    key = (r.cpus, r.mem, r.disk, r.gpus)
    need = _NEEDS.get(key)
    if need is None:
        need = _NEEDS[key] = need_of(*(max(v, 0.0) for v in key))
    return need


def _room(node: Node) -> list[int]:
    return list(node.free[:4])


def _whole(node: Node) -> list[int]:
    a = node.allocatable
    return list(need_of(a.cpus, a.mem, a.disk, a.gpus))


def _fits(room: list[int], need: Need) -> bool:
    return need[0] <= room[0] and need[1] <= room[1] and need[2] <= room[2] and need[3] <= room[3]


def _take(room: list[int], need: Need) -> None:
    room[0] -= need[0]
    room[1] -= need[1]
    room[2] -= need[2]
    room[3] -= need[3]


def pack(needs: list[Need], bins: list[list[int]], ordered: bool = False) -> bool:
    """Place each need, largest CPUs first, on the first bin with room (the bins' room shrinks):
    whether all of them fit. ``ordered``: the needs are sorted so already. A need like the one
    before looks from the bin that took it on: the bins before had no room for it then, and room
    only shrinks (the same placement as looking from the first, in fewer steps)."""
    start, last, count = 0, None, len(bins)
    for need in needs if ordered else sorted(needs, reverse=True):
        if need != last:
            start, last = 0, need
        for k in range(start, count):
            room = bins[k]
            if need[0] <= room[0] and need[1] <= room[1] and need[2] <= room[2] and need[3] <= room[3]:
                _take(room, need)
                start = k
                break
        else:
            return False
    return True


def new_nodes(needs: list[Need], bins: list[list[int]], size: list[int]) -> int:
    """How many new nodes of ``size`` the needs take once the ``bins`` are full (first fit
    decreasing, as cluster-autoscaler's binpacking estimator and Karpenter's scheduler pack; a
    need like the one before looks from the bin that took it on, as in ``pack``)."""
    rooms = list(bins)
    fresh = 0
    start, last = 0, None
    for need in sorted(needs, reverse=True):
        if need != last:
            start, last = 0, need
        for k in range(start, len(rooms)):
            if _fits(rooms[k], need):
                _take(rooms[k], need)
                start = k
                break
        else:
            if not _fits(size, need):
                continue  # fits no node of this size: no node helps it
            rooms.append(list(size))
            fresh += 1
            _take(rooms[-1], need)
            start = len(rooms) - 1
    return fresh


def _node_size(view: PoolView) -> list[int]:
    nodes = view.ready or view.tainted
    if nodes:
        return _whole(nodes[0])
    for g in view.live_groups:
        r = g.node_resources
        if any(r):
            return list(need_of(r.cpus, r.mem, r.disk, r.gpus))
    return [0, 0, 0, 0]


class Peer(abc.ABC):
    """What both peers share: the pending pods' scale-up, the decision's value, their memory. Each
    peer says which nodes it removes (``remove``)."""

    name = "peer"

    def __init__(self) -> None:
        self.last_scale_up = NO_TIME

    def __call__(
        self,
        snapshot: PoolSnapshot,
        requests: Mapping[str, ResourceRequest],
        policy: ScalingPolicy,
        state: AutoscalerState,
        now: float,
        holds: tuple[Hold, ...] = (),
        unseen: Fraction | None = ZERO,
        notices: tuple[Notice, ...] = NO_NOTICES,  # not modelled: the peer's scaling alone is compared
        ahead: Fraction = ZERO,  # not modelled either
    ) -> Decision:
        view = view_of(snapshot)
        pending = [_need(t) for t in snapshot.pending if t.asks_for_capacity]
        T = view.target
        joining = [n for n in view.orphans if n.launched_at != NO_TIME]
        size = _node_size(view)
        bins = [_room(n) for n in view.ready] + [list(size) for _ in joining]
        more = new_nodes(pending, bins, size) if pending else 0
        more = min(more, max(int(policy.max_capacity - T), 0))
        removed: list[Node] = []
        if more:
            self.last_scale_up = now
            why = f"{len(pending)} pods pending: {more} new nodes"
        else:
            removed, why = self.remove(view, pending, now)
        target = T + more - sum((exact(n.weight) for n in removed), ZERO)
        if more:
            group_targets = distribute(view.groups.values(), target)
        else:
            group_targets = {g.id: exact(g.target_capacity) for g in view.groups.values()}
            for n in removed:
                group_targets[n.group_id] -= exact(n.weight)
        taint = tuple(n.id for n in removed)
        reasons = {n.id: f"taint: {why}" for n in removed}
        terminate, terminate_with = [], {}
        fresh = set(taint)
        for n in [*view.tainted, *removed]:
            age = now - n.tainted_at if n.tainted_at != NO_TIME and n.id not in fresh else 0.0
            if not n.usage.tasks or age >= self.grace_seconds:
                terminate.append(n.id)
                if age < self.grace_seconds:
                    terminate_with[n.id] = 0
                reasons[n.id] = f"{reasons.get(n.id, '')}; terminate: drained".lstrip("; ")
        tainted_weight = sum((exact(n.weight) for n in removed), ZERO)
        return Decision(
            action=action_of(T, target, ZERO, tainted_weight),
            current_capacity=view.ready_total,
            current_target=T,
            target_capacity=target,
            group_targets=group_targets,
            explanation=f"{self.name}: {why} → target {show(target)}",
            reason=Reason.UTILISATION,
            taint=taint,
            terminate=tuple(terminate),
            terminate_with=terminate_with,
            node_reasons=reasons,
            state=state,
        )

    grace_seconds = GRACEFUL_SECONDS

    @abc.abstractmethod
    def remove(self, view: PoolView, pending: list[Need], now: float) -> tuple[list[Node], str]:
        """The nodes this peer takes away this run, and why, in a few words."""


class ClusterAutoscaler(Peer):
    """cluster-autoscaler's rules (module doc)."""

    name = "cluster-autoscaler"

    def __init__(self) -> None:
        super().__init__()
        self.unneeded: dict[str, float] = {}  # node id -> since when it is unneeded

    def remove(self, view: PoolView, pending: list[Need], now: float) -> tuple[list[Node], str]:
        if pending:
            self.unneeded.clear()
            return [], "pods pending: no scale-down"
        ready = sorted(view.ready, key=lambda n: (n.launched_at, n.id))
        rooms = {n.id: _room(n) for n in ready}
        unneeded: dict[str, float] = {}
        leaving: set[str] = set()
        for node in sorted(ready, key=_requested_share):
            if _requested_share(node) >= UTILISATION_THRESHOLD:
                break
            # its pods on the other nodes, those already found unneeded this run excluded
            trial = {k: list(v) for k, v in rooms.items() if k != node.id and k not in leaving}
            if pack([_need(t) for t in node.workload()], list(trial.values())):
                rooms.update(trial)
                leaving.add(node.id)
                unneeded[node.id] = self.unneeded.get(node.id, now)
        self.unneeded = unneeded
        if self.last_scale_up != NO_TIME and now - self.last_scale_up < DELAY_AFTER_ADD_SECONDS:
            return [], "scale-down delayed after a scale-up"
        due = [n for n in ready if n.id in unneeded and now - unneeded[n.id] >= UNNEEDED_SECONDS]
        empty = [n for n in due if not n.usage.tasks][:EMPTY_BULK]
        draining = any(n.usage.tasks for n in view.tainted)
        busy = [] if draining else [n for n in due if n.usage.tasks][:1]
        chosen = empty + busy
        return chosen, f"{len(chosen)} nodes unneeded for 10 minutes" if chosen else "no node unneeded long enough"


class Karpenter(Peer):
    """Karpenter's rules (module doc)."""

    name = "karpenter"
    grace_seconds = float("inf")

    def remove(self, view: PoolView, pending: list[Need], now: float) -> tuple[list[Node], str]:
        nodes = len(view.ready) + len(view.tainted)
        budget = math.ceil(KARPENTER_BUDGET * nodes) - len(view.tainted)  # rounded up, as Karpenter does
        if budget <= 0:
            return [], "disruption budget spent"
        size = _node_size(view)
        chosen = [n for n in view.ready if not n.usage.tasks][:budget]
        gone = {n.id for n in chosen}
        ordered = sorted(view.ready, key=lambda n: (n.launched_at, n.id))
        rooms = {n.id: _room(n) for n in ordered if n.id not in gone}
        rooms |= {f"{n.id} (in flight)": list(size) for n in view.orphans if n.launched_at != NO_TIME}
        # its scheduling simulation places the pending pods too: a node leaves only when its pods
        # and the pending ones fit on the nodes that stay (else it would need a replacement)
        pending = sorted(pending, reverse=True)
        if not pack(pending, [list(r) for r in rooms.values()], ordered=True):
            return chosen, f"consolidation: {len(chosen)} empty nodes"
        free_cpus = sum(r[0] for r in rooms.values())
        tries = SINGLE_TRIES
        for node in sorted(view.ready, key=lambda n: (n.usage.tasks, _requested_share(n), n.id)):
            if len(chosen) >= budget or tries <= 0:
                break
            if node.id in gone:
                continue
            needs = [_need(t) for t in node.workload()]
            if sum(n[0] for n in needs) > free_cpus - rooms[node.id][0]:
                continue  # its CPUs exceed the others' free room: no packing helps (a shortcut)
            trial = {k: list(v) for k, v in rooms.items() if k != node.id}
            if pack(needs, list(trial.values())) and pack(pending, [list(r) for r in trial.values()], ordered=True):
                chosen.append(node)
                gone.add(node.id)
                rooms = trial
                free_cpus = sum(r[0] for r in rooms.values())
            else:
                tries -= 1
        return chosen, f"consolidation: {len(chosen)} nodes" if chosen else "nothing to consolidate"


def _requested_share(node: Node) -> float:
    """The larger of the CPUs and memory requested over allocatable (cluster-autoscaler's node
    utilisation)."""
    v = node.vector
    shares = [(v[8 + d] + v[12 + d]) / v[d] for d in (0, 1) if v[d] > 0]
    return max(shares, default=0.0)


PEERS = {"ca": ClusterAutoscaler, "karpenter": Karpenter}

"""Consolidation: make the pool's free room whole places, within a disruption budget
(docs/consolidation.md).

Utilisation counts free CPUs, but a pod needs them on one node. When pods of several sizes leave
at random, the free room splits over many nodes into pieces no large pod fits. The slot reserve
(slots.py) then keeps whole nodes' worth of places beside them, and the pool pays for both. In
each run with nothing in flight, consolidation looks at the emptiest nodes, places their pods on
the other nodes as the pool's scheduler would (placement.py), and chooses one of them:
  remove  its pods fit elsewhere, the places left are at least the reserve plus its band, and the
          capacity left is at least what the signals ask for (utilisation alone, before the
          reserve): the target drops by its weight, it is tainted, drained and terminated
  keep    the pool has fewer places than the reserve, and emptying the node makes more places than
          its pods take elsewhere: it is tainted and drained, and untainted once empty; the
          reserve counts the places it will have instead of asking for a new node
It packs only a pool whose ready capacity is at least ``surplus`` weight units above what the
signals ask for plus the reserve's room (a wave that faded: fragments nobody asked for), and a
removal never goes below that room: nearer to the asked capacity, fragments are the spare a burst
lands in, and packing them leaves more demand unmet than it saves. ``surplus`` 0 packs a pool of
any size, removing down to what the signals ask.
A node is looked at only when every pod on it may move (no safe-to-evict=false or do-not-disrupt
pod, none without a controller, none with local storage unless ``evict_local_storage``), and it
is chosen only once it has been a candidate for ``consolidate_after`` (in every run that looked),
no scale-up came within as long, and the budget allows:
``drains_per_run`` nodes, ``evictions_per_hour`` pods, ``max_disrupted_share`` of the nodes
tainted at once. A disruption budget that refuses an eviction (Kubernetes' PodDisruptionBudget)
is the drain's "not now", as for any drain.

Pure: the pool's view, the reserve's figures, the policy, what the last run remembered and the
time in; a value out.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction
from typing import Any

from clusterman.core.model import Node
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.decision.disruption import DisruptionState
from clusterman.decision.exact import MICRO
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import micro
from clusterman.decision.exact import number
from clusterman.decision.exact import show
from clusterman.decision.fit import describe
from clusterman.decision.placement import Moves
from clusterman.decision.placement import Prediction
from clusterman.decision.policy import ConsolidationPolicy
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView
from clusterman.decision.slots import Places
from clusterman.decision.slots import slot_counts

CANDIDATES = 8  # the emptiest nodes looked at each run
KEEP_GIVE_UP_SECONDS = 1800.0  # a node drained to be kept whose pods will not leave is untainted after this


class Choice(enum.Enum):
    REMOVE = "remove"
    KEEP = "keep"


@dataclass(frozen=True)
class Chosen:
    """One node consolidation drains: where its pods are expected to go, and what it makes."""

    choice: Choice
    node: str
    group: str
    weight: Fraction
    moves: tuple[tuple[str, str], ...]  # (pod, the node it is expected on)
    places_before: int
    places_after: int

    def line(self, slot: str) -> str:
        pods = len(self.moves)
        where = sorted({to for _, to in self.moves})
        onto = f" onto {', '.join(where[:3])}{' …' if len(where) > 3 else ''}" if where else ""
        places = f"{self.places_before} → {self.places_after} free {slot} slots"
        if self.choice is Choice.REMOVE:
            return f"consolidation: remove {self.node} ({pods} pods{onto}; {places}; saves {show(self.weight)} units)"
        return f"consolidation: drain {self.node} and keep it ({pods} pods{onto}; {places})"

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.choice.value,
            "node": self.node,
            "group": self.group,
            "moves": {pod: to for pod, to in self.moves},
            "places_before": self.places_before,
            "places_after": self.places_after,
            "saves_capacity": number(self.weight) if self.choice is Choice.REMOVE else 0,
        }


@dataclass(frozen=True)
class Budget:
    """What the disruption budget allows this run, and what of it is used."""

    disrupted: int  # nodes tainted now (before this run's choices)
    max_disrupted: int
    evicted: int  # pods consolidation evicted over the last hour
    max_evictions: int
    drains: int = 0  # nodes with pods chosen this run
    max_drains: int = 1

    def spent(self, pods: int, nodes: int) -> Budget:
        """The budget once a node with ``pods`` pods is drained, ``nodes`` nodes disrupted with it."""
        return Budget(
            self.disrupted + nodes - 1, self.max_disrupted, self.evicted + pods, self.max_evictions,
            self.drains + 1, self.max_drains,
        )  # fmt: skip

    @staticmethod
    def of(policy: ConsolidationPolicy, ready: int, tainted: int, state: DisruptionState, now: float) -> Budget:
        """The budget of a pool with ``ready`` and ``tainted`` nodes, and what the last hour spent.
        The share's floor from its integer parts: the same number, without a Fraction each run."""
        share = policy.max_disrupted_share
        return Budget(
            disrupted=tainted,
            max_disrupted=max(1, share.numerator * (ready + tainted) // share.denominator),
            evicted=state.evicted(now),
            max_evictions=policy.evictions_per_hour,
            max_drains=policy.drains_per_run,
        )

    def describe(self) -> str:
        return (
            f"{self.disrupted} of {self.max_disrupted} nodes disrupted at once, "
            f"{self.evicted} of {self.max_evictions} evictions in the last hour"
        )

    def nodes_left(self) -> int:
        """Nodes that may still be disrupted this run."""
        return self.max_disrupted - self.disrupted - self.drains

    def refuses(self, pods: int, nodes: int = 1) -> str:
        """Why one more node with ``pods`` pods (and ``nodes`` - 1 empty ones with it) is not
        allowed now ("" when it is)."""
        if self.drains >= self.max_drains:
            return f"budget: {self.drains} of {self.max_drains} drains this run"
        if self.disrupted + self.drains + nodes > self.max_disrupted:
            return f"budget: {self.disrupted + self.drains} of {self.max_disrupted} nodes disrupted at once"
        if self.evicted + pods > self.max_evictions:
            return f"budget: {self.evicted} of {self.max_evictions} evictions this hour, {pods} more asked"
        return ""

    def as_json(self) -> dict[str, int]:
        return {
            "nodes_disrupted": self.disrupted,
            "max_nodes_disrupted": self.max_disrupted,
            "evictions_last_hour": self.evicted,
            "max_evictions_per_hour": self.max_evictions,
            "drains_this_run": self.drains,
            "max_drains_per_run": self.max_drains,
        }


@dataclass(frozen=True)
class Consolidation:
    """What consolidation did this run: the nodes chosen (none, most runs), why not otherwise."""

    chosen: tuple[Chosen, ...] = ()
    note: str = ""  # why nothing was chosen ("" when consolidation is off)
    budget: Budget | None = None
    replace: str = ""  # a node whose pods a smaller instance type of the groups would hold, and the saving
    slot: str = ""  # the slot described, for the lines
    state: DisruptionState = field(default_factory=DisruptionState)

    @property
    def removed(self) -> Fraction:
        return sum((c.weight for c in self.chosen if c.choice is Choice.REMOVE), ZERO)

    @property
    def gained(self) -> int:
        """Places the nodes drained to be kept add, net of what their pods take elsewhere."""
        return sum(c.places_after - c.places_before for c in self.chosen if c.choice is Choice.KEEP)

    def lines(self) -> list[str]:
        return [c.line(self.slot) for c in self.chosen]

    def as_json(self) -> dict[str, Any] | None:
        if self.budget is None:  # off: None, or why, when the configuration turned it on
            return {"chosen": [], "note": self.note} if self.note else None
        return {
            "chosen": [c.as_json() for c in self.chosen],
            "note": self.note,
            "replace": self.replace or None,
            "budget": self.budget.as_json(),
        }


OFF = Consolidation()


def consolidate(
    view: PoolView,
    places: Places | None,
    scaling: ScalingPolicy,
    asked: Fraction | None,
    state: DisruptionState,
    now: float,
    busy: str = "",
    resting: frozenset[str] = frozenset(),
) -> Consolidation:
    """``places``: the ready nodes' free slots (None without a slot reserve: no slot, no places);
    ``asked``: the target utilisation alone asks for (None: no opinion, nothing is removed);
    ``busy``: why the pool is in flight ("" when it is not): then nothing is looked at, and what
    the last runs found stays as it was; ``resting``: nodes whose drain was given up lately
    (``drains.py``), not chosen again yet."""
    policy = scaling.consolidation
    if not policy.enabled:
        return OFF
    budget = Budget.of(policy, len(view.ready), len(view.tainted), state, now)
    slot_text = describe(places.slot) if places is not None else ""
    if busy:
        return Consolidation((), busy, budget, "", slot_text, state)
    wanted = places.wanted(scaling.slot_reserve, scaling.slot_reserve_fraction) if places is not None else 0
    keep = wanted + scaling.slot_reserve_band
    reserved = ZERO  # the reserve's room in weight units, kept on top of the asked capacity when surplus > 0
    if policy.surplus > 0 and places is not None and places.per_unit > 0:
        reserved = Fraction(wanted) / places.per_unit
    tight = policy.surplus > 0 and (asked is None or view.ready_total < asked + reserved + policy.surplus)
    if tight:
        why = f"less than {show(policy.surplus)} units above the asked capacity and the reserve"
        return Consolidation((), why, budget, _replacement(view, policy), slot_text, state)
    limits = _Limits(view, asked, scaling, reserved)
    have = places.total if places is not None else 0  # on the ready nodes: capacity joining is in flight
    blocked = _removal_blocked(view, places, limits, keep, scaling)
    candidates = _candidates(view, policy, state.resting(now) | resting)
    if not candidates or (not limits.may_remove() and have >= wanted and not blocked):
        # nothing to look at (what the last runs found stays)
        replace = _replacement(view, policy, candidates)
        return Consolidation((), "no node to consolidate", budget, replace, slot_text, state)
    prediction = Prediction(view.ready, policy.placement, places.slot if places is not None else None)
    for leaving in view.tainted:  # work still on leaving nodes needs a home first
        homes = prediction.place(leaving)
        if not isinstance(homes, Moves):
            why = f"the pods of leaving node {leaving.id} fit on no ready node"
            return Consolidation((), why, budget, "", slot_text, state)
        have -= homes.lost
    index = {n.id: k for k, n in enumerate(view.ready)}
    empties = sorted((n for n in view.ready if not n.usage.tasks), key=lambda n: (-n.launched_at, n.id))
    qualified: list[str] = []
    chosen: list[Chosen] = []
    drained: dict[str, int] = {}
    notes: list[str] = []
    for node in candidates:
        received = prediction.received() if chosen else set()
        if node.id in received:
            continue  # it takes pods of a node chosen before: it stays
        moves = prediction.place(node)
        if not isinstance(moves, Moves):
            notes.append(f"{node.id} stays: {moves}")
            continue
        qualified.append(node.id)  # a candidate: its pods fit elsewhere
        left = have - (places.places[index[node.id]] if places is not None else 0) - moves.lost
        received = prediction.received()  # with this node's pods: an empty node that takes one is not empty
        room = [e for e in empties if e.id not in received][: max(budget.nodes_left() - 1, 0)]
        along = _removal(node, left, room, keep, places, limits)
        choice = Choice.REMOVE if along is not None else None
        if choice is None and _keeps(left + _full(node, places), left, have, wanted, blocked):
            choice = Choice.KEEP
        if choice is None:
            prediction.undo(moves)
            continue
        since = state.candidate_since(node.id)
        waited = 0.0 if since is None else now - since
        why = budget.refuses(len(moves.moves), 1 + len(along or ()))
        if not why and waited < policy.consolidate_after_seconds:
            why = f"{node.id} a candidate for {waited:g}s < consolidate_after {policy.consolidate_after_seconds:g}s"
        if why:
            notes.append(why)
            prediction.undo(moves)
            continue
        targets = tuple((m.pod, prediction.nodes[m.to].id) for m in moves.moves)
        along = along or []
        after = left - sum(_full(e, places) for e in along) if choice is Choice.REMOVE else left + _full(node, places)
        chosen.append(Chosen(choice, node.id, node.group_id, exact(node.weight), targets, have, after))
        chosen += [Chosen(choice, e.id, e.group_id, exact(e.weight), (), after, after) for e in along]
        if choice is Choice.REMOVE:
            limits.take([node, *along])
            blocked = _removal_blocked(view, places, limits, keep, scaling)
        empties = [e for e in empties if e not in along]
        for gone in (node, *along):
            prediction.drop(gone.id)
        have = after
        drained[node.id] = len(moves.moves)
        budget = budget.spent(len(moves.moves), 1 + len(along))
    kept = [c.node for c in chosen if c.choice is Choice.KEEP]
    next_state = state.after(now, qualified, drained, kept)
    note = "" if chosen else notes[0] if notes else "no node to consolidate"
    taken = {c.node for c in chosen}
    replace = _replacement(view, policy, [n for n in candidates if n.id not in taken])
    return Consolidation(tuple(chosen), note, budget, replace, slot_text, next_state)


class _Limits:
    """What removals may take this run, in millionths of a weight unit: the pool keeps what
    utilisation asks for plus the reserve's ``room`` (and ``min_capacity``), each group its own
    minimum, the run removes at most ``max_weight_to_remove``, and a removal smaller than
    ``target_capacity_margin`` of the target is no removal, as for any scale-down."""

    def __init__(self, view: PoolView, asked: Fraction | None, scaling: ScalingPolicy, room: Fraction) -> None:
        self.most = -1  # nothing may go without an opinion on the demand
        if asked is not None:
            floor = max(asked + room, scaling.min_capacity)
            self.most = min(micro(view.target - floor), micro(scaling.max_weight_to_remove))
        self.least = max(micro(scaling.target_capacity_margin * view.target), 1)
        self.groups = {
            g.id: -1 if g.stale else micro(exact(g.target_capacity) - exact(g.min_capacity))
            for g in view.groups.values()
        }
        self.taken = 0
        self.by_group: dict[str, int] = {}

    def may_remove(self) -> bool:
        """Could any node go (the margin allowing)?"""
        return self.most - self.taken >= self.least

    def allows(self, nodes: list[Node]) -> bool:
        total, by_group = self.taken, dict(self.by_group)
        for n in nodes:
            w = micro(n.weight)
            total += w
            by_group[n.group_id] = by_group.get(n.group_id, 0) + w
        return total <= self.most and all(w <= self.groups.get(g, -1) for g, w in by_group.items())

    def enough(self, nodes: list[Node]) -> bool:
        """The removal of ``nodes`` (with those taken before) passes the margin."""
        return self.taken + sum(micro(n.weight) for n in nodes) >= self.least

    def take(self, nodes: list[Node]) -> None:
        for n in nodes:
            w = micro(n.weight)
            self.taken += w
            self.by_group[n.group_id] = self.by_group.get(n.group_id, 0) + w


def smaller_instance(view: PoolView, node: Node) -> str:
    """Would a smaller instance type the pool's live groups launch (fewer weight units: a Spot
    Fleet's or a mixed instances policy's weights) hold the node's pods? The first such, by weight,
    said with the saving; "" when none. Only said: acting on it is a replacement, not a removal.
    A type's hardware counts as much as the node's own type gives its pods (its allocatable over its
    hardware), when that type's hardware is known."""
    offers = [o for g in view.live_groups for o in g.offers if 0 < o.weight < node.weight and any(o.resources)]
    if not offers:
        return ""
    own = next((o for g in view.groups.values() for o in g.offers if o.instance_type == node.instance_type), None)
    kept = [
        node.allocatable[r] / own.resources[r] if own is not None and own.resources[r] > 0 else 1.0
        for r in RESOURCE_NAMES
    ]
    u = node.usage
    need = u.allocated_reserved + u.allocated_unreserved
    fits = [o for o in offers if all(o.resources[r] * k >= need[r] for r, k in zip(RESOURCE_NAMES, kept, strict=True))]
    if not fits:
        return ""
    best = min(fits, key=lambda o: (o.weight, o.instance_type))
    saving = exact(node.weight) - exact(best.weight)
    was = f"{node.instance_type}, " if node.instance_type else ""
    return (
        f"{node.id} ({was}{node.weight:g} units): its {u.tasks} pods would fit on a {best.instance_type} "
        f"({best.weight:g} units): replacing it would save {show(saving)} units"
    )


def _replacement(view: PoolView, policy: ConsolidationPolicy, candidates: list[Node] | None = None) -> str:
    """What replacing the emptiest of ``candidates`` (by default every one) with a smaller type
    would save, for ``plan``; "" when none would. The candidates are not even sorted when the
    groups offer no smaller type at all."""
    if not _smaller_offered(view):
        return ""
    if candidates is None:
        candidates = _candidates(view, policy)
    return next((r for n in candidates if (r := smaller_instance(view, n))), "")


def _smaller_offered(view: PoolView) -> bool:
    """Does a live group offer a type of fewer weight units than some ready node (else no node has a
    ``smaller_instance``)?"""
    weights = [o.weight for g in view.live_groups for o in g.offers if o.weight > 0 and any(o.resources)]
    return bool(weights) and max((n.weight for n in view.ready), default=0) > min(weights)


def _removal(
    node: Node, left: int, empties: list[Node], keep: int, places: Places | None, limits: _Limits
) -> list[Node] | None:
    """May ``node`` be removed, its pods moved, leaving ``left`` places? With it as many empty nodes
    as the ``keep`` places (reserve and band) and the limits allow: the empty nodes it takes along
    (often none); None when it may not."""
    if left < keep or not limits.allows([node]):
        return None
    taken: list[Node] = []
    for empty in empties:
        if left - _full(empty, places) >= keep and limits.allows([node, *taken, empty]):
            taken.append(empty)
            left -= _full(empty, places)
    return taken if limits.enough([node, *taken]) else None


def _keeps(after: int, left: int, have: int, wanted: int, blocked: bool) -> bool:
    """Drain a node to keep it: emptied, it makes more places than its pods take (``after`` >
    ``have``), a place stays free while it drains (a large pod arriving then still finds one), and
    the pool has fewer places than the reserve, or a scale-down waits only for whole places."""
    return after > have and left >= min(wanted, 1) and (have < wanted or blocked)


def _removal_blocked(view: PoolView, places: Places | None, limits: _Limits, keep: int, scaling: ScalingPolicy) -> bool:
    """Utilisation asks for a scale-down the margin allows, and the free room left after the
    smallest such scale-down would hold the ``keep`` places if it were whole: the places are
    missing only because the room is split, so making them lets the pool shrink."""
    if places is None or not limits.may_remove():
        return False
    step = max(Fraction(1), Fraction(math.ceil(scaling.target_capacity_margin * view.target)))
    return all(
        places.free(d) - step * view.capacity[name] / view.ready_total >= keep * places.slot[d] / MICRO
        for d, name in enumerate(RESOURCE_NAMES)
        if places.slot[d] > 0
    )


def _candidates(view: PoolView, policy: ConsolidationPolicy, resting: frozenset[str] = frozenset()) -> list[Node]:
    """The emptiest ready nodes whose every pod may move, but those ``resting`` after a drain given
    up: least requested first (the mean share of CPUs and memory), then fewest pods, then newest."""
    movable = [
        n
        for n in view.ready
        if n.usage.tasks
        and n.id not in resting
        and not n.usage.pinned
        and not n.usage.bare
        and (policy.evict_local_storage or not n.usage.local_storage)
    ]

    def emptiness(n: Node) -> tuple[float, int, float, str]:
        v = n.vector  # allocatable at 0 and 1 (CPUs, memory), their requests at 8 + 12 and 9 + 13
        cpus, mem = v[0], v[1]
        if cpus > 0 and mem > 0:
            share = ((v[8] + v[12]) / cpus + (v[9] + v[13]) / mem) / 2
        elif cpus > 0 or mem > 0:
            share = (v[8] + v[12]) / cpus if cpus > 0 else (v[9] + v[13]) / mem
        else:
            share = 0.0
        return (share, n.usage.tasks, -n.launched_at, n.id)

    movable.sort(key=emptiness)
    return movable[:CANDIDATES]


def _full(node: Node, places: Places | None) -> int:
    """The slots the node holds when empty."""
    if places is None:
        return 0
    a = node.allocatable
    return slot_counts([(*a, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)], places.slot)[0]

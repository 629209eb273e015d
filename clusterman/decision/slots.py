"""The slot reserve: keep room for the pool's largest pod on a few nodes (docs/scaling.md).

Utilisation counts free CPUs over the whole pool; a pod needs them on one node. Run near full with
pods of several sizes, the free room ends up split over many nodes, none with room for the largest
pod, and a new one waits for a node to join although the pool is not full. Like the
over-provisioning placeholders used with Kubernetes' cluster-autoscaler, the decision keeps
``slot_reserve`` places for the largest request seen in the snapshot (running or pending work,
per resource the largest of any task) free after it acts:

  slots(node)     = min over resources the slot asks for of floor(free / slot), free = allocatable
                    minus what the node's tasks request
  slots(target P) = slots of the ready nodes, less the nodes a scale-down to P may take (those
                    with the most slots first: the emptiest leave first), plus
                    (P − ready) × the slots of one new weight unit when P is above the ready capacity
  target          = the smallest P' ≥ P with slots(P') ≥ slot_reserve

Pure: the snapshot's nodes and tasks in, a number of weight units out. Amounts in integer
millionths, as in fit.py.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.model import Node
from clusterman.core.model import Task
from clusterman.core.model import column_max
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.decision.exact import MICRO
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import ceil
from clusterman.decision.exact import show
from clusterman.decision.fit import Need
from clusterman.decision.fit import describe
from clusterman.decision.fit import need_of
from clusterman.decision.pool_view import PoolView

_DIMS = range(len(RESOURCE_NAMES))
_TOTAL_UNITS = {"cpus": "CPUs", "mem": "MB of memory", "disk": "MB of disk", "gpus": "GPUs"}


@dataclass(frozen=True)
class Reserve:
    """The target raised to keep ``wanted`` slots of size ``slot`` free, and why ("" when unchanged)."""

    target: Fraction
    reason: str = ""


def largest_request(nodes: Iterable[Node], pending: Iterable[Task] = ()) -> Need | None:
    """Per resource, the largest request of any task that is demand (not a daemon, not revocable)
    on ``nodes`` (``NodeUsage.largest``, summed up when the node was built) or ``pending``; None
    when there is none or every request is zero."""
    return _largest([n.usage.largest for n in nodes], pending)


def largest_in(view: PoolView, pending: Iterable[Task] = ()) -> Need | None:
    """``largest_request`` over the view's ready and tainted nodes, from their chunks' maxima
    (``PoolView.largest``, remembered with the rest of the view while a chunk does not change)."""
    return _largest(view.largest, pending)


def _largest(sizes: list[tuple[float, ...]], pending: Iterable[Task]) -> Need | None:
    top = column_max([*sizes, *(tuple(t.requests) for t in pending if t.asks_for_capacity)])
    if top is None:
        return None
    need = need_of(*top)
    return need if any(need) else None


def node_slots(vector: tuple[float, ...], slot: Need) -> int:
    """How many ``slot``s fit in the free room of a node (its ``Node.vector``)."""
    return slot_counts([vector], slot)[0]


def slot_counts(vectors: list[tuple[float, ...]], slot: Need) -> list[int]:
    """``node_slots`` of each of ``vectors``."""
    return _counts({d: free_room(vectors, d) for d in _DIMS if slot[d] > 0}, slot, len(vectors))


def node_counts(nodes: list[Node], slot: Need) -> list[int]:
    """``slot_counts`` of the nodes' vectors, from the free room each node worked out once, when it
    was built (``Node.free``, the same integers as ``free_room``)."""
    return _counts({d: [n.free[d] for n in nodes] for d in _DIMS if slot[d] > 0}, slot, len(nodes))


def _counts(rooms: dict[int, list[int]], slot: Need, count: int) -> list[int]:
    """Per resource the slot asks for (``rooms``: each node's free room in it), whole slots in the
    free room, the least of them. Computed as a list per resource and their minimum, since a loop
    per node costs several times more on large pools."""
    per_resource = [[f // slot[d] for f in room] for d, room in rooms.items()]
    if len(per_resource) > 1:
        return list(map(min, *per_resource))
    return per_resource[0] if per_resource else [0] * count


def free_room(vectors: list[tuple[float, ...]], d: int) -> list[int]:
    """Per node (its ``Node.vector``), resource ``d``'s allocatable less what its tasks request, in
    millionths, at least 0."""
    return [max(round((v[d] - v[8 + d] - v[12 + d]) * MICRO), 0) for v in vectors]


def reserve(
    view: PoolView,
    proposed: Fraction,
    slot: Need | None,
    wanted: int,
    band: int = 0,
    fraction: Fraction = ZERO,
    places: Places | None = None,
    coming: int = 0,
) -> Reserve:
    """The smallest target at or above ``proposed`` that leaves ``wanted`` slots free (module doc),
    or ``fraction`` of the slots the ready capacity holds when that is more: large pods arrive in
    proportion to the pods a pool runs, so a large pool needs more places than a small one.
    A scale-down (below the current target) keeps ``wanted + band`` free, at most the current
    target: hysteresis, so that the reserve alone does not remove a node one run and add it back
    a few runs later when the next large pods take the places a removal left just enough of.
    ``places``: the view's, when already counted; ``coming``: places a node being drained to be
    kept will add (consolidate.py), counted as if free already."""
    if slot is None or view.ready_total <= 0:
        return Reserve(proposed)
    slots = places if places is not None else Places(view, slot)
    wanted = slots.wanted(wanted, fraction) - coming
    kept = slots.reserve(proposed, wanted, view.target)
    if band <= 0 or kept.target >= view.target:
        return kept
    wider = slots.reserve(kept.target, wanted + band, view.target)
    if wider.target <= kept.target:
        return kept
    target = min(wider.target, view.target)
    return Reserve(
        target, f"slot reserve: a scale-down keeps {wanted} + {band} free {describe(slot)} slots → {show(target)}"
    )


class Places:
    """The free slots of one snapshot's ready nodes, worked out once: the emptiest leave first, so
    the slots a scale-down by ``leaving`` weight units loses are a prefix sum over the nodes sorted
    by their slots, found by bisection. ``places[k]`` are the slots of ``view.ready[k]``."""

    def __init__(self, view: PoolView, slot: Need) -> None:
        self.slot = slot
        self.nodes = view.ready
        self.ready_total = view.ready_total
        self.per_unit = _unit_slots(view, slot)
        self.places = node_counts(view.ready, slot)  # in the order of ``nodes``
        self.total = sum(self.places)
        self._free: dict[int, Fraction] = {}

    def free(self, d: int) -> Fraction:
        """The ready nodes' free room in resource ``d``, in its units (``Node.free``, summed)."""
        if d not in self._free:
            self._free[d] = Fraction(sum([n.free[d] for n in self.nodes]), MICRO)
        return self._free[d]

    def wanted(self, reserve: int, fraction: Fraction) -> int:
        """The places to keep: ``reserve``, or ``fraction`` of those the ready capacity holds."""
        if fraction > 0:
            return max(reserve, ceil(fraction * self.ready_total * self.per_unit))
        return reserve

    @functools.cached_property
    def prefix(self) -> tuple[list[int], list[int] | list[Fraction], bool]:
        """(slots, weight) of the first k nodes, for k = 0..n, and whether the weights are whole
        numbers (then compared as ints, much cheaper than Fractions): needed by scale-downs only."""
        ready = sorted(zip(self.places, [n.weight for n in self.nodes], strict=True), reverse=True)
        slots = list(itertools.accumulate((s for s, _ in ready), initial=0))
        weights = [w for _, w in ready]
        if all(map(float.is_integer, map(float, weights))):
            return slots, list(itertools.accumulate(map(int, weights), initial=0)), True
        return slots, list(itertools.accumulate(map(Fraction, weights), initial=ZERO)), False

    def at(self, target: Fraction) -> int:
        """Free slots with ``target`` weight units: new units add theirs, removed nodes take theirs."""
        W = self.ready_total
        if target >= W:
            return self.total + int((target - W) * self.per_unit)
        # a node leaves while weight remains to remove: the first k whose weight reaches ``leaving``
        lost, weight, whole = self.prefix
        leaving = W - target
        k = bisect.bisect_left(weight, ceil(leaving) if whole else leaving)
        return self.total - lost[min(k, len(lost) - 1)]

    def reserve(self, proposed: Fraction, wanted: int, current: Fraction) -> Reserve:
        """``current``: the pool's target now; a reserve that raises it says where the room went."""
        W = self.ready_total
        have = self.at(proposed)
        if wanted <= 0 or have >= wanted:
            return Reserve(proposed)
        target = proposed
        if proposed < W:  # keep nodes: the fewest removed that leave enough
            target = W
            for removed in range(1, int(W - proposed) + 1):
                if self.at(W - removed) < wanted:
                    break
                target = W - removed
            target = max(target, proposed)
        if self.at(target) < wanted:
            if self.per_unit <= 0:
                return Reserve(proposed, f"slot reserve: a {describe(self.slot)} slot is larger than one weight unit")
            target = max(target, W) + ceil(Fraction(wanted - self.at(max(target, W)), self.per_unit))
        split = self._split() if target > current else ""
        why = f"slot reserve: {have} free {describe(self.slot)} slots < {wanted}{split} → {show(target)}"
        return Reserve(target, why)

    def _split(self) -> str:
        """Where the free room is when the places are missing: much of it in pieces smaller than a
        slot over many nodes is fragmentation, the mark of a scheduler that spreads pods
        (docs/cluster.md, "The scheduler's scoring"); "" when no ready node has such a piece."""
        dims = [d for d in _DIMS if self.slot[d] > 0]
        room = {d: [n.free[d] for n in self.nodes] for d in dims}
        pieces = sum(1 for k, p in enumerate(self.places) if p == 0 and any(room[d][k] for d in dims))
        if not pieces:
            return ""
        amounts = ", ".join(f"{sum(room[d]) / MICRO:g} free {_TOTAL_UNITS[RESOURCE_NAMES[d]]}" for d in dims)
        return f" ({amounts}, split over {pieces} nodes in pieces smaller than a slot)"


def _unit_slots(view: PoolView, slot: Need) -> Fraction:
    """Slots in one new weight unit: the ready nodes' capacity per unit, divided by the slot, in
    whole slots: capacity × MICRO // (W × slot), worked out on the fractions' integer parts (the
    same floor as with Fractions, without their normalising at each step)."""
    W = view.ready_total
    fits = []
    for d, name in enumerate(RESOURCE_NAMES):
        if slot[d] > 0:
            c = view.capacity.get(name, ZERO)
            fits.append(c.numerator * W.denominator * MICRO // (c.denominator * W.numerator * slot[d]))
    return Fraction(min(fits)) if fits else ZERO

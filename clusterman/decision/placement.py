"""Where the pool's scheduler will put a node's pods once they are evicted: a prediction, for
consolidation (docs/consolidation.md).

The rule is the cluster's scheduler profile, set in ``consolidation.placement``:
  first_fit       the first node with room, in launch order (the simulated scheduler's default)
  most_allocated  the node with room whose CPUs and memory would be the most requested, averaged
                  over the two (Kubernetes' NodeResourcesFit scoring with MostAllocated, the
                  profile autoscaled pools should run); ties in launch order
Pods go one by one, in the order they run on the node (their replacements come back in that
order), onto the ready nodes that stay. Each move is remembered, so the next node's pods find the
room the first left, and a prediction can be undone. Places (``slots.py``) are counted on every
node a pod lands on, before and after.

The first node with room in an order is found in ``fit.Room``'s max-trees, in a few dozen steps
whatever the pool's size. For most_allocated the order is the nodes' requested share before any
move; a node that received pods since is compared on its own, so the choice is exact for nodes of
one size (for nodes of several sizes the order is the share without the pod: close, not exact).
Amounts in integer millionths, as in fit.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.core.model import Node
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.decision.exact import MICRO
from clusterman.decision.fit import Need
from clusterman.decision.fit import Room
from clusterman.decision.fit import describe
from clusterman.decision.fit import need_of

FIRST_FIT = "first_fit"
MOST_ALLOCATED = "most_allocated"
_DIMS = range(len(RESOURCE_NAMES))


@dataclass(frozen=True)
class Move:
    """One pod (its id) onto the receiver ``to`` (an index of ``Prediction.nodes``)."""

    pod: str
    need: Need
    to: int


@dataclass(frozen=True)
class Moves:
    """A node's pods, placed; ``lost``: places (slots) the receivers have less after them."""

    node: str
    moves: tuple[Move, ...]
    lost: int


class Prediction:
    """The ready nodes that may receive pods, with the room left on each as moves are predicted."""

    def __init__(self, receivers: Sequence[Node], rule: str, slot: Need | None) -> None:
        launch = sorted(range(len(receivers)), key=lambda i: (receivers[i].launched_at, i))
        if rule == MOST_ALLOCATED:
            share = [_share(receivers[i].vector, (0, 0, 0, 0)) for i in range(len(receivers))]
            rank = {i: r for r, i in enumerate(launch)}
            launch.sort(key=lambda i: (-share[i], rank[i]))
        self.nodes = [receivers[i] for i in launch]
        self.rule = rule
        self.slot = slot
        self.room = Room(self.nodes)
        self.taken: dict[int, list[int]] = {}  # receiver -> millionths placed on it so far, per resource

    def place(self, node: Node) -> Moves | str:
        """``node``'s pods on the others (it receives none of them); why not, when one fits nowhere
        (then nothing is kept)."""
        saved = self.room.leave_for_now(node.id)
        done: list[Move] = []
        before = {}
        for task in node.workload():
            r = task.requests
            need = need_of(max(r.cpus, 0.0), max(r.mem, 0.0), max(r.disk, 0.0), max(r.gpus, 0.0))
            j = self._choose(need)
            if j < 0:
                self._undo(done)
                self.room.come_back(node.id, saved)
                return f"its {describe(need)} pod {task.id} fits on no other node"
            if j not in before:
                before[j] = self.places(j)
            self._take(j, need)
            done.append(Move(task.id, need, j))
        self.room.come_back(node.id, saved)
        lost = sum(before[j] - self.places(j) for j in before)
        return Moves(node.id, tuple(done), lost)

    def drop(self, node_id: str) -> None:
        """The node receives nothing from now on (it leaves, or drains to be kept)."""
        self.room.leave_for_now(node_id)

    def received(self) -> set[str]:
        """The nodes that pods were moved onto."""
        return {self.nodes[j].id for j, taken in self.taken.items() if any(taken)}

    def undo(self, moves: Moves) -> None:
        self._undo(list(moves.moves))

    def places(self, j: int) -> int:
        """Whole slots in receiver ``j``'s free room now (0 without a slot)."""
        slot = self.slot
        if slot is None:
            return 0
        v, taken = self.nodes[j].vector, self.taken.get(j, (0, 0, 0, 0))
        counts = [
            max(round((v[d] - v[8 + d] - v[12 + d]) * MICRO) - taken[d], 0) // slot[d] for d in _DIMS if slot[d] > 0
        ]
        return min(counts) if counts else 0

    def _choose(self, need: Need) -> int:
        if not any(need):
            return 0 if self.nodes else -1  # asks for nothing: fits anywhere
        first = self.room.first(need)
        if self.rule != MOST_ALLOCATED or first < 0:
            return first
        # nodes that took pods since the order was made may now rank above the first with room
        best, best_score = first, self._score(first, need)
        for j in self.taken:
            if j != best and self.room.has_room(j, need):
                score = self._score(j, need)
                if score > best_score or (score == best_score and j < best):
                    best, best_score = j, score
        return best

    def _score(self, j: int, need: Need) -> float:
        taken = self.taken.get(j, (0, 0, 0, 0))
        return _share(self.nodes[j].vector, tuple(t + n for t, n in zip(taken, need, strict=True)))

    def _take(self, j: int, need: Need) -> None:
        if any(need):
            self.room.take(j, need)
        taken = self.taken.setdefault(j, [0, 0, 0, 0])
        for d in _DIMS:
            taken[d] += need[d]

    def _undo(self, moves: list[Move]) -> None:
        for m in reversed(moves):
            if any(m.need):
                self.room.give(m.to, m.need)
            taken = self.taken[m.to]
            for d in _DIMS:
                taken[d] -= m.need[d]
            if not any(taken):
                del self.taken[m.to]


def _share(vector: tuple[float, ...], extra: tuple[int, ...]) -> float:
    """The mean over CPUs and memory (those the node has) of the share requested, with ``extra``
    millionths more (Kubernetes' NodeResourcesFit score, as the simulated scheduler computes it)."""
    shares = []
    for d in (0, 1):
        have = vector[d]
        if have > 0:
            shares.append((vector[8 + d] + vector[12 + d] + extra[d] / MICRO) / have)
    return sum(shares) / len(shares) if shares else 0.0

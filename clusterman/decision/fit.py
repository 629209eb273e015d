"""Room on the nodes that stay: may a node leave without stranding its pods? (docs/scaling.md)

A scale-down that takes a node whose pods fit on no remaining node leaves them pending while the
pool still has free CPUs, split over nodes none of which has room. So, as Kubernetes'
cluster-autoscaler does, a node is removable only if every task on it can be placed on the nodes
that stay: first fit decreasing (largest request first, identical requests placed together) over
the free allocatable of the remaining nodes, in every resource, counting what earlier removals in
the same run already moved there. A node that is itself removed later in the run takes those
moved tasks along. When one node has room for all of a node's tasks together they go there whole
(one search instead of one per request: the usual case); work still on nodes tainted in earlier
runs is placed before any choice (node_choice.py).

Amounts are integer millionths (``exact.micro``): exact, and fast in these loops. The free room is
kept in a max-tree per resource over the receiving nodes (built when a request first asks for
that resource), so the first node with room for a request is found in a few dozen steps,
whatever the pool's size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Sequence

from clusterman.core.model import Node
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.decision.exact import MICRO

Need = tuple[int, int, int, int]  # cpus, mem, disk, gpus in millionths of their units
GONE = -1  # a removed node's room: fits nothing that asks for anything

_DIMS = range(len(RESOURCE_NAMES))
_UNITS = {"cpus": "-CPU", "mem": " MB mem", "disk": " MB disk", "gpus": "-GPU"}


def need_of(cpus: float, mem: float, disk: float, gpus: float) -> Need:
    return (round(cpus * MICRO), round(mem * MICRO), round(disk * MICRO), round(gpus * MICRO))


def describe(need: Need) -> str:
    """``4-CPU`` or ``4-CPU, 2000 MB mem``: the parts of a request that are not zero."""
    parts = [f"{need[d] / MICRO:g}{_UNITS[name]}" for d, name in enumerate(RESOURCE_NAMES) if need[d] > 0]
    return ", ".join(parts) or "empty"


def needs_of(node: Node) -> dict[Need, int] | str:
    """The node's tasks that must find a home (not daemons, not revocable), counted by request; a
    reason instead when one has a request that is not a finite number."""
    counts: dict[tuple[float, float, float, float], int] = {}
    for t in node.tasks:
        if t.daemon or t.revocable:  # Task.asks_for_capacity, inlined: every task a scale-down moves
            continue
        r = t.requests
        key = (r.cpus, r.mem, r.disk, r.gpus)
        counts[key] = counts.get(key, 0) + 1
    out: dict[Need, int] = {}
    for (cpus, mem, disk, gpus), count in counts.items():
        if not all(math.isfinite(v) for v in (cpus, mem, disk, gpus)):
            return f"a task asks for cpus={cpus}, mem={mem}, disk={disk}, gpus={gpus}: not finite numbers"
        need = need_of(max(0.0, cpus), max(0.0, mem), max(0.0, disk), max(0.0, gpus))
        out[need] = out.get(need, 0) + count
    return out


class Room:
    """The free allocatable of the receiving nodes, and what this run moved onto each."""

    def __init__(self, receivers: Sequence[Node], gone: Iterable[str] = ()) -> None:
        self.index = {n.id: i for i, n in enumerate(receivers)}
        size = 1
        while size < max(1, len(receivers)):
            size *= 2
        self.size = size
        self.vectors = [n.vector for n in receivers]  # allocatable, reserved, allocated (reserved, not), revocable
        # one max-tree per resource, built when a request first asks for that resource (most pods
        # ask for no disk and no GPUs); [] until then
        self.trees: list[list[int]] = [[] for _ in _DIMS]
        self.gone: set[int] = set()
        # the first receiver found for a request: room only shrinks while nothing is undone, so no
        # receiver before it can hold that request later in the run (Room forgets this on an undo)
        self.hint: dict[Need, int] = {}
        self.moved: dict[int, dict[Need, int]] = {}  # placed request by request
        self.wholes: dict[int, list[Node]] = {}  # nodes whose tasks were placed together
        for node_id in gone:
            self.remove(node_id)

    def remove(self, node_id: str) -> None:
        """The node leaves without anything to move (empty, or its tasks were placed already)."""
        i = self.index.get(node_id)
        if i is not None:
            self._leave(i)

    def first(self, need: Need) -> int:
        """The first receiver with room for ``need`` in every resource it asks for, or -1."""
        return self._first(need)

    def take(self, j: int, need: Need) -> None:
        """``need`` placed on receiver ``j``."""
        self._add(j, need, -1)

    def give(self, j: int, need: Need) -> None:
        """Undo a ``take`` (room grows: no remembered first receiver holds any more)."""
        self._add(j, need, 1)
        self.hint.clear()

    def has_room(self, j: int, need: Need) -> bool:
        """Does receiver ``j`` have room for ``need`` now (in every resource it asks for)?"""
        k = self.size + j
        return all(self._tree(d)[k] >= need[d] for d in _DIMS if need[d] > 0)

    def leave_for_now(self, node_id: str) -> tuple[int | None, ...] | None:
        """The node receives nothing until ``come_back``; what it had (None: not a receiver)."""
        i = self.index.get(node_id)
        if i is None:
            return None
        saved = self._leaf(i)
        self._leave(i)
        return saved

    def come_back(self, node_id: str, saved: tuple[int | None, ...] | None) -> None:
        if saved is not None:
            self._restore(self.index[node_id], saved)

    def try_move(self, node: Node) -> str:
        """Remove ``node``, placing its tasks (and what this run moved onto it) on the others; ""
        when they all fit, else why not (and nothing changes)."""
        i = self.index.get(node.id)
        carried = self._carried(i) if i is not None else {}
        if not carried and not node.usage.tasks:
            self.remove(node.id)
            return ""
        if not carried and self._move_whole(node, i):
            return ""
        needs = needs_of(node)
        if isinstance(needs, str):
            return needs
        for need, count in carried.items():
            needs[need] = needs.get(need, 0) + count
        return self._move_each(needs, i)

    def _carried(self, i: int) -> dict[Need, int]:
        """What earlier removals in this run placed on receiver ``i``, request by request."""
        out = dict(self.moved.get(i, {}))
        for whole in self.wholes.get(i, ()):
            needs = needs_of(whole)
            assert not isinstance(needs, str)  # it was moved whole: its requests are finite
            for need, count in needs.items():
                out[need] = out.get(need, 0) + count
        return out

    def _move_whole(self, node: Node, i: int | None) -> bool:
        """All of the node's tasks onto the first node with room for them together (one search
        instead of one per request: the usual case, a node a few pods busy)."""
        v = node.vector
        try:
            need = (
                max(0, round((v[8] + v[12]) * MICRO)),
                max(0, round((v[9] + v[13]) * MICRO)),
                max(0, round((v[10] + v[14]) * MICRO)),
                max(0, round((v[11] + v[15]) * MICRO)),
            )
        except (ValueError, OverflowError):  # a request that is not a finite number: task by task says which
            return False
        if not any(need):
            self.remove(node.id)
            return True
        saved = self._leaf(i) if i is not None else ()
        if i is not None:
            self._leave(i)
        j = self._first(need)
        if j < 0:
            if i is not None:
                self._restore(i, saved)
            return False
        self._add(j, need, -1)
        self.wholes.setdefault(j, []).append(node)
        return True

    def _move_each(self, needs: dict[Need, int], i: int | None) -> str:
        """First fit decreasing, request by request; undone when one does not fit."""
        saved: tuple[int | None, ...] = ()
        if i is not None:
            saved = self._leaf(i)
            self._leave(i)
        journal: list[tuple[int, Need, int]] = []
        for need in sorted(needs, reverse=True):
            count = needs[need]
            if not any(need):
                continue  # asks for nothing: fits anywhere
            while count:
                j = self._first(need)
                if j < 0:
                    for k, placed, n in reversed(journal):
                        self._add(k, placed, n)
                    if i is not None:
                        self._restore(i, saved)
                    self.hint.clear()
                    return f"its {describe(need)} pod fits on no remaining node"
                k = self.size + j
                take = min(count, *(self.trees[d][k] // need[d] for d in _DIMS if need[d] > 0))
                self._add(j, need, -take)
                journal.append((j, need, take))
                count -= take
        if i is not None:
            self.moved.pop(i, None)
            self.wholes.pop(i, None)
        for j, need, n in journal:
            on = self.moved.setdefault(j, {})
            on[need] = on.get(need, 0) + n
        return ""

    def _tree(self, d: int) -> list[int]:
        tree = self.trees[d]
        if not tree:
            size, gone = self.size, self.gone
            tree = [GONE] * size
            tree += [GONE if i in gone else self._free(i, d) for i in range(len(self.vectors))]
            tree += [GONE] * (size - len(self.vectors))
            for k in range(size - 1, 0, -1):
                left, right = tree[2 * k], tree[2 * k + 1]
                tree[k] = left if left > right else right
            self.trees[d] = tree
        return tree

    def _free(self, i: int, d: int) -> int:
        v = self.vectors[i]
        return round((v[d] - v[8 + d] - v[12 + d]) * MICRO)

    def _leaf(self, i: int) -> tuple[int | None, ...]:
        k = self.size + i
        return tuple(tree[k] if tree else None for tree in self.trees)

    def _leave(self, i: int) -> None:
        self.gone.add(i)
        k = self.size + i
        for tree in self.trees:
            if tree:
                self._update(tree, k, GONE)

    def _restore(self, i: int, saved: tuple[int | None, ...]) -> None:
        """Undo ``_leave``: a resource whose tree was built since has seen no move onto node ``i``."""
        self.gone.discard(i)
        k = self.size + i
        for d, tree in enumerate(self.trees):
            if tree:
                value = saved[d]
                self._update(tree, k, self._free(i, d) if value is None else value)
        self.hint.clear()

    def _add(self, i: int, need: Need, times: int) -> None:
        k = self.size + i
        for d in _DIMS:
            if need[d]:
                tree = self.trees[d]
                self._update(tree, k, tree[k] + need[d] * times)

    @staticmethod
    def _update(tree: list[int], k: int, value: int) -> None:
        """Set leaf ``k`` and the maxima above it, as far up as they change."""
        tree[k] = value
        while k > 1:
            left, right = tree[k & ~1], tree[k | 1]
            top = left if left > right else right
            k >>= 1
            if tree[k] == top:
                return
            tree[k] = top

    def _first(self, need: Need) -> int:
        """The first receiving node with room for ``need`` in every resource, or -1: down the
        left-most branch whose maxima allow it, back up to the next one when a branch does not."""
        checks = [(self._tree(d), need[d]) for d in _DIMS if need[d] > 0]
        size = self.size
        j = self.hint.get(need)
        if j is not None:
            for tree, amount in checks:
                if tree[size + j] < amount:
                    break
            else:
                return j
        j = self._search(checks)
        if j >= 0:
            self.hint[need] = j
        return j

    def _search(self, checks: list[tuple[list[int], int]]) -> int:
        size = self.size
        later: list[int] = []
        k = 1
        while True:
            for tree, amount in checks:
                if tree[k] < amount:
                    break
            else:
                if k >= size:
                    return k - size
                later.append(2 * k + 1)
                k *= 2
                continue
            if not later:
                return -1
            k = later.pop()

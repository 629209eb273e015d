"""Slack-aware accounting of a node or a pool (Mesos' allocation-slack rules; docs/accounting.md).

Five figures, per resource:
  capacity              non-revocable allocatable
  reserved              set aside for roles, used or not (part of capacity)
  allocated_reserved    guaranteed work running on those reservations
  allocated_unreserved  guaranteed work running on the rest
  revocable_in_use      revocable work (lent capacity); never demand
Derived:
  slack      = reserved − allocated_reserved (never below 0): reserved but idle. It may be lent as
               revocable capacity, but it is not free room for guaranteed work.
  committed  = allocated_unreserved + max(reserved, allocated_reserved): what the pool owes,
               reservations counted whether used or not. The pool never shrinks below it.
  headroom   = capacity − committed (never below 0): room for new guaranteed work.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass

from clusterman.core.fold import CHUNK
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import Resources


@dataclass(frozen=True, slots=True)
class Accounting:
    capacity: Resources = Resources()
    reserved: Resources = Resources()
    allocated_reserved: Resources = Resources()
    allocated_unreserved: Resources = Resources()
    revocable_in_use: Resources = Resources()

    @property
    def allocated(self) -> Resources:
        """Guaranteed (non-revocable) work, from reservations or not."""
        return self.allocated_reserved + self.allocated_unreserved

    @property
    def slack(self) -> Resources:
        return (self.reserved - self.allocated_reserved).clip_negative()

    @property
    def committed(self) -> Resources:
        return self.allocated_unreserved + self.reserved.maximum(self.allocated_reserved)

    @property
    def headroom(self) -> Resources:
        return (self.capacity - self.committed).clip_negative()

    def __add__(self, other: Accounting) -> Accounting:
        return Accounting(
            self.capacity + other.capacity,
            self.reserved + other.reserved,
            self.allocated_reserved + other.allocated_reserved,
            self.allocated_unreserved + other.allocated_unreserved,
            self.revocable_in_use + other.revocable_in_use,
        )


def account_node(node: Node) -> Accounting:
    usage = node.usage  # daemons are already outside the node's allocatable
    return Accounting(
        node.allocatable, node.reserved, usage.allocated_reserved, usage.allocated_unreserved, usage.revocable
    )


def account_nodes(nodes: Iterable[Node]) -> Accounting:
    """Summed over each node's precomputed vector, chunk by chunk, then the chunks: the order of
    additions ``account_snapshot`` makes, so both give the same floats."""
    nodes = nodes if isinstance(nodes, tuple) else tuple(nodes)
    vectors = [n.vector for n in nodes]
    chunks = [tuple(map(sum, zip(*vectors[i : i + CHUNK], strict=True))) for i in range(0, len(vectors), CHUNK)]
    return _accounting(chunks)


def account_snapshot(snapshot: PoolSnapshot) -> Accounting:
    """``account_nodes`` of the snapshot's nodes, from its one pass (``PoolSnapshot.figures``): this
    runs every autoscaler run and simulator step."""
    return _accounting([chunk.sums for chunk in snapshot.figures])


def _accounting(chunks: Sequence[tuple[float, ...]]) -> Accounting:
    if not chunks:
        return Accounting()
    sums = [sum(column) for column in zip(*chunks, strict=True)]
    return Accounting(*(Resources(*sums[i : i + 4]) for i in range(0, 20, 4)))


def account_ready(snapshot: PoolSnapshot) -> Accounting:
    """The figures over ready nodes only: the node set utilisation is computed on."""
    return account_nodes(snapshot.nodes_in(NodeState.READY))


def pending_demand(snapshot: PoolSnapshot) -> Resources:
    """What unscheduled guaranteed work asks for (revocable work never scales the pool up)."""
    return Resources.total(t.requests for t in snapshot.pending if not t.revocable and not t.daemon)

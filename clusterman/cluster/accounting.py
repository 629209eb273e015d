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
from dataclasses import dataclass

from clusterman.cluster.model import Node
from clusterman.cluster.model import NodeState
from clusterman.cluster.model import PoolSnapshot
from clusterman.resources import Resources


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
    from_reservations: list[Resources] = []
    unreserved: list[Resources] = []
    revocable: list[Resources] = []
    for task in node.tasks:
        if task.daemon:
            continue  # part of the node's overhead, already outside its allocatable
        if task.revocable:
            revocable.append(task.requests)
        elif task.from_reservation:
            from_reservations.append(task.requests)
        else:
            unreserved.append(task.requests)
    return Accounting(
        capacity=node.allocatable,
        reserved=node.reserved,
        allocated_reserved=Resources.total(from_reservations),
        allocated_unreserved=Resources.total(unreserved),
        revocable_in_use=Resources.total(revocable),
    )


def account_nodes(nodes: Iterable[Node]) -> Accounting:
    total = Accounting()
    for node in nodes:
        total = total + account_node(node)
    return total


def account_ready(snapshot: PoolSnapshot) -> Accounting:
    """The figures over ready nodes only: the node set utilisation is computed on."""
    return account_nodes(snapshot.nodes_in(NodeState.READY))


def pending_demand(snapshot: PoolSnapshot) -> Resources:
    """What unscheduled guaranteed work asks for (revocable work never scales the pool up)."""
    return Resources.total(t.requests for t in snapshot.pending if not t.revocable and not t.daemon)

"""The pool snapshot: what the scheduler and the cloud say about one pool at one moment.

Connectors (Kubernetes, Mesos, simulated) build it; the decision, the metrics collector, the
status command and the simulator read it. Everything here is a frozen value: no I/O, no clock.
A node joins the cloud's view (instance id, group, weight, launch time) and the scheduler's view
(state, allocatable resources, tasks) in one record. Times are Unix seconds (float).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property
from operator import attrgetter

from clusterman.core.fold import NodeFold
from clusterman.core.resources import Resources

NO_TIME = -1.0  # "never happened" for a timestamp field (a node that was never tainted)


class NodeState(enum.Enum):
    READY = "ready"  # joined and schedulable: counts as capacity
    TAINTED = "tainted"  # marked for removal by the autoscaler (may be untainted again)
    CORDONED = "cordoned"  # excluded by an operator: neither capacity nor a removal candidate
    ORPHAN = "orphan"  # in the cloud but not (yet) joined to the scheduler
    # in the scheduler, but not usable or not ours: not in any of the pool's resource groups, or not
    # healthy (a Kubernetes node that is not Ready, a Mesos agent the master lost); see docs/cluster.md
    UNKNOWN = "unknown"

    # Members are singletons compared by identity, so identity hashing is consistent, and in C:
    # Enum's own __hash__ is Python code, paid each time a state keys a dict (per node, per run).
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Task:
    """A pod or a Mesos task, with what it asked for (its *effective* request)."""

    id: str
    requests: Resources
    # Mesos: allocated from a reservation of the task's role, rather than from the unreserved pool
    from_reservation: bool = False
    # Mesos revocable resources (or best-effort work): never demand that scales the pool up
    revocable: bool = False
    # DaemonSet and mirror pods run on every node; they are part of the node, not demand
    daemon: bool = False
    # a pod annotated safe-to-evict=false pins its node: never chosen for removal
    safe_to_evict: bool = True
    batch: bool = False  # Clusterman prefers removing nodes with fewer batch tasks
    app: str = ""


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's tasks summed by kind, once, when the node is built: snapshots are read many times
    (decision, collector, simulator steps) and a simulated node is reused across thousands of steps."""

    allocated_reserved: Resources = Resources()
    allocated_unreserved: Resources = Resources()
    revocable: Resources = Resources()
    tasks: int = 0  # daemons excluded
    batch_tasks: int = 0
    pinned: bool = False  # some task must not be evicted

    @staticmethod
    def of(tasks: tuple[Task, ...]) -> NodeUsage:
        if not tasks:
            return EMPTY_USAGE
        reserved, unreserved, revocable = [], [], []
        count = batch = 0
        pinned = False
        for t in tasks:
            if t.daemon:
                continue
            count += 1
            batch += t.batch
            pinned = pinned or not t.safe_to_evict
            if t.revocable:
                revocable.append(t.requests)
            elif t.from_reservation:
                reserved.append(t.requests)
            else:
                unreserved.append(t.requests)
        return NodeUsage(
            Resources.total(reserved), Resources.total(unreserved), Resources.total(revocable), count, batch, pinned
        )


EMPTY_USAGE = NodeUsage()


@dataclass(frozen=True, slots=True)
class Node:
    id: str  # the scheduler's name for it (or the instance id for an orphan)
    state: NodeState
    allocatable: Resources  # non-revocable capacity the scheduler may hand out
    group_id: str = ""  # "" when the node belongs to none of the pool's resource groups
    instance_id: str = ""
    weight: float = 1.0  # capacity units this node counts for in its resource group
    launched_at: float = NO_TIME
    tainted_at: float = NO_TIME
    reserved: Resources = Resources()  # reserved for roles (Mesos); part of allocatable
    tasks: tuple[Task, ...] = ()
    instance_type: str = ""
    market: str = ""  # availability zone; Clusterman's market key is "<instance_type, market>"
    ip: str = ""  # private address: how Mesos agents are matched to cloud instances
    usage: NodeUsage = field(init=False, repr=False, compare=False)
    # allocatable, reserved, allocated_reserved, allocated_unreserved, revocable: 4 floats each, so
    # that pool sums are a transpose and a C-level sum (see cluster.accounting.account_nodes)
    vector: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        usage = NodeUsage.of(self.tasks)
        object.__setattr__(self, "usage", usage)
        object.__setattr__(
            self,
            "vector",
            (
                *self.allocatable,
                *self.reserved,
                *usage.allocated_reserved,
                *usage.allocated_unreserved,
                *usage.revocable,
            ),
        )

    @property
    def is_ready(self) -> bool:
        return self.state is NodeState.READY

    @property
    def joined(self) -> bool:
        return self.state in (NodeState.READY, NodeState.TAINTED, NodeState.CORDONED)

    def workload(self) -> Iterable[Task]:
        """Tasks that are demand: not daemons, not revocable."""
        return (t for t in self.tasks if not t.daemon and not t.revocable)

    def task_count(self) -> int:
        return self.usage.tasks

    def batch_task_count(self) -> int:
        return self.usage.batch_tasks

    def pins_node(self) -> bool:
        return self.usage.pinned


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """An Auto Scaling group, a Spot Fleet request, or a simulated group, in capacity units."""

    id: str
    target_capacity: float
    fulfilled_capacity: float
    min_capacity: float = 0.0
    max_capacity: float = float("inf")
    stale: bool = False  # being replaced (e.g. a cancelled fleet): drain it to 0
    kind: str = "simulated"
    node_resources: Resources = Resources()  # allocatable of one weight unit, when known


def _count_states(chunk: tuple[Node, ...], _: object) -> tuple[tuple[NodeState, int], ...]:
    return tuple(Counter(map(attrgetter("state"), chunk)).items())


_STATE_COUNTS = NodeFold(_count_states)


@dataclass(frozen=True)
class PoolSnapshot:
    taken_at: float
    nodes: tuple[Node, ...] = ()
    groups: tuple[ResourceGroup, ...] = ()
    pending: tuple[Task, ...] = ()  # work the scheduler could not place (unscheduled pods)
    _index: dict[str, Node] = field(default_factory=dict, init=False, repr=False, compare=False)

    def node(self, node_id: str) -> Node:
        if not self._index:
            self._index.update((n.id, n) for n in self.nodes)
        return self._index[node_id]

    def nodes_in(self, *states: NodeState) -> list[Node]:
        return [n for n in self.nodes if n.state in states]

    @cached_property
    def counts_by_state(self) -> dict[NodeState, int]:
        counts = dict.fromkeys(NodeState, 0)
        for chunk_counts in _STATE_COUNTS.summaries(self.nodes):
            for state, count in chunk_counts:
                counts[state] += count
        return counts

    def group(self, group_id: str) -> ResourceGroup:
        for g in self.groups:
            if g.id == group_id:
                return g
        raise KeyError(group_id)

    @property
    def target_capacity(self) -> float:
        """Clusterman's T: the sum of the targets of the groups that are not stale."""
        return sum(g.target_capacity for g in self.groups if not g.stale)

    @property
    def fulfilled_capacity(self) -> float:
        return sum(g.fulfilled_capacity for g in self.groups)

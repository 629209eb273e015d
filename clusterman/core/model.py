"""The pool snapshot: what the scheduler and the cloud say about one pool at one moment.

Connectors (Kubernetes, Mesos, simulated) build it; the decision, the metrics collector, the
status command and the simulator read it. Everything here is a frozen value: no I/O, no clock.
A node joins the cloud's view (instance id, group, weight, launch time) and the scheduler's view
(state, allocatable resources, tasks) in one record. Times are Unix seconds (float).
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Hashable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property
from typing import Any

from clusterman.core.fold import NodeFold
from clusterman.core.resources import MICRO
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
    # Karpenter's karpenter.sh/do-not-disrupt=true: pins its node as safe-to-evict=false does
    do_not_disrupt: bool = False
    # a controller (ReplicaSet, Job, ...) makes a new pod when this one is evicted: consolidation
    # never evicts one without (a bare pod evicted is gone for good)
    controller: bool = True
    # emptyDir or hostPath volumes: what it wrote there is lost when it moves (consolidation moves
    # it only when ``evict_local_storage`` says so)
    local_storage: bool = False
    # Mesos: resources that are part of another task (a task's revocable share) or of no task (the
    # executors' overhead): never counted as a task of their own, so that a node's count is the
    # master's count of its active tasks, which termination reads again (``NodeLifecycle.running``)
    own_task: bool = True

    @property
    def asks_for_capacity(self) -> bool:
        """Demand that scales the pool: daemons belong to their node, revocable work waits for spare."""
        return not self.daemon and not self.revocable


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's tasks summed by kind, once, when the node is built: snapshots are read many times
    (decision, collector, simulator steps) and a simulated node is reused across thousands of steps."""

    allocated_reserved: Resources = Resources()
    allocated_unreserved: Resources = Resources()
    revocable: Resources = Resources()
    tasks: int = 0  # daemons excluded
    batch_tasks: int = 0
    pinned: bool = False  # some task must not be evicted (safe-to-evict=false, do-not-disrupt)
    bare: bool = False  # some task has no controller: consolidation leaves the node alone
    local_storage: bool = False  # some task keeps data on the node (emptyDir, hostPath)
    largest: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # per resource, of the demand tasks

    @staticmethod
    def of(tasks: tuple[Task, ...]) -> NodeUsage:
        """Sums in plain floats, in task order (the additions ``Resources.total`` makes): a run at
        10,000 nodes sums 300,000 tasks whenever their nodes change."""
        if not tasks:
            return EMPTY_USAGE
        rc = rm = rd = rg = uc = um = ud = ug = vc = vm = vd = vg = 0.0
        largest: list[float] | None = None
        count = batch = 0
        pinned = bare = local = False
        for t in tasks:
            if t.daemon:
                continue
            if t.own_task:
                count += 1
                batch += t.batch
            if not t.safe_to_evict or t.do_not_disrupt:
                pinned = True
            if not t.controller:
                bare = True
            if t.local_storage:
                local = True
            r = t.requests
            c, m, d, g = r.cpus, r.mem, r.disk, r.gpus
            if t.revocable:
                vc += c
                vm += m
                vd += d
                vg += g
                continue
            if t.from_reservation:
                rc += c
                rm += m
                rd += d
                rg += g
            else:
                uc += c
                um += m
                ud += d
                ug += g
            if largest is None:
                largest = [c, m, d, g]
            else:  # the first of equal values is kept, as max() keeps it
                if c > largest[0]:
                    largest[0] = c
                if m > largest[1]:
                    largest[1] = m
                if d > largest[2]:
                    largest[2] = d
                if g > largest[3]:
                    largest[3] = g
        return NodeUsage(
            Resources(rc, rm, rd, rg),
            Resources(uc, um, ud, ug),
            Resources(vc, vm, vd, vg),
            count,
            batch,
            pinned,
            bare,
            local,
            (largest[0], largest[1], largest[2], largest[3]) if largest else (0.0, 0.0, 0.0, 0.0),
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
    # what node migration conditions read (decision/migration_condition.py); "" when not reported
    kernel: str = ""  # Kubernetes status.nodeInfo.kernelVersion
    os_image: str = ""  # Kubernetes status.nodeInfo.osImage, e.g. "Ubuntu 22.04.3 LTS"
    # how its instance was launched, for drift against its group's (decision/drift.py); "" when not known
    template: str = ""  # the launch template and version, "lt-0abc:3"
    image_id: str = ""  # the machine image, "ami-0abc"
    usage: NodeUsage = field(init=False, repr=False, compare=False)
    # allocatable, reserved, allocated_reserved, allocated_unreserved, revocable: 4 floats each, so
    # that pool sums are a transpose and a C-level sum (see core.accounting.account_nodes)
    vector: tuple[float, ...] = field(init=False, repr=False, compare=False)
    # per resource, allocatable less what the tasks request, in integer millionths (at least 0): the
    # free room the slot reserve counts every run (decision/slots.py), worked out once per node
    free: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        usage = NodeUsage.of(self.tasks)
        object.__setattr__(self, "usage", usage)
        a, r, u = self.allocatable, self.reserved, usage
        ar, au, rv = u.allocated_reserved, u.allocated_unreserved, u.revocable
        v = (
            a.cpus, a.mem, a.disk, a.gpus,
            r.cpus, r.mem, r.disk, r.gpus,
            ar.cpus, ar.mem, ar.disk, ar.gpus,
            au.cpus, au.mem, au.disk, au.gpus,
            rv.cpus, rv.mem, rv.disk, rv.gpus,
        )  # fmt: skip
        object.__setattr__(self, "vector", v)
        free = (
            max(round((v[0] - v[8] - v[12]) * MICRO), 0),
            max(round((v[1] - v[9] - v[13]) * MICRO), 0),
            max(round((v[2] - v[10] - v[14]) * MICRO), 0),
            max(round((v[3] - v[11] - v[15]) * MICRO), 0),
        )  # per resource: allocatable less allocated_reserved and allocated_unreserved
        object.__setattr__(self, "free", free)

    def moved(self, **changes: Any) -> Node:
        """``dataclasses.replace`` for fields no sum depends on (not tasks, allocatable, reserved):
        the sums are kept rather than worked out again (the join changes 10,000 nodes a run)."""
        assert not changes.keys() & _SUMMED, changes.keys() & _SUMMED
        node = object.__new__(Node)
        for name in _NODE_SLOTS:
            object.__setattr__(node, name, changes[name] if name in changes else getattr(self, name))
        return node

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


_NODE_SLOTS = Node.__slots__
_SUMMED = frozenset(("tasks", "allocatable", "reserved", "usage", "vector", "free"))


@dataclass(frozen=True, slots=True)
class Offer:
    """One kind of instance a group launches: its type, the capacity units one counts for (a Spot
    Fleet's or a mixed instances policy's weight), and its hardware (all zero when not known)."""

    instance_type: str
    weight: float
    resources: Resources = Resources()


def unit_size(offers: Iterable[Offer]) -> Resources:
    """Resources of one capacity unit: each type's hardware over its weight, the smallest of each.
    Types of unknown size are left out; all zero when no type's size is known. This is hardware,
    an upper bound of what a scheduler offers."""
    sizes = [o.resources * (1.0 / o.weight) for o in offers if any(o.resources)]
    if not sizes:
        return Resources()
    return Resources(*(min(values) for values in zip(*sizes, strict=True)))


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
    offers: tuple[Offer, ...] = ()  # the instance types it launches, when known
    # what it launches now, for drift (cloud/launches.py): "lt-0abc:4", "ami-0abc"; "" when not read
    template: str = ""
    image_id: str = ""


_JOINED = frozenset((NodeState.READY, NodeState.TAINTED, NodeState.CORDONED))


@dataclass(frozen=True, slots=True)
class ChunkFigures:
    """One chunk of a snapshot's nodes, summed up in one pass for every reader of the snapshot
    (``PoolSnapshot.figures``): the counts and ids of ``NodeSets``, the members' weights, the nodes'
    vectors summed (``core/accounting.py``) and, of the nodes in the pool's groups, the sets the
    decision's pool view reads (``decision/pool_view.py``)."""

    states: tuple[tuple[NodeState, int], ...]
    tainted_ids: tuple[str, ...]
    joined_ids: frozenset[str]
    tasks: int  # daemons excluded
    markets: tuple[tuple[tuple[str, str], float], ...]  # group members' weight per (instance type, zone)
    joined_weight: float  # ... of those that joined the scheduler
    sums: tuple[float, ...]  # every node's ``vector``, summed
    # the nodes of the pool's groups (the rest are ignored), by state
    ready: tuple[Node, ...]
    tainted: tuple[Node, ...]
    orphans: tuple[Node, ...]
    cordoned: tuple[Node, ...]
    ignored: int
    bad_weight: Node | None  # the first node of the pool's groups whose weight is not a finite number > 0
    ready_weight: tuple[tuple[str, float], ...]  # per group
    allocatable: tuple[float, float, float, float]  # of the ready nodes
    reserving: tuple[Node, ...]  # ready nodes holding reservations: the only ones with slack
    largest: tuple[float, ...] | None  # per resource over ready and tainted nodes; None when there are none


def _figures(chunk: tuple[Node, ...], group_ids: Hashable) -> ChunkFigures:
    assert isinstance(group_ids, frozenset)
    ready_state, tainted_state, orphan_state = NodeState.READY, NodeState.TAINTED, NodeState.ORPHAN
    cordoned_state, unknown_state, joined_states, inf = NodeState.CORDONED, NodeState.UNKNOWN, _JOINED, math.inf
    counts: dict[NodeState, int] = {}
    tainted_ids: list[str] = []
    joined_ids: list[str] = []
    tasks = 0
    markets: dict[tuple[str, str], float] = {}
    joined_weight = 0.0
    sets: tuple[list[Node], ...] = ([], [], [], [], [])
    add_ready, add_tainted, add_orphan, add_cordoned, add_reserving = (x.append for x in sets)
    weights: dict[str, float] = {}
    ignored = 0
    bad: Node | None = None
    cpus = mem = disk = gpus = 0.0
    for node in chunk:
        state = node.state  # compared by identity
        counts[state] = counts.get(state, 0) + 1
        tasks += node.usage.tasks
        if state is tainted_state:
            tainted_ids.append(node.id)
        if state in joined_states:
            joined_ids.append(node.id)
        group_id, w = node.group_id, node.weight
        if group_id:
            key = (node.instance_type, node.market)
            markets[key] = markets.get(key, 0.0) + w
            if state is not orphan_state and state is not unknown_state:
                joined_weight += w
        if state is unknown_state or group_id not in group_ids:
            ignored += 1
            continue
        if not 0 < w < inf:
            if bad is None:
                bad = node
            continue
        if state is ready_state:
            add_ready(node)
            weights[group_id] = weights.get(group_id, 0.0) + w
            v = node.vector  # allocatable at 0-3, reserved at 4-7: a tuple reads faster than fields
            cpus, mem, disk, gpus = cpus + v[0], mem + v[1], disk + v[2], gpus + v[3]
            if v[4] or v[5] or v[6] or v[7]:
                add_reserving(node)
        elif state is tainted_state:
            add_tainted(node)
        elif state is orphan_state:
            add_orphan(node)
        elif state is cordoned_state:
            add_cordoned(node)
    return ChunkFigures(
        tuple(counts.items()),
        tuple(tainted_ids),
        frozenset(joined_ids),
        tasks,
        tuple(markets.items()),
        joined_weight,
        tuple(map(sum, zip(*[n.vector for n in chunk], strict=False))),  # vectors are all 20 long
        tuple(sets[0]),
        tuple(sets[1]),
        tuple(sets[2]),
        tuple(sets[3]),
        ignored,
        bad,
        tuple(weights.items()),
        (cpus, mem, disk, gpus),
        tuple(sets[4]),
        column_max([n.usage.largest for n in (*sets[0], *sets[1])]),
    )


_FIGURES = NodeFold(_figures)


def column_max(sizes: list[tuple[float, ...]]) -> tuple[float, ...] | None:
    """Per resource the largest finite value, at least 0; None for no sizes. When every value is
    finite (a finite sum of them all, checked in C, the common case) each column's plain max is it,
    taken over the sizes at once (``map(max, *sizes)``) without building the columns."""
    if not sizes:
        return None
    if math.isfinite(sum(itertools.chain.from_iterable(sizes))):
        tops = map(max, *sizes) if len(sizes) > 1 else sizes[0]
        return tuple([max(0.0, top) for top in tops])
    return tuple(max(0.0, _finite_max(column)) for column in zip(*sizes, strict=True))


def _finite_max(column: tuple[float, ...]) -> float:
    """The largest finite value, 0 for none; a finite sum means every value is finite (the common
    case, checked in C), then the plain max is the same value."""
    if math.isfinite(sum(column)):
        return max(column)
    return max(filter(math.isfinite, column), default=0.0)


@dataclass(frozen=True)
class NodeSets:
    """A snapshot's node counts and id sets, worked out once per snapshot (``PoolSnapshot.node_sets``).

    Readers (the cycle, the apply step, the collector, the metrics) take plain values from here; the
    chunked memo behind it (``fold.py``) stays in the core, so a run costs what changed since the
    last snapshot, not the whole pool, without any reader knowing.
    """

    counts_by_state: dict[NodeState, int]
    tainted_ids: tuple[str, ...]  # in node order
    task_count: int  # daemons excluded, as Node.task_count()
    _joined: tuple[frozenset[str], ...]  # joined (ready, tainted, cordoned) ids, per chunk

    @staticmethod
    def of(chunks: list[ChunkFigures]) -> NodeSets:
        counts = dict.fromkeys(NodeState, 0)
        for chunk in chunks:
            for state, count in chunk.states:
                counts[state] += count
        tainted = tuple(node_id for chunk in chunks for node_id in chunk.tainted_ids)
        return NodeSets(counts, tainted, sum(c.tasks for c in chunks), tuple(c.joined_ids for c in chunks))

    @property
    def joined_ids(self) -> frozenset[str]:
        return frozenset().union(*self._joined)

    def joined_since(self, before: NodeSets | frozenset[str]) -> frozenset[str]:
        """Ids joined now and not ``before`` (an earlier snapshot's sets, or remembered ids). Against an
        earlier snapshot only the chunks that changed are looked at: nothing changed costs a
        comparison per chunk, not a set of every node (the simulator asks each simulated minute)."""
        if isinstance(before, frozenset):
            return self.joined_ids - before
        parts, earlier = self._joined, before._joined
        if len(parts) == len(earlier) and all(a is b or a == b for a, b in zip(parts, earlier, strict=True)):
            return frozenset()
        changed = [p for i, p in enumerate(parts) if i >= len(earlier) or (p is not earlier[i] and p != earlier[i])]
        candidates = frozenset().union(*changed)
        return candidates - frozenset().union(*earlier) if candidates else candidates


@dataclass(frozen=True)
class PoolSnapshot:
    taken_at: float
    nodes: tuple[Node, ...] = ()
    groups: tuple[ResourceGroup, ...] = ()
    pending: tuple[Task, ...] = ()  # work the scheduler could not place (unscheduled pods)
    # why the scheduler's view may be too old to shrink the pool on ("" when it is not): a watch
    # cache that has not heard from its API server lately
    stale: str = ""
    _index: dict[str, Node] = field(default_factory=dict, init=False, repr=False, compare=False)

    def node(self, node_id: str) -> Node:
        if not self._index:
            self._index.update((n.id, n) for n in self.nodes)
        return self._index[node_id]

    def nodes_in(self, *states: NodeState) -> list[Node]:
        return [n for n in self.nodes if n.state in states]

    @cached_property
    def figures(self) -> list[ChunkFigures]:
        """One pass over the nodes, chunk by chunk, for every figure read from them (``ChunkFigures``):
        a chunk that did not change since a recent snapshot is not summed again (``fold.py``)."""
        return _FIGURES.summaries(self.nodes, frozenset(g.id for g in self.groups))

    @cached_property
    def node_sets(self) -> NodeSets:
        return NodeSets.of(self.figures)

    @property
    def counts_by_state(self) -> dict[NodeState, int]:
        return self.node_sets.counts_by_state

    @cached_property
    def member_weights(self) -> tuple[dict[tuple[str, str], float], float]:
        """Weight (capacity units) of the groups' members per (instance type, zone), and of those that
        joined the scheduler: the collector's fulfilled capacity figures."""
        by_market: dict[tuple[str, str], float] = {}
        joined = 0.0
        for chunk in self.figures:
            for key, weight in chunk.markets:
                by_market[key] = by_market.get(key, 0.0) + weight
            joined += chunk.joined_weight
        return by_market, joined

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

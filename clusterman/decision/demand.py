"""The pool's demand: the apps' requests summed, or, for ``internal: true`` pools, the pods themselves.

Which work counts (docs/scaling.md, "Which nodes count"): tasks on ready and tainted nodes and
pending tasks, because all of it must end up on ready capacity; never DaemonSet/mirror pods (part
of the node) nor revocable work (docs/accounting.md, rule 3); never tasks on cordoned or unknown
nodes, whose capacity is not counted either.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Mapping

from clusterman.core.fold import NodeFold
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import Task
from clusterman.core.resources import ResourceRequest
from clusterman.decision.pool_view import SnapshotError

INTERNAL_APP = "__default__"


def total_request(requests: Mapping[str, ResourceRequest]) -> ResourceRequest:
    """The pool's request: the apps' requests summed per resource (no opinion + x = x)."""
    return ResourceRequest.total(requests[app] for app in sorted(requests))


def demand_from_snapshot(snapshot: PoolSnapshot) -> ResourceRequest:
    """Running and pending pods' requests, as the request of an ``internal: true`` signal.

    Has an opinion on every resource (zero included): the scheduler knows all of its work.
    """
    cpus, mem, disk, gpus = _sum_requests(snapshot.pending)
    for c, m, d, g in _NODE_DEMAND.summaries(snapshot.nodes, frozenset(g.id for g in snapshot.groups)):
        cpus, mem, disk, gpus = cpus + c, mem + m, disk + d, gpus + g
    totals = {"cpus": cpus, "mem": mem, "disk": disk, "gpus": gpus}
    for name, value in totals.items():
        if not (math.isfinite(value) and value >= 0):
            raise SnapshotError(
                f"demand: the pods' {name} requests sum to {value!r} (a pod request is negative or NaN)"
            )
    return ResourceRequest(**totals)


def _chunk_demand(chunk: tuple[Node, ...], known_groups: Hashable) -> tuple[float, float, float, float]:
    """What the work on a chunk's ready and tainted nodes of known groups asks for: each node's
    guaranteed work (reserved and unreserved: daemons and revocable work never count), summed once
    when the node was built (``NodeUsage``)."""
    assert isinstance(known_groups, frozenset)
    ready, tainted = NodeState.READY, NodeState.TAINTED  # compared by identity, not hashed
    cpus = mem = disk = gpus = 0.0
    for node in chunk:
        state = node.state
        if (state is ready or state is tainted) and node.group_id in known_groups:
            usage = node.usage
            r, u = usage.allocated_reserved, usage.allocated_unreserved
            cpus, mem, disk, gpus = (
                cpus + r.cpus + u.cpus,
                mem + r.mem + u.mem,
                disk + r.disk + u.disk,
                gpus + r.gpus + u.gpus,
            )
    return cpus, mem, disk, gpus


_NODE_DEMAND = NodeFold(_chunk_demand)


def _sum_requests(tasks: Iterable[Task]) -> tuple[float, float, float, float]:
    cpus = mem = disk = gpus = 0.0
    for t in tasks:
        if t.daemon or t.revocable:  # Task.asks_for_capacity, inlined: every task of the pool, every run
            continue
        r = t.requests
        cpus += r.cpus
        mem += r.mem
        disk += r.disk
        gpus += r.gpus
    return cpus, mem, disk, gpus

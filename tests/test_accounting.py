"""The slack rules of docs/accounting.md, with its worked examples."""

from clusterman.core.accounting import account_node
from clusterman.core.accounting import account_nodes
from clusterman.core.accounting import account_ready
from clusterman.core.accounting import pending_demand
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import Task
from clusterman.core.resources import Resources


def cpus(n):
    return Resources(cpus=n)


def node(node_id="n1", state=NodeState.READY, capacity=40, reserved=0, tasks=()):
    return Node(node_id, state, cpus(capacity), reserved=cpus(reserved), tasks=tuple(tasks))


def test_docs_example_one_agent():
    """40 CPUs, 20 reserved for role A which runs 5 on them; 10 unreserved in use; 8 lent as revocable."""
    n = node(
        capacity=40,
        reserved=20,
        tasks=[
            Task("a1", cpus(5), from_reservation=True),
            Task("b1", cpus(10)),
            Task("r1", cpus(8), revocable=True),
            Task("ds", cpus(1), daemon=True),
        ],
    )
    acc = account_node(n)
    assert acc.allocated == cpus(15)
    assert acc.slack == cpus(15)  # 20 reserved − 5 used
    assert acc.committed == cpus(30)  # 10 unreserved + all 20 reserved
    assert acc.headroom == cpus(10)  # not 25: the idle reservation is not free room
    assert acc.revocable_in_use == cpus(8)  # reported, never demand


def test_overused_reservation_counts_what_runs():
    acc = account_node(node(reserved=4, tasks=[Task("a", cpus(6), from_reservation=True)]))
    assert acc.slack == cpus(0)
    assert acc.committed == cpus(6)


def test_pool_sums_and_ready_only():
    ready = node("r", tasks=[Task("t", cpus(4))])
    tainted = node("t", state=NodeState.TAINTED, tasks=[Task("u", cpus(4))])
    snap = PoolSnapshot(0, nodes=(ready, tainted), pending=(Task("p", cpus(3)), Task("q", cpus(9), revocable=True)))
    assert account_nodes(snap.nodes).allocated == cpus(8)
    assert account_ready(snap).allocated == cpus(4)
    assert account_ready(snap).capacity == cpus(40)
    assert pending_demand(snap) == cpus(3)
    assert snap.counts_by_state[NodeState.TAINTED] == 1

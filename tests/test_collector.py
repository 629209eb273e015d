"""The collector's points: Clusterman's names, types and keys, with the accounting's figures."""

import pytest

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.datastore.pool_metrics import collect
from clusterman.datastore.store import InMemoryStore

SYSTEM, METADATA = MetricType.SYSTEM_METRICS, MetricType.METADATA
K8S = PoolIdentity("kube-prod", "default", Scheduler.KUBERNETES)
MESOS = PoolIdentity("mesos-prod", "default", Scheduler.MESOS)


def cpus(n, mem=0.0):
    return Resources(cpus=n, mem=mem)


def snapshot(groups=True):
    nodes = (
        Node(
            "n1",
            NodeState.READY,
            cpus(40, 1000),
            group_id="g1",
            weight=2,
            reserved=cpus(20),
            instance_type="m5.xlarge",
            market="us-west-2a",
            tasks=(
                Task("a", cpus(5), from_reservation=True),
                Task("b", cpus(10, 100)),
                Task("r", cpus(8), revocable=True),
                Task("d", cpus(1), daemon=True),
            ),
        ),
        Node(
            "n2",
            NodeState.TAINTED,
            cpus(4),
            group_id="g1",
            instance_type="m5.xlarge",
            market="us-west-2b",
            tasks=(Task("c", cpus(2)),),
        ),
        Node("n3", NodeState.CORDONED, cpus(4), group_id="g2", instance_type="c5.large", market="us-west-2a"),
        Node("i-4", NodeState.ORPHAN, cpus(0), group_id="g2", instance_type="c5.large", market="us-west-2a"),
        Node("n5", NodeState.UNKNOWN, cpus(4)),
    )
    pending = (Task("p1", cpus(3, 300)), Task("p2", cpus(1)), Task("p3", cpus(9), revocable=True))
    grps = (
        (ResourceGroup("g1", 3, 3), ResourceGroup("g2", 2, 2), ResourceGroup("old", 5, 0, stale=True)) if groups else ()
    )
    return PoolSnapshot(1700000000.7, nodes, grps, pending)


def by_name(points):
    return {p.key.split("|")[0]: p for p in points}


def test_keys_types_and_values():
    points = by_name(collect(snapshot(), K8S))
    assert points["cpus_allocated"].key == "cpus_allocated|cluster=kube-prod,pool=default.kubernetes"
    assert all(p.timestamp == 1700000000 for p in points.values())
    expected = {
        # over every node the scheduler reports: 5 + 10 + 2 guaranteed (daemons and revocable apart)
        "cpus_allocated": (SYSTEM, 17.0),
        "mem_allocated": (SYSTEM, 100.0),
        "gpus_allocated": (SYSTEM, 0.0),
        "cpus_reserved": (SYSTEM, 20.0),
        "cpus_slack": (SYSTEM, 15.0),
        "cpus_revocable": (SYSTEM, 8.0),
        "cpus_pending": (SYSTEM, 4.0),  # revocable pending work is not demand
        "mem_pending": (SYSTEM, 300.0),
        "unschedulable_pods": (SYSTEM, 2.0),
        "cpus_total": (METADATA, 52.0),
        "mem_total": (METADATA, 1000.0),
        "ready_nodes": (METADATA, 1.0),
        "tainted_nodes": (METADATA, 1.0),
        "cordoned_nodes": (METADATA, 1.0),
        "orphan_nodes": (METADATA, 1.0),
        "unknown_nodes": (METADATA, 1.0),
        "target_capacity": (METADATA, 5.0),  # stale groups are not part of the target
        "fulfilled_capacity": (
            METADATA,
            {"<m5.xlarge, us-west-2a>": 2.0, "<m5.xlarge, us-west-2b>": 1.0, "<c5.large, us-west-2a>": 2.0},
        ),
        "non_orphan_fulfilled_capacity": (METADATA, 4.0),  # joined nodes of the groups
    }
    for name, (metric_type, value) in expected.items():
        assert (points[name].metric_type, points[name].value) == (metric_type, value), name


def test_every_resource_has_every_figure():
    names = set(by_name(collect(snapshot(), K8S)))
    for r in ("cpus", "mem", "disk", "gpus"):
        assert {f"{r}_{f}" for f in ("allocated", "total", "reserved", "slack", "revocable", "pending")} <= names


def test_mesos_reports_no_pending_work():
    names = set(by_name(collect(snapshot(), MESOS)))
    assert "cpus_allocated" in names
    assert not {n for n in names if n.endswith("_pending")} and "unschedulable_pods" not in names


def test_without_the_clouds_view_no_capacity_figures():
    names = set(by_name(collect(snapshot(groups=False), K8S)))
    assert not names & {"target_capacity", "fulfilled_capacity", "non_orphan_fulfilled_capacity"}


@pytest.mark.parametrize("identity", [K8S, MESOS])
def test_points_round_trip_through_a_store(identity):
    store = InMemoryStore()
    store.write(collect(snapshot(), identity))
    key = f"cpus_total|cluster={identity.cluster},pool=default.{identity.scheduler.value}"
    assert store.read(METADATA, key, 1700000000, 1700000000) == [(1700000000, 52.0)]

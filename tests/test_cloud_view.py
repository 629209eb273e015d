"""Joining the scheduler's nodes to the cloud's instances."""

from clusterman.cluster.cloud_view import CloudInstance
from clusterman.cluster.cloud_view import CloudView
from clusterman.cluster.cloud_view import join
from clusterman.cluster.model import NO_TIME
from clusterman.cluster.model import Node
from clusterman.cluster.model import NodeState
from clusterman.cluster.model import ResourceGroup
from clusterman.resources import Resources

CPU4 = Resources(cpus=4)
GROUP = ResourceGroup("g1", target_capacity=3, fulfilled_capacity=3)


def instance(instance_id, ip="", weight=1.0, launched_at=100.0):
    return CloudInstance(instance_id, "g1", weight, launched_at, "m5.xlarge", "us-west-2a", ip)


def test_match_by_instance_id_then_ip_and_orphans_and_unknowns():
    nodes = [
        Node("k8s-node-a", NodeState.READY, CPU4, instance_id="i-a", launched_at=150.0),
        Node("mesos-agent-b", NodeState.TAINTED, CPU4, ip="10.0.0.2", tainted_at=90.0),
        Node("stranger", NodeState.READY, CPU4, instance_id="i-zzz"),
    ]
    cloud = CloudView(
        (GROUP,), (instance("i-a", weight=2), instance("i-b", ip="10.0.0.2"), instance("i-c", launched_at=300.0))
    )
    a, b, stranger, c = join(nodes, cloud)
    assert (a.id, a.group_id, a.weight, a.launched_at, a.instance_type, a.market) == (
        "k8s-node-a",
        "g1",
        2.0,
        100.0,
        "m5.xlarge",
        "us-west-2a",
    )
    assert (b.id, b.instance_id, b.state, b.tainted_at) == ("mesos-agent-b", "i-b", NodeState.TAINTED, 90.0)
    assert (stranger.state, stranger.group_id) == (NodeState.UNKNOWN, "")
    assert (c.id, c.state, c.allocatable, c.launched_at, c.group_id) == (
        "i-c",
        NodeState.ORPHAN,
        Resources(),
        300.0,
        "g1",
    )


def test_one_instance_is_matched_once():
    nodes = [Node("n1", NodeState.READY, CPU4, ip="10.0.0.1"), Node("n2", NodeState.READY, CPU4, ip="10.0.0.1")]
    first, second = join(nodes, CloudView((GROUP,), (instance("i-a", ip="10.0.0.1"),)))
    assert first.instance_id == "i-a" and first.state is NodeState.READY
    assert second.state is NodeState.UNKNOWN


def test_unknown_launch_time_keeps_the_schedulers():
    (node,) = join(
        [Node("n1", NodeState.READY, CPU4, instance_id="i-a", launched_at=150.0)],
        CloudView((GROUP,), (instance("i-a", launched_at=NO_TIME),)),
    )
    assert node.launched_at == 150.0

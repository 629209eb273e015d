"""The Mesos connector against recorded master JSON served on loopback to the real ``requests``."""

import pytest

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.mesos import MesosConnector
from clusterman.cluster.mesos import MesosPool
from clusterman.core.accounting import account_node
from clusterman.core.accounting import account_nodes
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudView
from clusterman.core.model import NodeState
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources
from itests.recorded_api import load
from itests.recorded_api import recorded_api
from itests.recorded_api import silent_api

PREFIX = "a1b2c3d4-5e6f-4a5b-9c8d-7e6f5a4b0000-S"


@pytest.fixture
def master():
    with recorded_api() as server:
        server.serve("/master/slaves", load("mesos/slaves.json"))
        server.serve("/master/frameworks", load("mesos/frameworks.json"))
        yield server


def test_snapshot_from_recorded_master(master):
    connector = MesosConnector(MesosPool("default"), master.url)
    snap = connector.snapshot(1714560000.0)
    connector.close()
    assert {n.id: n.state for n in snap.nodes} == {
        PREFIX + "0": NodeState.READY,
        PREFIX + "1": NodeState.UNKNOWN,  # no pool attribute (so "default"), and inactive
        PREFIX + "3": NodeState.CORDONED,  # deactivated
    }
    s0 = snap.node(PREFIX + "0")
    assert s0.allocatable == Resources(40, 160000, 500000, 0)
    assert s0.reserved == Resources(20, 40000, 0, 0)
    assert s0.ip == "10.0.1.10" and s0.launched_at == 1714550000.25
    tasks = {t.id: t for t in s0.tasks}
    assert set(tasks) == {
        "web.3f2e1d0c-0a0b-11ef-9a8b-0242ac110002",
        "api.4a3b2c1d-0a0b-11ef-9a8b-0242ac110002",  # staging counts
        "ads-report.1",
        "spark-exec.7",
        PREFIX + "0/executors",
    }
    assert tasks["ads-report.1"].from_reservation and tasks["ads-report.1"].batch
    assert tasks["spark-exec.7"].revocable and tasks["spark-exec.7"].requests == Resources(cpus=8, mem=6000)
    assert tasks[PREFIX + "0/executors"].requests == Resources(cpus=0.25)
    # the numbers of docs/accounting.md's worked example, from the master's own JSON
    acc = account_node(s0)
    assert acc.allocated_reserved.cpus == 5 and acc.allocated_unreserved.cpus == 10.25
    assert acc.slack == Resources(cpus=15, mem=34000) and acc.revocable_in_use.cpus == 8
    assert acc.committed.cpus == 30.25 and acc.headroom.cpus == 9.75
    # allocated = what the master's used_resources says, as Clusterman reports it
    assert account_nodes(snap.nodes).allocated == Resources(15.25 + 2, 34000 + 4000, 2000, 0)
    assert snap.pending == ()
    assert [r.path for r in master.requests] == ["/master/slaves", "/master/frameworks", "/master/maintenance/schedule"]


def test_join_by_ip_with_the_clouds_view(master):
    class Fleet:
        def cloud_view(self, now):
            instances = (
                CloudInstance("i-0aaa", "sfr-1", 4.0, 1714549000.0, "c5.9xlarge", "us-west-2a", "10.0.1.10"),
                CloudInstance("i-0bbb", "sfr-1", 4.0, 1714559000.0, "c5.9xlarge", "us-west-2b", "10.0.1.99"),
            )
            return CloudView((ResourceGroup("sfr-1", 8, 8, kind="sfr"),), instances)

    snap = MesosConnector(MesosPool("default"), master.url, cloud=Fleet()).snapshot(1714560000.0)
    s0 = snap.node(PREFIX + "0")
    assert (s0.instance_id, s0.group_id, s0.weight, s0.launched_at) == ("i-0aaa", "sfr-1", 4.0, 1714549000.0)
    assert snap.node("i-0bbb").state is NodeState.ORPHAN
    assert snap.node(PREFIX + "3").state is NodeState.UNKNOWN  # not an instance of the pool's groups


def test_other_pools_by_attribute(master):
    snap = MesosConnector(MesosPool("gpu"), master.url).snapshot(0.0)
    assert [n.id for n in snap.nodes] == [PREFIX + "2"]
    assert [t.requests for t in snap.nodes[0].tasks] == [Resources(4, 16000, 0, 1)]


def test_master_errors_name_the_url(master):
    master.serve("/master/frameworks", {"message": "leader unknown"}, status=503)
    with pytest.raises(ConnectorError, match=rf"mesos master {master.url}/master/frameworks: 503 Service Unavailable"):
        MesosConnector(MesosPool("default"), master.url).snapshot(0.0)
    master.serve("/master/slaves", b"not json")
    with pytest.raises(ConnectorError, match="/master/slaves: the answer is not JSON"):
        MesosConnector(MesosPool("default"), master.url).snapshot(0.0)
    master.serve("/master/slaves", {"agents": []})
    with pytest.raises(ConnectorError, match="/master/slaves: the answer has no 'slaves' list"):
        MesosConnector(MesosPool("default"), master.url).snapshot(0.0)


def test_unreachable_master():
    with recorded_api() as gone:
        url = gone.url
    with pytest.raises(ConnectorError, match=f"mesos master {url}/master/slaves: cannot reach it"):
        MesosConnector(MesosPool("default"), url, timeout_seconds=2).snapshot(0.0)


def test_a_master_that_does_not_answer_costs_one_timeout():
    with silent_api() as silent:
        with pytest.raises(ConnectorError, match=f"mesos master {silent.url}/master/slaves: cannot reach it"):
            MesosConnector(MesosPool("default"), silent.url, timeout_seconds=0.5).snapshot(0.0)
        assert silent.connections == 1

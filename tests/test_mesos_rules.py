"""The Mesos connector's rules on plain master JSON. The HTTP path is in itests/test_mesos_connector.py."""

import pytest

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.mesos import MesosPool
from clusterman.cluster.mesos import agent_ip
from clusterman.cluster.mesos import build_view
from clusterman.cluster.mesos import master_url
from clusterman.cluster.mesos import split_resources
from clusterman.core.accounting import account_node
from clusterman.core.model import NodeState
from clusterman.core.resources import Resources


def test_split_revocable_from_regular_and_skip_ranges():
    regular, revocable = split_resources(
        {
            "cpus": 4,
            "mem": 100,
            "disk": 5,
            "gpus": 0,
            "ports": "[31000-32000]",
            "cpus_revocable": 2,
            "ephemeral_ports": "x",
        },
        "here",
    )
    assert regular == Resources(4, 100, 5, 0)
    assert revocable == Resources(cpus=2)


@pytest.mark.parametrize("bad", ["4", -1, True, None])
def test_bad_amount_names_the_field(bad):
    with pytest.raises(ConnectorError, match=r"agent S0: resources.cpus: expected a number"):
        split_resources({"cpus": bad}, "agent S0: resources")


@pytest.mark.parametrize(
    ("fqdn", "url"),
    [
        ("mesos.example.com", "http://mesos.example.com:5050"),
        ("mesos.example.com:5051", "http://mesos.example.com:5051"),
        ("https://mesos.example.com/", "https://mesos.example.com"),
    ],
)
def test_master_url(fqdn, url):
    assert master_url(fqdn) == url


def test_agent_ip():
    assert agent_ip("slave(1)@10.0.1.10:5051") == "10.0.1.10"
    assert agent_ip("") == ""


def agent(agent_id="S0", pool="default", used=None, reserved=None, **extra):
    attributes = {"pool": pool} if pool is not None else {}
    return {
        "id": agent_id,
        "pid": f"slave(1)@10.0.0.{len(agent_id)}:5051",
        "attributes": attributes,
        "resources": {"cpus": 40, "mem": 1000, "disk": 0, "gpus": 0},
        "used_resources": used or {"cpus": 0, "mem": 0, "disk": 0, "gpus": 0},
        "reserved_resources": reserved or {},
        "registered_time": 1714550000.5,
        "active": True,
        **extra,
    }


def framework(name, role, *tasks):
    return {"name": name, "role": role, "tasks": list(tasks)}


def task(task_id, agent_id="S0", state="TASK_RUNNING", role=None, **resources):
    t = {
        "id": task_id,
        "slave_id": agent_id,
        "state": state,
        "resources": {"cpus": 0, "mem": 0, "disk": 0, "gpus": 0, **resources},
    }
    if role:
        t["role"] = role
    return t


def test_pool_attribute_with_clusterman_default():
    view = build_view([agent("S0"), agent("S1", pool=None), agent("S2", pool="gpu")], [], MesosPool("default"))
    assert [n.id for n in view.nodes] == ["S0", "S1"]
    assert [n.id for n in build_view([agent("S2", pool="gpu")], [], MesosPool("gpu")).nodes] == ["S2"]


@pytest.mark.parametrize(
    ("extra", "state"),
    [
        ({}, NodeState.READY),
        ({"active": False}, NodeState.UNKNOWN),
        ({"deactivated": True}, NodeState.CORDONED),
        ({"drain_info": {"state": "DRAINING"}}, NodeState.CORDONED),
    ],
)
def test_agent_state(extra, state):
    assert build_view([agent(**extra)], [], MesosPool("default")).nodes[0].state is state


def test_docs_accounting_example_from_master_json():
    """docs/accounting.md: 40 CPUs, 20 reserved for role A running 5 on them, 10 unreserved, 8 revocable."""
    a = agent(
        reserved={"A": {"cpus": 20, "mem": 0}},
        used={"cpus": 15.5, "mem": 0, "cpus_revocable": 8},
    )
    frameworks = [
        framework("chronos", "A", task("a1", cpus=5, role="A")),
        framework("marathon", "*", task("m1", cpus=10), task("m2", state="TASK_FINISHED", cpus=10)),
        framework("spark", "batch", task("r1", cpus_revocable=8, role="batch")),
    ]
    (node,) = build_view([a], frameworks, MesosPool("default")).nodes
    by_id = {t.id: t for t in node.tasks}
    assert by_id["a1"].from_reservation and by_id["a1"].batch
    assert not by_id["m1"].from_reservation and not by_id["m1"].batch  # marathon: a service
    assert by_id["r1"].revocable and by_id["r1"].requests == Resources(cpus=8)
    assert by_id["S0/executors"].requests == Resources(cpus=0.5)  # used beyond the tasks: executors
    assert node.task_count() == 3  # a1, m1, r1: the master's active tasks (executors are none)
    assert "m2" not in by_id
    acc = account_node(node)
    assert acc.reserved == Resources(cpus=20)
    assert acc.allocated_reserved == Resources(cpus=5)
    assert acc.allocated_unreserved == Resources(cpus=10.5)
    assert acc.slack == Resources(cpus=15)
    assert acc.revocable_in_use == Resources(cpus=8)
    assert acc.allocated == Resources(cpus=15.5)  # what Mesos' used_resources (and Clusterman) report


def test_a_task_with_a_revocable_share_counts_once_as_the_master_counts_it():
    frameworks = [framework("spark", "*", task("s1", cpus=1, cpus_revocable=2))]
    (node,) = build_view([agent(used={"cpus": 1, "cpus_revocable": 2})], frameworks, MesosPool("default")).nodes
    assert sorted(t.id for t in node.tasks) == ["s1", "s1/revocable"]  # both shares are accounted
    assert node.task_count() == 1 and node.batch_task_count() == 1


def test_a_role_without_a_reservation_on_this_agent_is_unreserved():
    frameworks = [framework("chronos", "A", task("a1", cpus=5, role="A"))]
    (node,) = build_view([agent(used={"cpus": 5})], frameworks, MesosPool("default")).nodes
    assert not node.tasks[0].from_reservation


def test_the_frameworks_role_when_the_task_has_none():
    frameworks = [framework("chronos", "A", task("a1", cpus=5))]
    (node,) = build_view([agent(reserved={"A": {"cpus": 5}}, used={"cpus": 5})], frameworks, MesosPool("default")).nodes
    assert node.tasks[0].from_reservation


def test_a_task_mixing_revocable_and_regular_resources_is_split():
    frameworks = [framework("f", "*", task("t", cpus=1, cpus_revocable=2))]
    (node,) = build_view([agent(used={"cpus": 1, "cpus_revocable": 2})], frameworks, MesosPool("default")).nodes
    assert [(t.id, t.revocable, t.requests.cpus) for t in node.tasks] == [("t", False, 1.0), ("t/revocable", True, 2.0)]


def test_non_batch_prefixes_are_configurable():
    frameworks = [framework("paasta-x", "*", task("t", cpus=1))]
    pool = MesosPool("default", non_batch_framework_prefixes=("paasta",))
    assert not build_view([agent(used={"cpus": 1})], frameworks, pool).nodes[0].tasks[0].batch


def test_an_agent_without_an_id_is_an_error():
    with pytest.raises(ConnectorError, match="no id"):
        build_view([agent(agent_id="")], [], MesosPool("default"))

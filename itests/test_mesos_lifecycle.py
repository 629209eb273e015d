"""The Mesos node lifecycle (maintenance windows) against a stateful fake master on loopback, driven
by the real ``requests``; the fake validates schedules and machine transitions as the master does."""

import logging

import pytest

from clusterman.cluster.lifecycle import UNKNOWN_COUNT
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.mesos import OUR_WINDOW_SIGNATURE_NANOS
from clusterman.cluster.mesos_lifecycle import NANOS
from clusterman.cluster.mesos_lifecycle import MesosLifecycle
from itests.recorded_api import load
from itests.stateful_api import FakeMesosMaster
from itests.stateful_api import serving

S = "a1b2c3d4-5e6f-4a5b-9c8d-7e6f5a4b0000-S{}"
M0 = ("ip-10-0-1-10.us-west-2.compute.internal", "10.0.1.10")
M3 = ("ip-10-0-1-13.us-west-2.compute.internal", "10.0.1.13")
OPERATOR = {
    "machine_ids": [{"hostname": "ip-10-0-9-99.us-west-2.compute.internal", "ip": "10.0.9.99"}],
    "unavailability": {"start": {"nanoseconds": 1714000000 * NANOS}, "duration": {"nanoseconds": 3600 * NANOS}},
}
NOW = 1714650000.0


@pytest.fixture
def master():
    fake = FakeMesosMaster(load("mesos/slaves.json"), load("mesos/frameworks.json"))
    fake.windows.append(OPERATOR)  # an operator's own maintenance, which must survive every write
    fake.modes[("ip-10-0-9-99.us-west-2.compute.internal", "10.0.9.99")] = "DRAINING"
    with serving(fake) as server:
        yield server


@pytest.fixture
def lifecycle(master):
    life = MesosLifecycle(master.url)
    yield life
    life.close()


def machines(master):
    return {
        (m["hostname"], m["ip"]): mode for (h, ip), mode in master.modes.items() for m in [{"hostname": h, "ip": ip}]
    }


def posts(master, path=None):
    return [r for r in master.writes if path is None or r.path == path]


def test_taint_puts_the_machines_in_one_new_window_and_keeps_the_operators(master, lifecycle):
    results = lifecycle.taint([S.format(0), S.format(3), "S-unknown"], NOW)
    assert {n: r.outcome for n, r in results.items()} == {
        S.format(0): Outcome.CHANGED,
        S.format(3): Outcome.CHANGED,
        "S-unknown": Outcome.FAILED,
    }
    assert results["S-unknown"].detail == f"no agent S-unknown at {master.url}"
    assert master.windows == [
        OPERATOR,
        {
            "machine_ids": [
                dict(zip(("hostname", "ip"), M0, strict=True)),
                dict(zip(("hostname", "ip"), M3, strict=True)),
            ],
            "unavailability": {
                "start": {"nanoseconds": int(NOW) * NANOS},
                "duration": {"nanoseconds": 600 * NANOS + OUR_WINDOW_SIGNATURE_NANOS},
            },
        },
    ]
    assert machines(master)[M0] == machines(master)[M3] == "DRAINING"
    assert len(posts(master)) == 1  # one write for both

    again = lifecycle.taint([S.format(0)], NOW + 60)  # already in a window: its start stays
    assert again[S.format(0)].outcome is Outcome.UNCHANGED
    assert len(posts(master)) == 1


def test_drain_waits_for_the_frameworks_then_down_and_up_around_termination(master, lifecycle):
    lifecycle.taint([S.format(0)], NOW)
    waiting = lifecycle.drain(S.format(0), NOW + 120)
    assert (waiting.status, waiting.remaining) == (DrainStatus.NOT_NOW, 4)  # the finished task does not count
    assert waiting.detail == "4 active task(s) left; draining for 120 s"

    master.finish_tasks(S.format(0))
    assert (lifecycle.drain(S.format(0), NOW + 180).status, master.writes[-1].path) == (
        DrainStatus.DONE,
        "/master/maintenance/schedule",  # draining wrote nothing
    )

    down = lifecycle.before_terminate([S.format(0)], NOW + 200)
    assert down[S.format(0)].outcome is Outcome.CHANGED
    assert machines(master)[M0] == "DOWN"
    assert S.format(0) not in {a["id"] for a in master.agents}  # the master shut the agent down

    # another taint while a machine is DOWN: the posted schedule keeps it (the master requires it)
    assert lifecycle.taint([S.format(3)], NOW + 210)[S.format(3)].outcome is Outcome.CHANGED

    # the master forgot the agent; the machine is remembered, so it can come up and leave the schedule
    up = lifecycle.after_terminate([S.format(0)])
    assert up[S.format(0)].outcome is Outcome.CHANGED
    assert M0 not in machines(master)
    assert [r.path for r in posts(master)][-1] == "/master/machine/up"
    assert {(m["hostname"], m["ip"]) for w in master.windows for m in w["machine_ids"]} == {
        ("ip-10-0-9-99.us-west-2.compute.internal", "10.0.9.99"),
        M3,
    }


def test_drain_only_follows_a_maintenance_window(master, lifecycle):
    refused = lifecycle.drain(S.format(2), NOW)
    assert (refused.status, refused.detail) == (DrainStatus.FAILED, "not in a maintenance window: never drained")
    gone = lifecycle.drain("S-unknown", NOW)
    assert (gone.status, gone.remaining) == (DrainStatus.DONE, 0)
    assert master.writes == []


def frameworks_reads(master):
    return [r for r in master.requests if (r.method, r.path) == ("GET", "/master/frameworks")]


def test_running_reads_every_agents_tasks_at_once(master, lifecycle):
    """Right before termination: one read of the frameworks for all the agents asked."""
    master.add_task(S.format(3), "batch.0", 1.0, framework="chronos")  # launched on it after the snapshot
    counts = lifecycle.running([S.format(0), S.format(3), S.format(2), "S-unknown", S.format(0)])
    assert counts == {S.format(0): 4, S.format(3): 2, S.format(2): 1, "S-unknown": 0}  # not registered: none
    assert len(frameworks_reads(master)) == 1
    assert lifecycle.running([]) == {} and len(frameworks_reads(master)) == 1
    master.finish_tasks(S.format(0))
    assert lifecycle.running([S.format(0)]) == {S.format(0): 0}


def test_running_is_unknown_for_every_agent_when_the_frameworks_cannot_be_read(master, lifecycle, caplog):
    asked = [S.format(0), S.format(3)]
    master.refusing["/master/frameworks"] = 503  # no leader
    with caplog.at_level(logging.WARNING, logger="clusterman.cluster.mesos_lifecycle"):
        assert lifecycle.running(asked) == dict.fromkeys(asked, UNKNOWN_COUNT)
        del master.refusing["/master/frameworks"]
        master.frameworks = {"marathon": []}  # a surprise: not a list of frameworks
        assert lifecycle.running(asked) == dict.fromkeys(asked, UNKNOWN_COUNT)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # once per call, not once per agent
    assert warnings[0].startswith(f"cannot read the tasks on {S.format(0)}, {S.format(3)} before terminating: ")
    assert "503 Service Unavailable: No leader elected" in warnings[0]
    assert warnings[1].endswith("ValueError: /master/frameworks: the answer has no 'frameworks' list")
    lifecycle.taint([S.format(0)], NOW)  # the drain reads the same way: a surprise is no "done"
    drained = lifecycle.drain(S.format(0), NOW)
    assert (drained.status, drained.remaining) == (DrainStatus.FAILED, UNKNOWN_COUNT), drained


def test_untaint_leaves_the_schedule_or_brings_a_down_machine_up(master, lifecycle):
    lifecycle.taint([S.format(0), S.format(3)], NOW)
    lifecycle.before_terminate([S.format(3)], NOW)
    results = lifecycle.untaint([S.format(0), S.format(3), S.format(2)])
    assert {n: r.outcome for n, r in results.items()} == {
        S.format(0): Outcome.CHANGED,
        S.format(3): Outcome.CHANGED,
        S.format(2): Outcome.UNCHANGED,
    }
    assert results[S.format(3)].detail == "brought it up (machine/up) and out of the maintenance schedule"
    assert results[S.format(0)].detail == "took it out of the maintenance schedule"
    assert master.windows == [OPERATOR]
    assert list(machines(master).values()) == ["DRAINING"]  # the operator's machine only


def test_before_terminate_schedules_an_untainted_machine_first(master, lifecycle):
    """With draining disabled a node may be terminated without a window: the master only takes a
    scheduled machine down, so it is scheduled at once."""
    result = lifecycle.before_terminate([S.format(2)], NOW)
    assert result[S.format(2)].outcome is Outcome.CHANGED
    assert [r.path for r in posts(master)] == ["/master/maintenance/schedule", "/master/machine/down"]
    assert machines(master)[("ip-10-0-2-20.us-west-2.compute.internal", "10.0.2.20")] == "DOWN"
    assert lifecycle.before_terminate([S.format(2)], NOW)[S.format(2)].outcome is Outcome.UNCHANGED


def test_a_machine_the_master_refuses_does_not_hold_back_the_others(master, lifecycle):
    master.agents.append({"id": S.format(9), "hostname": "", "pid": "", "attributes": {}})  # no hostname, no ip
    results = lifecycle.taint([S.format(0), S.format(9), S.format(3)], NOW)
    assert {n: r.outcome for n, r in results.items()} == {
        S.format(0): Outcome.CHANGED,
        S.format(9): Outcome.FAILED,
        S.format(3): Outcome.CHANGED,
    }
    assert "400 Bad Request: Both 'hostname' and 'ip' for a machine are empty" in results[S.format(9)].detail
    assert machines(master)[M0] == machines(master)[M3] == "DRAINING"


def test_dry_run_writes_nothing(master):
    dry = MesosLifecycle(master.url, dry_run=True)
    tainted = dry.taint([S.format(0)], NOW)
    assert tainted[S.format(0)].detail.startswith("dry run: would have put it in a maintenance window")
    assert dry.before_terminate([S.format(0)], NOW)[S.format(0)].outcome is Outcome.CHANGED
    assert dry.untaint([S.format(0)])[S.format(0)].outcome is Outcome.UNCHANGED  # nothing was written
    assert dry.drain(S.format(0), NOW).status is DrainStatus.FAILED  # still not in a window
    dry.close()
    assert master.writes == []
    assert master.windows == [OPERATOR]


def test_an_unreachable_master_fails_each_node(tmp_path):
    from clusterman.local.moto_server import free_port

    nobody = MesosLifecycle(f"http://127.0.0.1:{free_port()}", timeout_seconds=2)
    results = nobody.taint([S.format(0), S.format(1)], NOW)
    assert [r.outcome for r in results.values()] == [Outcome.FAILED] * 2
    assert "cannot reach it" in nobody.drain(S.format(0), NOW).detail


def test_a_schedule_we_cannot_read_fails_the_nodes_and_raises_nothing(master, lifecycle):
    master.windows = ["not a window"]
    results = lifecycle.taint([S.format(0), S.format(3)], NOW)
    assert [r.outcome for r in results.values()] == [Outcome.FAILED] * 2
    assert results[S.format(0)].detail.startswith("AttributeError")
    drained = lifecycle.drain(S.format(0), NOW)
    assert drained.status is DrainStatus.FAILED and drained.detail.startswith("AttributeError")
    assert master.writes == []


def test_the_connector_reads_our_maintenance_window_as_a_taint(master, lifecycle):
    """The read side closes the loop: a machine we scheduled is a tainted node since its window start."""
    from clusterman.cluster.mesos import MesosConnector
    from clusterman.cluster.mesos import MesosPool
    from clusterman.core.model import NodeState

    master.agents[1]["hostname"], master.agents[1]["pid"] = (
        OPERATOR["machine_ids"][0]["hostname"],
        "slave(1)@10.0.9.99:5051",
    )
    master.agents[1]["active"] = True
    lifecycle.taint([S.format(0)], NOW)
    connector = MesosConnector(MesosPool("default"), master.url)
    nodes = {n.id: n for n in connector.scheduler_view(NOW + 5).nodes}
    assert nodes[S.format(0)].state is NodeState.TAINTED
    assert nodes[S.format(0)].tainted_at == NOW
    assert nodes[S.format(1)].state is NodeState.CORDONED  # the operator's window: not ours to remove
    lifecycle.untaint([S.format(0)])
    assert {n.id: n.state for n in connector.scheduler_view(NOW).nodes}[S.format(0)] is NodeState.READY
    connector.close()

"""A node chosen to leave on its count of tasks is read again right before termination: work that
came since the snapshot keeps it (``apply``), as does work that cannot be read."""

from __future__ import annotations

from fractions import Fraction

from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import GroupState
from clusterman.cloud.resource_group import TargetChange
from clusterman.cloud.resource_group import Termination
from clusterman.cluster.lifecycle import UNKNOWN_COUNT
from clusterman.cluster.lifecycle import DrainResult
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.core.model import Node
from clusterman.core.resources import Resources
from clusterman.decision.result import Action
from clusterman.decision.result import Decision
from clusterman.run.apply import apply
from clusterman.run.permit import Permit
from tests.scaling_builders import NOW
from tests.scaling_builders import TAINTED
from tests.scaling_builders import pods
from tests.scaling_builders import snapshot


class Group(CloudGroup):
    kind = "test"

    def __init__(self) -> None:
        super().__init__("g1")
        self.terminated: list[str] = []

    def read(self) -> GroupState:
        raise AssertionError("apply never reads a group: it acts on the run's snapshot")

    def set_target_capacity(self, new_target: float, dry_run: bool = False) -> TargetChange:
        return TargetChange(self.id, new_target, new_target, new_target, dry_run)

    def terminate_instances(self, instance_ids, dry_run=False) -> Termination:
        ids = tuple(instance_ids)
        if not dry_run:
            self.terminated.extend(ids)
        return Termination(self.id, dry_run, terminated=ids, lowered_by=len(ids))


class Counted(NodeLifecycle):
    """Each node's work as the scheduler says it now; the nodes asked before termination."""

    def __init__(self, running: dict[str, int], then=lambda: None) -> None:
        self.now_running = running
        self.asked: list[str] = []
        self.downed: list[str] = []
        self.drained: list[str] = []
        self.then = then

    def taint(self, node_ids, now):
        return self.unchanged(node_ids, "already tainted")

    def untaint(self, node_ids):
        return self.unchanged(node_ids, "not tainted")

    def drain(self, node_id, now, going_on=lambda: ""):
        self.drained.append(node_id)
        return DrainResult(node_id, DrainStatus.NOT_NOW, 1, 1)

    def running(self, node_ids):
        self.asked.extend(node_ids)
        self.then()
        return {n: self.now_running[n] for n in node_ids if n in self.now_running}

    def before_terminate(self, node_ids, now):
        self.downed.extend(node_ids)  # Mesos brings the machine down here: only nodes that go
        return super().before_terminate(node_ids, now)


def leaving(node_id: str, tasks: int) -> Node:
    return Node(node_id, TAINTED, Resources(cpus=2, mem=4000), group_id="g1", instance_id=f"i-{node_id}",
                tainted_at=NOW - 600, tasks=pods(tasks))  # fmt: skip


SNAPSHOT = snapshot([leaving("came", 0), leaving("same", 2), leaving("fewer", 3), leaving("hard", 4),
                     leaving("unread", 0), leaving("unasked", 0)])  # fmt: skip
TERMINATE = ("came", "same", "fewer", "hard", "unread", "unasked")
DECISION = Decision(
    Action.SCALE_DOWN, Fraction(6), Fraction(6), Fraction(0), {}, "six go", terminate=TERMINATE,
    terminate_with={"came": 0, "same": 2, "fewer": 3, "unread": 0, "unasked": 0},
)  # fmt: skip
NOW_RUNNING = {"came": 1, "same": 2, "fewer": 1, "unread": UNKNOWN_COUNT}


def test_work_that_came_since_the_snapshot_or_cannot_be_read_keeps_the_node():
    lifecycle, group = Counted(NOW_RUNNING), Group()
    report = apply(DECISION, SNAPSHOT, {"g1": group}, lifecycle, NOW, Permit(NOW))
    assert lifecycle.asked == ["came", "same", "fewer", "unread", "unasked"]  # "hard" goes whatever runs there
    # "unasked": this scheduler does not read it again, so the snapshot's count stands
    assert group.terminated == ["i-same", "i-fewer", "i-hard", "i-unasked"]
    assert lifecycle.downed == ["same", "fewer", "hard", "unasked"]
    errors = dict(report.errors)
    assert errors["came"] == "not terminated: 1 task(s) on it now, 0 when decided; the next run decides again"
    assert errors["unread"].startswith("not terminated: its work could not be read right before termination")
    assert set(errors) == {"came", "unread"}
    assert lifecycle.drained == ["came", "unread"]  # kept: their work is moved, for the next run


def test_without_draining_the_work_is_still_read_again():
    lifecycle, group = Counted(NOW_RUNNING), Group()
    apply(DECISION, SNAPSHOT, {"g1": group}, WithoutDraining(lifecycle), NOW, Permit(NOW))
    assert group.terminated == ["i-same", "i-fewer", "i-hard", "i-unasked"]


def test_a_run_whose_budget_ran_out_while_reading_the_work_terminates_nothing():
    clock = [0.0]
    lifecycle, group = Counted({}, then=lambda: clock.__setitem__(0, 10.0)), Group()
    permit = Permit(NOW, budget_seconds=5, clock=lambda: clock[0])
    report = apply(DECISION, SNAPSHOT, {"g1": group}, lifecycle, NOW, permit)
    assert lifecycle.asked and group.terminated == [] and lifecycle.downed == [] and lifecycle.drained == []
    assert report.stopped_before == "terminating" and not report.targets

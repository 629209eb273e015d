"""A pool's node migration, run by run, as a value (``decision/migration.py``): which nodes, in
which order, how fast, when it waits, and how it ends. Each test plays the runs' outcomes by hand:
the drain machinery's replacements joining, nodes terminated, drains given up."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from clusterman.core.config import NodeMigrationConfig
from clusterman.core.config_schema import parse
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision import AutoscalerState
from clusterman.decision import decide
from clusterman.decision import migration_request
from clusterman.decision.migration import MigrationInputs
from clusterman.decision.migration import MigrationRecord
from clusterman.decision.migration import Phase
from clusterman.decision.migration import Trigger
from clusterman.decision.migration import due_for_uptime
from clusterman.decision.migration import plan
from clusterman.decision.migration import settle
from clusterman.decision.migration_request import Status
from tests import scaling_builders as builders

NOW = 1_700_000_000.0
DAY = 86400.0
OLD, NEW = "5.10.0-1", "5.15.0-1034-aws"


def settings(**block: Any) -> NodeMigrationConfig:
    raw: dict[str, Any] = {"trigger": {"event": True}, "strategy": {"rate": 2, "bootstrap_wait": "3m"}}
    for key, value in block.items():
        if isinstance(value, dict):
            raw[key] = {**raw.get(key, {}), **value}
        else:
            raw[key] = value
    return parse(NodeMigrationConfig, raw, "test", "node_migration")


def node(i: int, kernel: str = OLD, age_days: float = 10.0, state: NodeState = NodeState.READY, **kw: Any) -> Node:
    return Node(
        f"n{i}", state, Resources(cpus=4), group_id="g1", instance_id=f"i-{i}", launched_at=NOW - age_days * DAY,
        kernel=kernel, market=kw.pop("market", "us-west-2a"), **kw,
    )  # fmt: skip


def pool(nodes: list[Node], target: float | None = None, now: float = NOW, pending: int = 0) -> PoolSnapshot:
    members = [n for n in nodes if n.state is not NodeState.UNKNOWN]
    fulfilled = float(len(members))
    group = ResourceGroup("g1", fulfilled if target is None else target, fulfilled, 0, 100, kind="asg")
    waiting = tuple(Task(f"p{i}", Resources(cpus=1)) for i in range(pending))
    return PoolSnapshot(now, tuple(nodes), (group,), waiting)


def resource(name: str = "m1", target: str = "5.15", status: str = "pending", created: float = NOW, **spec: Any):
    obj = migration_request.body(
        name, "c1", "web", migration_request.Condition.parse("kernel", "ge", target), (), "clusterman.com/pool"
    )
    obj["metadata"]["labels"]["clusterman.yelp.com/migration_status"] = status
    obj["metadata"]["creationTimestamp"] = created
    obj["spec"].update(spec)
    return migration_request.read(obj)


def inputs(*requests: Any, s: NodeMigrationConfig | None = None, **kw: Any) -> MigrationInputs:
    return MigrationInputs(s or settings(), tuple(requests), budget=kw.pop("budget", 10), **kw)


def joined(nodes: list[Node], count: int, start: int = 100) -> list[Node]:
    """The pool with ``count`` replacements joined (new kernel, launched now)."""
    return nodes + [node(start + i, NEW, age_days=0) for i in range(count)]


def test_an_event_replaces_ahead_then_drains_batch_by_batch_oldest_first_and_completes():
    nodes = [node(i, OLD, age_days=10 + i) for i in range(3)] + [node(3, NEW), node(4, NEW)]
    r = resource()
    first = plan(MigrationRecord(), pool(nodes), inputs(r), NOW)
    m = first.active
    assert m is not None and (m.trigger, m.phase, m.step, m.selected) == (Trigger.EVENT, Phase.REPLACING, 1, 3)
    assert first.replace == ("n2", "n1") and first.drain == ()  # the oldest first, replaced ahead
    assert tuple(map(str, first.happened)) == ("m1: started: kernel ge 5.15: 3 node(s) to replace",)
    (mark,) = first.marks
    assert (mark.name, mark.status, mark.fields["step"], mark.fields["nodesLeft"]) == (
        "m1", Status.INPROGRESS, "step 1: replacing 2 node(s)", 3,
    )  # fmt: skip
    assert first.line.startswith("migration m1: step 1: replacing 2 node(s), 0 done, 3 left, end in 2h")

    # the replacements are asked for (target 7) and join; bootstrap_wait must pass all the same
    later = plan(first.record, pool(joined(nodes, 2), target=7), inputs(r), NOW + 60)
    assert later.replace == ("n2", "n1") and "waiting for replacements: bootstrap_wait" in later.line
    short = plan(first.record, pool(nodes, target=7), inputs(r), NOW + 200)
    assert short.replace == ("n2", "n1") and "waiting for replacements: 5 of target 7 joined" in short.line
    ready = plan(first.record, pool(joined(nodes, 2), target=7), inputs(r), NOW + 200)
    assert ready.drain == ("n2", "n1") and ready.active.phase is Phase.DRAINING
    assert tuple(map(str, ready.happened)) == ("m1: step 1: replacements ready, draining 2 node(s)",)

    # the drain machinery terminates them: the next step replaces the last old node
    after = [n for n in joined(nodes, 2) if n.id not in ("n1", "n2")]
    record = settle(ready.record, ["n2", "n1"], {})
    assert record.active.done == 2 and record.active.batch == ()
    step2 = plan(record, pool(after), inputs(r), NOW + 360)
    assert step2.replace == ("n0",) and step2.active.step == 2
    step2 = plan(step2.record, pool([*after, node(102, NEW, age_days=0)], target=6), inputs(r), NOW + 600)
    assert step2.drain == ("n0",)
    done = plan(step2.record, pool([*(n for n in after if n.id != "n0"), node(102, NEW, 0)]), inputs(r), NOW + 700)
    assert done.active is None and done.record.ended == (("m1", "completed", ""),)  # gone, seen without a settle
    (mark,) = done.marks
    assert mark.status is Status.COMPLETED and mark.fields["nodesDone"] == 3 and mark.fields["nodesLeft"] == 0
    assert done.happened == ()  # completing is said by the mark; nothing runs the next time
    again = plan(done.record, pool(after), inputs(replace(r, status=Status.COMPLETED)), NOW + 800)
    assert again.active is None and again.marks == ()


def test_replacements_that_never_come_fail_the_migration_and_leave_the_batch_untouched():
    nodes = [node(i) for i in range(4)]
    r = resource()
    p = plan(MigrationRecord(), pool(nodes), inputs(r), NOW)
    for t in (300, 590):
        p = plan(p.record, pool(nodes, target=6), inputs(r), NOW + t)
        assert p.replace == ("n0", "n1") and p.drain == ()
    p = plan(p.record, pool(nodes, target=6), inputs(r), NOW + 601)
    assert p.active is None and p.replace == p.drain == ()  # never drained: the pool is as it was
    (mark,) = p.marks
    assert mark.status is Status.FAILED
    assert mark.fields["reason"] == (
        "replacements not ready within bootstrap_timeout 10m (4 of target 6 joined); "
        "the step's nodes are left as they were"
    )


def test_drains_given_up_are_requeued_last_and_fail_the_migration_past_allowed_failed_drains():
    nodes = [node(i, age_days=10 + i) for i in range(6)]
    r = resource()
    s = settings(strategy={"allowed_failed_drains": 1})
    p = plan(MigrationRecord(), pool(nodes), inputs(r, s=s), NOW)
    p = plan(p.record, pool(joined(nodes, 2), target=8), inputs(r, s=s), NOW + 200)
    assert p.drain == ("n5", "n4")
    record = settle(p.record, [], {"n5": "not drained within 1800s"})
    assert record.active.failed_drains == 1 and record.active.requeued == ("n5",) and record.active.batch == ("n4",)
    record = settle(record, ["n4"], {})
    left = [n for n in joined(nodes, 2) if n.id != "n4"]
    p = plan(record, pool(left), inputs(r, s=s), NOW + 2020)
    assert p.replace == ("n3", "n2") and p.active.requeued == ("n5",)  # the requeued node last
    p = plan(p.record, pool(joined(left, 2, start=200), target=9), inputs(r, s=s), NOW + 2300)
    record = settle(p.record, ["n3"], {"n2": "a disruption budget refused"})
    p = plan(record, pool([n for n in left if n.id != "n3"]), inputs(r, s=s), NOW + 4210)
    assert p.active is None and p.marks[0].status is Status.FAILED
    assert p.marks[0].fields["reason"] == "2 drains failed > allowed_failed_drains 1"


@pytest.mark.parametrize(
    ("label", "why"), [("stop", "stopped by migrate-stop"), (None, "its NodeMigration was deleted")]
)
def test_a_migration_stopped_or_deleted_mid_step_drains_no_more(label, why):
    nodes = [node(i) for i in range(4)]
    r = resource()
    p = plan(MigrationRecord(), pool(nodes), inputs(r), NOW)
    p = plan(p.record, pool(joined(nodes, 2), target=6), inputs(r), NOW + 200)
    assert p.drain
    now_r = () if label is None else (replace(r, status=Status(label)),)
    stopped = plan(p.record, pool(joined(nodes, 2), target=6), inputs(*now_r), NOW + 260)
    assert stopped.active is None and stopped.drain == stopped.replace == ()
    assert tuple(map(str, stopped.happened)) == (f"m1: stopped: {why}",)
    if label:
        (mark,) = stopped.marks
        assert mark.status is Status.SKIPPED and mark.fields["reason"] == why  # Clusterman's label for a stop


def test_a_second_migration_for_the_pool_waits_its_turn_with_the_reason():
    nodes = [node(i) for i in range(4)]
    first, second = resource("m1", created=NOW - 10), resource("m2", target="5.16", created=NOW - 5)
    p = plan(MigrationRecord(), pool(nodes), inputs(second, first), NOW)
    assert p.active.key == "m1"
    wait = next(m for m in p.marks if m.name == "m2")
    assert wait.status is Status.PENDING and wait.fields["reason"] == "waiting: m1 migrates the pool first"
    # said once: a resource that already shows it is not written again
    shown = replace(second, reported={"state": "pending", "reason": "waiting: m1 migrates the pool first"})
    p = plan(p.record, pool(nodes, target=6), inputs(shown, first), NOW + 30)
    assert [m.name for m in p.marks] == ["m1"]


def test_a_malformed_resource_fails_with_its_reason_and_nothing_else_changes():
    bad = migration_request.read(
        {"metadata": {"name": "bad", "labels": {}}, "spec": {"cluster": "c1", "pool": "web", "condition": {}}}
    )
    good = resource("m1")
    nodes = [node(i) for i in range(4)]
    p = plan(MigrationRecord(), pool(nodes), inputs(bad, good), NOW)
    marks = {m.name: m for m in p.marks}
    assert marks["bad"].status is Status.FAILED
    refused = "refused: spec.condition: missing trait, operator, target"
    assert marks["bad"].fields["reason"] == refused
    assert p.active.key == "m1" and p.replace == ("n0", "n1")
    again = plan(p.record, pool(nodes), inputs(bad, good), NOW + 30)
    # its label and status were not written: both are, with the reason, at the next run
    assert again.marks[0].name == "bad" and again.marks[0].fields == {"state": "failed", "reason": refused}
    written = replace(bad, status=Status.FAILED, reported=marks["bad"].fields)
    again = plan(p.record, pool(nodes), inputs(written, good), NOW + 30)
    assert "bad" not in {m.name for m in again.marks}  # ended, and said: not said again


def test_a_pool_that_takes_no_events_skips_them_and_stop_before_start_is_skipped():
    nodes = [node(i) for i in range(2)]
    s = settings(trigger={"event": False})
    p = plan(MigrationRecord(), pool(nodes), inputs(resource(), s=s), NOW)
    assert p.active is None and p.marks[0].status is Status.SKIPPED
    assert "node_migration.trigger.event is not true" in p.marks[0].fields["reason"]
    p = plan(MigrationRecord(), pool(nodes), inputs(resource(status="stop")), NOW)
    assert p.active is None and p.marks[0].fields["reason"] == "stopped before it started"


def test_label_selectors_narrow_the_nodes_and_an_unknown_selection_waits():
    nodes = [node(i) for i in range(4)]
    r = replace(resource(), selectors=(migration_request.label_selectors.parse("team=web"),))
    p = plan(MigrationRecord(), pool(nodes), inputs(r), NOW)
    assert p.replace == () and "waiting for the nodes its label selectors select" in p.line
    p = plan(p.record, pool(nodes), inputs(r, selected={"m1": frozenset({"n0", "n2"})}), NOW + 60)
    assert p.replace == ("n0", "n2")


def test_the_disruption_budget_limits_a_batch_and_a_full_budget_waits():
    nodes = [node(i) for i in range(5)] + [node(9, state=NodeState.TAINTED)]
    p = plan(MigrationRecord(), pool(nodes), inputs(resource(), budget=2), NOW)
    assert len(p.replace) == 1 and p.active.batch == p.replace  # one tainted already: room for one
    p = plan(MigrationRecord(), pool(nodes), inputs(resource(), budget=1), NOW)
    assert p.replace == () and "waiting for room in the disruption budget (1 of 1)" in p.line


def test_prescaling_asks_ahead_and_waits_for_the_pool_to_have_it():
    nodes = [node(i) for i in range(10)]
    s = settings(strategy={"prescaling": "20%"})
    p = plan(MigrationRecord(), pool(nodes), inputs(resource(), s=s), NOW)
    assert p.active.phase is Phase.PRESCALING and p.prescale == 2.0 and p.replace == ()
    p = plan(p.record, pool(nodes, target=12), inputs(resource(), s=s), NOW + 60)
    assert p.active.phase is Phase.PRESCALING and "waiting for the prescaled capacity: 10 of target 12" in p.line
    p2 = plan(p.record, pool(joined(nodes, 2), target=12), inputs(resource(), s=s), NOW + 120)
    assert p2.active.phase is Phase.REPLACING and p2.prescale == 2.0 and len(p2.replace) == 2
    p3 = plan(p.record, pool(nodes, target=12), inputs(resource(), s=s), NOW + 901)
    assert p3.active is None and "did not reach its prescaled capacity within 15m" in p3.marks[0].fields["reason"]


def test_max_uptime_starts_early_enough_for_every_node_to_be_reached_in_time():
    s = settings(trigger={"max_uptime": "30d"}, strategy={"rate": 2})
    step = 600 + 120  # bootstrap_timeout + health_check_interval
    # four nodes reaching 30 days within the same hour: two steps, so the first starts two steps ahead
    nodes = [node(i, age_days=30 - (2 * step + 1) / DAY) for i in range(4)] + [node(9, age_days=3)]
    assert due_for_uptime(nodes, s, 2, NOW) == []
    assert [n.id for n in due_for_uptime(nodes, s, 2, NOW + 2)] == ["n0", "n1", "n2", "n3"]
    p = plan(MigrationRecord(), pool(nodes), inputs(s=s), NOW + 2)
    assert p.active.trigger is Trigger.MAX_UPTIME and p.active.selected == 4 and len(p.replace) == 2
    # not healthy: put off, once per health_check_interval, at most max_uptime_worker_skips times
    s2 = settings(trigger={"max_uptime": "30d"}, max_uptime_worker_skips=2)
    record = MigrationRecord()
    for t in (2, 60, 125, 250):
        p = plan(record, pool(nodes, pending=3), inputs(s=s2), NOW + t)
        record = p.record
    assert p.active is not None and str(p.happened[-1]).startswith("max_uptime: started")
    assert record.skips == 0


def test_drift_replaces_the_drifted_nodes_and_yields_to_a_waiting_resource_between_steps():
    nodes = [node(i) for i in range(5)]
    s = settings(trigger={"drift": True}, strategy={"rate": 1})
    p = plan(MigrationRecord(), pool(nodes), inputs(s=s, drift=True, drifted=frozenset({"n1", "n3"})), NOW)
    assert p.active.trigger is Trigger.DRIFT and p.replace == ("n1",) and p.active.selected == 2
    p = plan(p.record, pool(joined(nodes, 1), target=6), inputs(s=s, drift=True, drifted=frozenset({"n1", "n3"})),
             NOW + 200)  # fmt: skip
    assert p.drain == ("n1",)
    gone = p.drain[0]
    rest = [n for n in joined(nodes, 1) if n.id != gone]
    # a NodeMigration arrives: the drift migration ends after its step, and the resource starts
    p = plan(p.record, pool(rest), inputs(resource(), s=s, drift=True, drifted=frozenset({"n1", "n3"})), NOW + 300)
    assert p.active.trigger is Trigger.EVENT and p.active.key == "m1"


def test_too_long_fails_and_the_record_survives_a_restart():
    nodes = [node(i) for i in range(4)]
    p = plan(MigrationRecord(), pool(nodes), inputs(resource()), NOW)
    kept = MigrationRecord.from_json(p.record.as_json())
    assert kept == p.record
    late = plan(kept, pool(nodes, target=6), inputs(resource()), NOW + 5 * 7200 + 1)
    assert late.active is None and late.marks[0].fields["reason"] == "not done within 5 × expected_duration (10h)"
    with pytest.raises(ValueError, match=r"migration\.batch: expected a list of node ids"):
        MigrationRecord.from_json({"active": {**p.record.active.as_json(), "batch": "n1"}})
    with pytest.raises(ValueError, match="ended: expected a list"):
        MigrationRecord.from_json({"ended": [["m1", "done"]]})
    assert MigrationRecord.from_json({"ended": [["m1", "failed"]]}).ended == (("m1", "failed", ""),)  # before reasons


def test_nodes_whose_trait_is_not_reported_are_left_and_said():
    nodes = [node(0, kernel=""), node(1, NEW), node(2, kernel="", state=NodeState.CORDONED)]
    p = plan(MigrationRecord(), pool(nodes), inputs(resource()), NOW)
    why = "1 node(s) whose kernel is not reported left as they are"
    assert p.active is None and p.record.ended == (("m1", "completed", why),)
    assert p.marks[0].fields["reason"] == why
    assert NO_TIME < 0  # unknown launch times sort last with highest_uptime


def test_the_decision_adds_the_capacity_asked_ahead_within_the_pool_s_maximum():
    at_setpoint = builders.snapshot(builders.nodes(10, cpus=1))  # 10 units, 7 cpus asked at setpoint 70%
    asked = {"app": builders.request(cpus=7)}
    plain = decide(at_setpoint, asked, builders.policy(), AutoscalerState(), NOW)
    ahead = decide(at_setpoint, asked, builders.policy(), AutoscalerState(), NOW, ahead=Fraction(2))
    assert plain.target_capacity == 10 and ahead.target_capacity == 12
    assert "+ 2 asked ahead for a node migration" in ahead.explanation
    capped = decide(at_setpoint, asked, builders.policy(max_capacity=11), AutoscalerState(), NOW, ahead=Fraction(2))
    assert capped.target_capacity == 11

"""Carry out a Decision on the scheduler and the cloud, in the one safe order.

    untaint → taint → raise the targets that go up → drain (one step per tainted node)
            → read the leaving nodes' work again → before_terminate → cloud terminate
            → after_terminate → drain the leaving nodes kept → set every other group's absolute target

A node chosen to leave on its count of tasks (empty, or within ``max_tasks_to_kill``) is read
again from the scheduler right before termination, since work may have come onto it since the
snapshot (a pod bound to it by name, one that tolerates the taint, a watch cache behind the API
server); one with more work than it was chosen on is not terminated this run, but drained.

Terminating lowers a group's target by the instances' weight, so the absolute targets are set
last and nothing is lowered twice; a node consolidation chose to remove whose taint failed stays,
and its group's target is not lowered for it.

Between the stages the run's ``Permit`` is asked whether acting may go on (the autoscaler still
holds the pool's lease); when it says no, the rest is left for the next holder, which decides
afresh (every stage is safe to stop after). A failure is reported for its node or group and the
rest goes on: one broken group never stops the others. In a dry run nothing changes and the
report says what would have been done.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from collections.abc import Mapping
from fractions import Fraction

from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cluster.lifecycle import UNKNOWN_COUNT
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.lifecycle import Results
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.decision.consolidate import Choice
from clusterman.decision.exact import number
from clusterman.decision.result import Decision
from clusterman.run.permit import Permit
from clusterman.run.report import ApplyReport
from clusterman.run.report import Outcome as RunOutcome

log = logging.getLogger(__name__)


def apply(
    decision: Decision,
    snapshot: PoolSnapshot,
    groups: Mapping[str, CloudGroup],
    lifecycle: NodeLifecycle,
    now: float,
    permit: Permit,
    dry_run: bool = False,
) -> ApplyReport:
    report = ApplyReport(dry_run)

    def stop_before(stage: str) -> bool:
        refusal = permit.still_acting()
        if refusal is None:
            return False
        report.stopped_before = stage
        if refusal.outcome is RunOutcome.OVERRUN:
            report.errors.append(("budget", f"{refusal.message}: stopped before {stage}"))
        else:
            report.errors.append(("lease", f"the pool's lease was lost while acting: stopped before {stage}"))
        return True

    def evicting() -> str:
        refusal = permit.still_acting()
        return "" if refusal is None else refusal.message

    def drain(node_id: str) -> None:
        report.drains[node_id] = result = lifecycle.drain(node_id, now, evicting)
        if result.status is DrainStatus.FAILED:
            report.errors.append((node_id, f"drain: {result.detail}"))

    if stop_before("changing taints"):  # keeping the state before acting may have been slow
        return report
    if decision.untaint:
        report.untainted = lifecycle.untaint(decision.untaint)
    if decision.taint:
        report.tainted = lifecycle.taint(decision.taint, now)
    _fail_nodes(report, report.untainted, "untaint")
    _fail_nodes(report, report.tainted, "taint")

    if stop_before("draining"):
        return report
    raised = _raise_early(decision, snapshot, groups, dry_run, report)
    leaving = set(decision.terminate)
    for node_id in _draining(decision, snapshot, report):
        if node_id not in leaving:
            drain(node_id)

    if stop_before("terminating"):
        return report
    busy = _terminate(decision, snapshot, groups, lifecycle, now, dry_run, report, stop_before)
    if busy is None:
        return report
    for node_id in busy:  # work came onto it since the snapshot: move it, so the next run may go on
        drain(node_id)

    if stop_before("setting the groups' targets"):
        return report
    targets = _targets(decision, report)
    report.not_removed = sum(targets.values(), Fraction(0)) - sum(decision.group_targets.values(), Fraction(0))
    for group_id, target in sorted(targets.items()):
        if group_id in raised:
            continue
        group = groups.get(group_id)
        if group is None:
            report.errors.append((group_id, "no such resource group to set a target on"))
            continue
        _set_target(group, target, dry_run, report)
    return report


def _set_target(group: CloudGroup, target: Fraction, dry_run: bool, report: ApplyReport) -> None:
    try:
        report.targets.append(group.set_target_capacity(float(number(target)), dry_run=dry_run))
    except ResourceGroupError as e:
        log.warning("%s", e)
        report.errors.append((group.id, str(e)))


def _raise_early(
    decision: Decision,
    snapshot: PoolSnapshot,
    groups: Mapping[str, CloudGroup],
    dry_run: bool,
    report: ApplyReport,
) -> set[str]:
    """Set now, before any drain, the targets of the groups the decision raises and terminates
    nothing in: a replacement for a node leaving (or any scale-up) is asked within the run's first
    seconds, and a process killed mid-drain has asked for it already. Raising a target lowers
    nothing, so it cannot be lowered twice. The groups set."""
    before = {g.id: g.target_capacity for g in snapshot.groups}
    ending = {n.group_id for n in snapshot.nodes if n.id in set(decision.terminate)}
    raised: set[str] = set()
    for group_id, target in sorted(decision.group_targets.items()):
        group = groups.get(group_id)
        if group is None or group_id in ending or not target > before.get(group_id, float("inf")):
            continue
        _set_target(group, target, dry_run, report)
        raised.add(group_id)
    return raised


def _targets(decision: Decision, report: ApplyReport) -> dict[str, Fraction]:
    """The decision's group targets, each raised again by the nodes consolidation chose to remove
    whose taint failed: such a node stays ready with its pods, and lowering its group's target
    anyway would shrink the pool by a node the next run removes again."""
    targets = dict(decision.group_targets)
    tainted = set(report.tainted_now)
    for c in decision.consolidation.chosen:
        if c.choice is Choice.REMOVE and c.node not in tainted and c.group in targets:
            targets[c.group] += c.weight
    return targets


def _draining(decision: Decision, snapshot: PoolSnapshot, report: ApplyReport) -> list[str]:
    """The nodes given a drain step now: the decision's, most urgent first and each at its pace
    (``decision/drains.py``), less those whose taint failed now. A decision built by hand drains
    every node tainted before this run, plus those tainted now, minus those it keeps: a node
    whose untaint failed is still one to keep, and evicting its pods would move them for nothing."""
    if decision.paced:
        failed = set(decision.taint) - set(report.tainted_now)
        return [n for n in decision.drains.drain if n not in failed]
    keep = set(decision.untaint)
    earlier = [node_id for node_id in snapshot.node_sets.tainted_ids if node_id not in keep]
    return list(dict.fromkeys([*earlier, *report.tainted_now]))


def _terminate(
    decision: Decision,
    snapshot: PoolSnapshot,
    groups: Mapping[str, CloudGroup],
    lifecycle: NodeLifecycle,
    now: float,
    dry_run: bool,
    report: ApplyReport,
    stop_before: Callable[[str], bool],
) -> list[str] | None:
    """Terminate the decision's nodes whose work is still what it was chosen on; the others, kept
    for more work than that (to be drained), or None when acting stopped (the permit, asked again
    after reading their work)."""
    if not decision.terminate:
        return []
    nodes = {n.id: n for n in snapshot.nodes}
    by_group: dict[str, list[Node]] = defaultdict(list)
    for node_id in decision.terminate:
        node = nodes.get(node_id)
        if node is None or not node.instance_id or not node.group_id:
            report.errors.append((node_id, "cannot terminate: not an instance of one of the pool's groups"))
            continue
        by_group[node.group_id].append(node)
    # orphans never joined the scheduler: it has nothing to prepare (and would not know them)
    joined = [n.id for g in by_group.values() for n in g if n.state is not NodeState.ORPHAN]
    counted = [n for n in joined if n in decision.terminate_with]
    busy: list[str] = []
    if counted:
        busy = _busy(decision, lifecycle.running(counted), report)
        if stop_before("terminating"):  # reading the nodes' work took time: ask again
            return None
        by_group = {g: [n for n in members if n.id not in busy] for g, members in by_group.items()}
        joined = [n for n in joined if n not in busy]
    ready = lifecycle.before_terminate(joined, now) if joined else {}
    _fail_nodes(report, ready, "before terminate")
    for group_id, members in sorted(by_group.items()):
        group = groups.get(group_id)
        going = [n for n in members if ready.get(n.id) is None or ready[n.id].ok]
        if group is None or not going:
            if group is None:
                report.errors.append((group_id, "no such resource group to terminate instances in"))
            continue
        try:
            termination = group.terminate_instances([n.instance_id for n in going], dry_run=dry_run)
        except ResourceGroupError as e:
            log.warning("%s", e)
            report.errors.append((group_id, str(e)))
            continue
        report.terminations.append(termination)
        for instance_id, problem in termination.failed:
            report.errors.append((instance_id, f"terminate: {problem}"))
        done = set(termination.terminated)
        gone = [n.id for n in going if n.instance_id in done and n.state is not NodeState.ORPHAN]
        if gone:
            _fail_nodes(report, lifecycle.after_terminate(gone), "after terminate")
    return busy


def _busy(decision: Decision, running: Mapping[str, int], report: ApplyReport) -> list[str]:
    """The nodes whose work, read right before termination, is more than the decision chose them
    on (or could not be read): they stay tainted, and the next run decides on what runs there."""
    busy = []
    for node_id, count in running.items():
        allowed = decision.terminate_with.get(node_id)
        if allowed is None or 0 <= count <= allowed:
            continue
        busy.append(node_id)
        if count == UNKNOWN_COUNT:
            why = "its work could not be read right before termination"
        else:
            why = f"{count} task(s) on it now, {allowed} when decided"
        report.errors.append((node_id, f"not terminated: {why}; the next run decides again"))
    return busy


def _fail_nodes(report: ApplyReport, results: Results, what: str) -> None:
    for node_id, result in results.items():
        if result.outcome is Outcome.FAILED:
            report.errors.append((node_id, f"{what}: {result.detail}"))

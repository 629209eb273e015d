"""What a run records: its events and the pool's metrics, once at its end, from its report.

The run (``run/cycle.py``) reads, decides and acts, and says in its ``RunReport`` what it read,
met, decided and did; this turns the report into the ``Recorder``'s events and metrics
(docs/events.md), in that order: the pause starting or ending, the pool (metrics, nodes that
joined), the signals' answers, the problems met, then the decision with what acting did, or why
there was none. It keeps the two things recording needs from run to run: the nodes seen joined
(for ``NODE_JOIN``) and whether the pool was paused (for ``POOL_PAUSE`` and ``POOL_RESUME``).
``full``: False when nothing reads the runs' events and pool metrics (a simulation): what only
they would show is not worked out.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from collections.abc import Mapping

from clusterman.cluster.lifecycle import DrainStatus
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeSets
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import LeaveReason
from clusterman.core.resources import Resources
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.result import Decision
from clusterman.decision.result import Reason
from clusterman.events.event import ChangeDetail
from clusterman.events.exporter import ErrorSource
from clusterman.events.exporter import NodeAction
from clusterman.events.recorder import Recorder
from clusterman.run.demand_source import Requests
from clusterman.run.report import ApplyReport
from clusterman.run.report import Outcome
from clusterman.run.report import RunReport
from clusterman.state.pause import PauseStatus

log = logging.getLogger(__name__)

# a run that ended before deciding, by how (a paused pool aside): any other is DECISION_ERROR
_NO_DECISION: Mapping[Outcome, ChangeDetail] = {
    Outcome.STANDBY: ChangeDetail.DECISION_STANDBY,
    Outcome.NO_DEMAND: ChangeDetail.DECISION_NO_DEMAND,
}

EVENT_REASON: Mapping[Reason, ChangeDetail] = {
    Reason.UTILISATION: ChangeDetail.DECISION_UTILISATION,
    Reason.MIN_CAPACITY: ChangeDetail.DECISION_MIN_CAPACITY,
    Reason.MAX_CAPACITY: ChangeDetail.DECISION_MAX_CAPACITY,
    Reason.STEP_LIMIT: ChangeDetail.DECISION_STEP_LIMIT,
    Reason.SCALE_LOCK: ChangeDetail.DECISION_SCALE_LOCK,
    Reason.BREAKER: ChangeDetail.DECISION_BREAKER,
    Reason.CAPACITY_LOSS: ChangeDetail.DECISION_CAPACITY_LOSS,
    Reason.HELD: ChangeDetail.DECISION_HELD,
    Reason.NO_GROUPS: ChangeDetail.DECISION_NO_GROUPS,
    Reason.CONSOLIDATION: ChangeDetail.DECISION_CONSOLIDATION,
}


class RunRecording:
    """``setpoint``: the pool's, written with every decision event."""

    def __init__(self, recorder: Recorder, setpoint: float, full: bool = True) -> None:
        self.recorder = recorder
        self.setpoint = setpoint
        self.full = full
        self._joined_before: NodeSets | None = None  # the last snapshot's node sets, for its joined ids
        self._was_paused = False

    def lease_won(self) -> None:
        """Another autoscaler held the pool meanwhile: the nodes it saw join are not ours to compare with."""
        self._joined_before = None

    def __call__(self, report: RunReport) -> None:
        if report.pause is not None:
            self._pause(report.pause)
        if report.snapshot is not None:
            kept = report.state_before.memory.joined if report.state_before is not None else frozenset()
            self._pool(report.snapshot, kept, report.now)
        if report.requests is not None:
            self._signals(report.requests)
        for problem in report.problems:
            self.recorder.error(problem.source, problem.object_id, problem.message)
        d, applied = report.decision, report.applied
        if d is None:
            self._no_decision(report)
        elif applied is None:
            self._not_acted(report, d)
        else:
            assert report.snapshot is not None
            self._acted(d, applied, report.snapshot)
            if not applied.dry_run and report.state_before is not None:
                self._state_changes(report.state_before, d.state, report.now)

    def _pause(self, status: PauseStatus) -> None:
        """An event when the pause starts or ends."""
        if status.paused and not self._was_paused:
            self.recorder.paused(status.describe())
        elif not status.paused and self._was_paused:
            self.recorder.resumed("the pause ended")
        self._was_paused = status.paused

    def _pool(self, snapshot: PoolSnapshot, kept_joined: frozenset[str], now: float) -> None:
        """The pool's metrics, and a NODE_JOIN for each node that joined since the last run this
        process saw (before a restart: the kept memory ``kept_joined``). A run where no node joined
        or left costs little (``NodeSets.joined_since``)."""
        if not self.full:
            return
        metrics = self.recorder.metrics
        metrics.observe_nodes(snapshot.counts_by_state)
        for g in snapshot.groups:
            metrics.observe_group(
                g.id, target=g.target_capacity, fulfilled=g.fulfilled_capacity, minimum=g.min_capacity,
                maximum=min(g.max_capacity, 1e18),
            )  # fmt: skip
        metrics.observe_tasks(running=snapshot.node_sets.task_count, pending=len(snapshot.pending))
        sets = snapshot.node_sets
        before: NodeSets | frozenset[str] | None
        before, self._joined_before = self._joined_before, sets
        if before is None:
            if not kept_joined:
                return  # the first look: nothing to compare with
            before = kept_joined
        for node_id in sorted(sets.joined_since(before)):
            node = snapshot.node(node_id)
            since = now - node.launched_at if node.launched_at != NO_TIME and node.launched_at <= now else None
            reason = f"joined {since:.0f} s after launch" if since is not None else "joined"
            self.recorder.node(NodeAction.JOIN, node.id, node.group_id, node.allocatable, reason, since)

    def _signals(self, requests: Requests) -> None:
        if not self.full:
            return
        for e in requests.evaluations:
            if e.is_fallback:
                self.recorder.signal_failed(
                    e.app, e.failed_signal, e.fallback_reason, e.latency_seconds, e.signal, e.request
                )
            else:
                self.recorder.signal_evaluated(e.app, e.signal, e.request, e.latency_seconds)

    def _no_decision(self, report: RunReport) -> None:
        """A run that ended before deciding: the target it saw (NaN when unknown) and why."""
        paused = report.pause is not None and report.pause.paused
        self.recorder.decision(
            ChangeDetail.DECISION_PAUSED if paused else _NO_DECISION.get(report.outcome, ChangeDetail.DECISION_ERROR),
            0.0,
            target=report.target_seen,
            demand={},
            capacity={},
            utilisation={},
            setpoint=self.setpoint,
            explanation=report.message,
        )

    def _not_acted(self, report: RunReport, d: Decision) -> None:
        """A run that decided but might not act (``standby``, ``overrun``): what it would have done."""
        assert report.snapshot is not None
        self.recorder.decision(
            ChangeDetail.DECISION_STANDBY if report.outcome is Outcome.STANDBY else ChangeDetail.DECISION_OVERRUN,
            0.0,
            target=report.snapshot.target_capacity if not report.unreadable_groups else math.nan,
            **figures(d),
            setpoint=self.setpoint,
            explanation=f"{report.message}; it would have done: {d.explanation}",
        )

    def _acted(self, d: Decision, applied: ApplyReport, snapshot: PoolSnapshot) -> None:
        """The decision, what acting did node by node and group by group, and what failed."""
        if self.full:
            self._decision(d, applied, snapshot)
        prefix = "dry run: " if applied.dry_run else ""
        for object_id, message in applied.errors:
            log.warning("%s%s: %s", prefix, object_id, message)  # the run's line counts them; here is why
            source = ErrorSource.INTERNAL if object_id in ("lease", "budget") else ErrorSource.CLOUD
            self.recorder.error(source, object_id, prefix + message)

    def _state_changes(self, old: AutoscalerState, new: AutoscalerState, now: float) -> None:
        if new.scale_lock.until != old.scale_lock.until:
            if new.scale_lock.until != NO_TIME:
                self.recorder.lock_taken(new.scale_lock.until - now, "scale-up: waiting for the new capacity")
            else:
                self.recorder.lock_released()
        if new.breaker.is_open and not old.breaker.is_open:
            self.recorder.breaker_opened(new.breaker.failures, "requested capacity did not arrive")
        elif old.breaker.is_open and not new.breaker.is_open:
            self.recorder.breaker_closed("capacity arrived")

    def _decision(self, d: Decision, applied: ApplyReport, snapshot: PoolSnapshot) -> None:
        prefix = "dry run: " if applied.dry_run else ""
        self.recorder.decision(
            EVENT_REASON[d.reason],
            float(d.delta),
            target=float(d.target_capacity),
            **figures(d),
            setpoint=self.setpoint,
            explanation=prefix + d.explanation,
        )

        def node_event(action: NodeAction, node_id: str, reason: str) -> None:
            try:
                node: Node | None = snapshot.node(node_id)  # an index built on first use: most runs need none
            except KeyError:
                node = None
            size = node.allocatable if node is not None else Resources()
            self.recorder.node(action, node_id, node.group_id if node else "", size, prefix + reason)

        for node_id, result in applied.untainted.items():
            if result.ok:
                node_event(NodeAction.UNTAINT, node_id, d.node_reasons.get(node_id, result.detail))
        tainted = applied.tainted_now
        for node_id in tainted:
            node_event(NodeAction.TAINT, node_id, d.node_reasons.get(node_id, applied.tainted[node_id].detail))
        for node_id, drain in applied.drains.items():
            if drain.status is not DrainStatus.FAILED and (drain.evicted or drain.status is DrainStatus.DONE):
                node_event(NodeAction.DRAIN, node_id, drain.detail or drain.status.value)
        if not applied.dry_run:
            self.recorder.evicted(sum(drain.evicted for drain in applied.drains.values()))
        self._drains(d, applied, snapshot, node_event)
        for c in d.consolidation.chosen:
            if c.node in tainted:
                size = snapshot.node(c.node).allocatable
                self.recorder.consolidated(c.choice.value, c.node, c.group, size, prefix + c.line(d.consolidation.slot))
        by_instance = {n.instance_id: n for n in snapshot.nodes if n.instance_id} if applied.terminations else {}
        for termination in applied.terminations:
            for instance_id in termination.terminated:
                node = by_instance.get(instance_id)
                node_id = node.id if node else instance_id
                orphan = node is not None and node.state is NodeState.ORPHAN
                action = NodeAction.ORPHAN_CLEANUP if orphan else NodeAction.TERMINATE
                node_event(action, node_id, d.node_reasons.get(node_id, "terminated"))
        before = {g.id: g.target_capacity for g in snapshot.groups}
        for change in applied.targets:
            if change.changed:
                note = prefix + (change.note or d.reason.value)
                self.recorder.group_target(
                    change.group_id, before.get(change.group_id, change.previous), change.target, note
                )

    def _drains(
        self,
        d: Decision,
        applied: ApplyReport,
        snapshot: PoolSnapshot,
        node_event: Callable[[NodeAction, str, str], None],
    ) -> None:
        """Notices read, drains started, ended and given up, and pods lost, each with its reason."""
        drains = d.drains

        def reason(node_id: str) -> str:
            return drains.why[node_id].value if node_id in drains.why else LeaveReason.SCALING_DOWN.value

        for node_id in drains.new:
            node_event(NodeAction.NOTICE, node_id, d.node_reasons.get(node_id, reason(node_id)))
            self.recorder.notice(reason(node_id), "handled")
        for notice in drains.unknown:
            self.recorder.notice(notice.reason.value, "unknown")
        if applied.dry_run:
            return
        for node_id in applied.tainted_now:
            self.recorder.drain(reason(node_id), "started")
        for node_id, why in drains.given_up.items():
            if node_id in applied.untainted and applied.untainted[node_id].ok:
                node_event(NodeAction.GIVE_UP, node_id, f"{reason(node_id)}: {why}: returned to the pool")
                self.recorder.drain(reason(node_id), "given_up")
        for node_id in applied.terminated_nodes(snapshot):
            lost = drains.lost.get(node_id, 0)
            if node_id in drains.why or lost:
                self.recorder.drain(reason(node_id), "forced" if lost else "done", lost)
            if lost:
                log.warning("%s went with %d pod(s) not evicted (%s)", node_id, lost, d.node_reasons.get(node_id, ""))


def figures(d: Decision) -> dict[str, dict[str, float]]:
    """The decision's demand, capacity and utilisation per resource, as the recorder takes them."""
    return {
        "demand": {k: float(v) for k, v in d.demand.items()},
        "capacity": {k: float(v) for k, v in d.capacity.items()},
        "utilisation": {k: float(v) for k, v in d.utilisation.items()},
    }

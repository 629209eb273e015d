"""One autoscaling run: pause? → snapshot → requests → decide → apply → record.

Every adapter is passed in (the batch program wires real ones from config, the tests and the
simulator wire others), and time is a parameter. A run never raises for something outside
clusterman's control: it records what went wrong and keeps the pool as it is. Missing data never
shrinks the pool: no snapshot, no metrics, or no signal answer keeps the current target; a resource
group that cannot be read holds scale-down for the run.

The state carried from run to run (scale lock, breaker, capacity-loss memory) is loaded from a
``StateKeeper`` at the first run and saved whenever a run changes it, so a restart remembers it.
Stored state that cannot be read stops the run (like a pause that cannot be read); stored state
that is not valid is reported and replaced, and that run does not scale down.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from clusterman.autoscaler.decide import decide
from clusterman.autoscaler.decision import Decision
from clusterman.autoscaler.decision import Reason
from clusterman.autoscaler.exact import number
from clusterman.autoscaler.policy import ScalingPolicy
from clusterman.autoscaler.pool_view import SnapshotError
from clusterman.autoscaler.state import AutoscalerState
from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.view import GroupsCloudView
from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.fold import NodeFold
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.model import NO_TIME
from clusterman.cluster.model import Node
from clusterman.cluster.model import NodeState
from clusterman.cluster.model import PoolSnapshot
from clusterman.events.exporter import ErrorSource
from clusterman.events.exporter import NodeAction
from clusterman.events.record import ChangeDetail
from clusterman.events.recorder import Recorder
from clusterman.manager.apply import ApplyReport
from clusterman.manager.apply import apply
from clusterman.manager.demand import DemandSource
from clusterman.manager.demand import Requests
from clusterman.metrics.store import MetricsError
from clusterman.resources import Resources
from clusterman.signals.protocol import SignalError
from clusterman.state.carried import CorruptState
from clusterman.state.pause import NOT_PAUSED
from clusterman.state.pause import PauseStatus
from clusterman.state.store import StateError

log = logging.getLogger(__name__)
_TASK_COUNTS = NodeFold(lambda chunk, _: sum(map(attrgetter("usage.tasks"), chunk)))  # Node.task_count()

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
}


class Outcome(enum.Enum):
    ACTED = "acted"  # decided and applied (a decision to change nothing included)
    PAUSED = "paused"
    NO_SNAPSHOT = "no_snapshot"
    NO_DEMAND = "no_demand"  # no metrics or no signal answer: the target is kept
    NO_STATE = "no_state"  # the carried-over state could not be read: nothing is done


@dataclass(frozen=True)
class RunReport:
    now: float
    outcome: Outcome
    message: str = ""
    snapshot: PoolSnapshot | None = None
    decision: Decision | None = None
    applied: ApplyReport | None = None
    requests: Requests | None = None

    def line(self) -> str:
        """One line per run, for people watching the log or `make run`."""
        stamp = time.strftime("%H:%M:%S", time.gmtime(self.now))
        if self.decision is None:
            return f"{stamp} {self.outcome.value}: {self.message}"
        d = self.decision
        demand = ", ".join(f"{k}={float(v):.1f}" for k, v in d.demand.items()) or "no opinion"
        util = ", ".join(f"{k} {float(v):.0%}" for k, v in d.utilisation.items()) or "-"
        errors = f" ({len(self.applied.errors)} errors)" if self.applied and self.applied.errors else ""
        dry = " (dry run: nothing changed)" if self.applied and self.applied.dry_run else ""
        return (
            f"{stamp}{dry} demand {demand} | utilisation {util} | {d.action.value} | target "
            f"{number(d.current_target)} -> {number(d.target_capacity)}{errors} | {d.explanation}"
        )


class StateKeeper(Protocol):
    """Where the carried-over state lives between restarts (``clusterman.state.carried.StoredState``)."""

    def load(self) -> AutoscalerState:
        """Raises StateError when unreadable, CorruptState when not valid."""

    def save(self, state: AutoscalerState, now: float) -> None:
        """Raises StateError when it cannot be written."""


class Cycle:
    """The autoscaler's run, with its adapters; ``state`` carries over from run to run (and, with a
    ``keeper``, across restarts: a given ``state`` wins over the kept one)."""

    def __init__(
        self,
        *,
        connector: ClusterConnector,
        cloud: GroupsCloudView,
        lifecycle: NodeLifecycle,
        demand: DemandSource,
        policy: ScalingPolicy,
        recorder: Recorder,
        pause_status: Callable[[float], PauseStatus] = lambda now: NOT_PAUSED,
        dry_run: bool = False,
        state: AutoscalerState | None = None,
        write_metrics: Callable[[PoolSnapshot], None] | None = None,
        keeper: StateKeeper | None = None,
    ) -> None:
        self.connector = connector
        self.cloud = cloud
        self.lifecycle = lifecycle
        self.demand = demand
        self.policy = policy
        self.recorder = recorder
        self.pause_status = pause_status
        self.dry_run = dry_run
        self.state = state or AutoscalerState()
        # Pools with no separate collector (a simulated scheduler lives only in this process) have
        # their system metrics written here, each run, before the signals read them.
        self.write_metrics = write_metrics
        self.keeper = keeper
        self._loaded = keeper is None or state is not None
        self._kept: AutoscalerState | None = None  # what the keeper holds, once known
        self._was_paused = False

    @property
    def groups(self) -> dict[str, CloudGroup]:
        return {g.id: g for g in self.cloud.groups}

    def run_once(self, now: float) -> RunReport:
        paused = self._pause(now)
        if paused is not None:
            return paused
        loaded = self._load(now)
        if isinstance(loaded, RunReport):
            return loaded
        holds = [loaded] if loaded else []
        try:
            snapshot = self.connector.snapshot(now)
        except ConnectorError as e:
            return self._no_change(now, Outcome.NO_SNAPSHOT, f"cannot read the pool: {e}", ErrorSource.SCHEDULER)
        for error in (*self.cloud.errors, *self.cloud.mistagged):
            self.recorder.error(ErrorSource.CLOUD, error.group, error.problem)
        self._observe_pool(snapshot)
        if self.write_metrics is not None:
            try:
                self.write_metrics(snapshot)
            except MetricsError as e:
                self.recorder.error(ErrorSource.INTERNAL, "metrics", f"cannot write the pool's metrics: {e}")

        try:
            requests = self.demand.requests(snapshot, int(now))
        except (SignalError, MetricsError) as e:
            return self._no_change(now, Outcome.NO_DEMAND, f"no usable demand, target kept: {e}", None, snapshot)
        self._record_signals(requests)

        if self.cloud.errors:
            holds.append(f"{len(self.cloud.errors)} resource group(s) could not be read: no scale-down this run")
        try:
            decision = decide(snapshot, requests.by_app, self.policy, self.state, now, "; ".join(holds))
        except SnapshotError as e:
            return self._no_change(now, Outcome.NO_SNAPSHOT, f"snapshot refused: {e}", ErrorSource.SCHEDULER, snapshot)

        applied = apply(decision, snapshot, self.groups, self.lifecycle, now, self.dry_run)
        self._record(decision, applied, snapshot)
        if not self.dry_run:  # a dry run must not take a scale lock for a change it did not make
            self._record_state_changes(self.state, decision.state, now)
            self.state = decision.state
            self._save(now)
        report = RunReport(now, Outcome.ACTED, "", snapshot, decision, applied, requests)
        log.info("%s", report.line())
        return report

    # --- the state kept across restarts -------------------------------------------------------

    def _load(self, now: float) -> RunReport | str:
        """Load the kept state once: a report to end the run with, or why this run may not scale down."""
        if self._loaded or self.keeper is None:
            return ""
        hold = ""
        try:
            self.state = self._kept = self.keeper.load()
        except CorruptState as e:
            self.recorder.error(ErrorSource.INTERNAL, "autoscaler_state", f"{e}: starting afresh")
            hold = "the stored autoscaler state was not valid: no scale-down this run"
        except StateError as e:  # tried again next run
            return self._no_change(
                now, Outcome.NO_STATE, f"cannot read the autoscaler state: {e}", ErrorSource.INTERNAL
            )
        self._loaded = True
        return hold

    def _save(self, now: float) -> None:
        """Keep the state if it changed; a failure is reported and the save tried again next run."""
        if self.keeper is None or self.state == self._kept:
            return
        try:
            self.keeper.save(self.state, now)
            self._kept = self.state
        except StateError as e:
            self.recorder.error(ErrorSource.INTERNAL, "autoscaler_state", f"cannot save the autoscaler state: {e}")

    # --- the ways a run ends without deciding -------------------------------------------------

    def _pause(self, now: float) -> RunReport | None:
        try:
            status = self.pause_status(now)
        except StateError as e:
            # a pause we cannot read is a pause we may be ignoring: do nothing, loudly
            return self._no_change(now, Outcome.PAUSED, f"cannot read the pause state: {e}", ErrorSource.INTERNAL)
        if status.paused:
            if not self._was_paused:
                self.recorder.paused(status.describe())
            self._was_paused = True
            self.recorder.decision(
                ChangeDetail.DECISION_PAUSED,
                0.0,
                target=0.0,
                demand={},
                capacity={},
                utilisation={},
                setpoint=float(self.policy.setpoint),
                explanation=status.describe(),
            )
            return RunReport(now, Outcome.PAUSED, status.describe())
        if self._was_paused:
            self.recorder.resumed("the pause ended")
            self._was_paused = False
        return None

    def _no_change(
        self,
        now: float,
        outcome: Outcome,
        message: str,
        source: ErrorSource | None,
        snapshot: PoolSnapshot | None = None,
    ) -> RunReport:
        log.warning("%s", message)
        if source is not None:
            self.recorder.error(source, "pool", message)
        detail = ChangeDetail.DECISION_NO_DEMAND if outcome is Outcome.NO_DEMAND else ChangeDetail.DECISION_ERROR
        target = snapshot.target_capacity if snapshot is not None else 0.0
        self.recorder.decision(
            detail,
            0.0,
            target=target,
            demand={},
            capacity={},
            utilisation={},
            setpoint=float(self.policy.setpoint),
            explanation=message,
        )
        return RunReport(now, outcome, message, snapshot)

    # --- recording ----------------------------------------------------------------------------

    def _observe_pool(self, snapshot: PoolSnapshot) -> None:
        metrics = self.recorder.metrics
        metrics.observe_nodes(snapshot.counts_by_state)
        for g in snapshot.groups:
            metrics.observe_group(
                g.id, target=g.target_capacity, fulfilled=g.fulfilled_capacity, minimum=g.min_capacity,
                maximum=min(g.max_capacity, 1e18),
            )  # fmt: skip
        running = sum(_TASK_COUNTS.summaries(snapshot.nodes))
        metrics.observe_tasks(running=running, pending=len(snapshot.pending))

    def _record_signals(self, requests: Requests) -> None:
        for e in requests.evaluations:
            if e.is_fallback:
                self.recorder.signal_failed(
                    e.app, e.failed_signal, e.fallback_reason, e.latency_seconds, e.signal, e.request
                )
            else:
                self.recorder.signal_evaluated(e.app, e.signal, e.request, e.latency_seconds)

    def _record(self, d: Decision, applied: ApplyReport, snapshot: PoolSnapshot) -> None:
        self.recorder.decision(
            EVENT_REASON[d.reason],
            float(d.delta),
            target=float(d.target_capacity),
            demand={k: float(v) for k, v in d.demand.items()},
            capacity={k: float(v) for k, v in d.capacity.items()},
            utilisation={k: float(v) for k, v in d.utilisation.items()},
            setpoint=float(self.policy.setpoint),
            explanation=("dry run: " if applied.dry_run else "") + d.explanation,
        )
        prefix = "dry run: " if applied.dry_run else ""

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
        for node_id, result in applied.tainted.items():
            if result.ok:
                node_event(NodeAction.TAINT, node_id, d.node_reasons.get(node_id, result.detail))
        for node_id, drain in applied.drains.items():
            if drain.status is not DrainStatus.FAILED and (drain.evicted or drain.status is DrainStatus.DONE):
                node_event(NodeAction.DRAIN, node_id, drain.detail or drain.status.value)
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
        for object_id, message in applied.errors:
            self.recorder.error(ErrorSource.CLOUD, object_id, prefix + message)

    def _record_state_changes(self, old: AutoscalerState, new: AutoscalerState, now: float) -> None:
        if new.scale_lock.until != old.scale_lock.until:
            if new.scale_lock.until != NO_TIME:
                self.recorder.lock_taken(new.scale_lock.until - now, "scale-up: waiting for the new capacity")
            else:
                self.recorder.lock_released()
        if new.breaker.is_open and not old.breaker.is_open:
            self.recorder.breaker_opened(new.breaker.failures, "requested capacity did not arrive")
        elif old.breaker.is_open and not new.breaker.is_open:
            self.recorder.breaker_closed("capacity arrived")

    def close(self) -> None:
        for closeable in (self.demand, self.lifecycle, self.connector):
            try:
                closeable.close()
            except Exception:  # closing must not hide the reason the loop is stopping
                log.exception("closing %s failed", type(closeable).__name__)

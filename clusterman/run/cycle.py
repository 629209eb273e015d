"""One autoscaling run: pause? → snapshot → requests → decide → apply → record.

Every adapter is passed in (the batch program wires real ones from config, the tests and the
simulator wire others), and time is a parameter. A run never raises for something outside
clusterman's control: its report says what went wrong, and it keeps the pool as it is. The report
is recorded once, at the run's end (``run/record.py``). Missing data never
shrinks the pool: no snapshot, no metrics, or no signal answer keeps the current target; a resource
group that cannot be read, signals' input that is too old, or a scheduler view that may be old (a
watch cache that has not heard from its API server lately) holds scale-down for the run.

The state carried from run to run (scale lock, breaker, capacity-loss memory) is loaded from a
``StateKeeper`` at the first run and saved whenever a run changes it, before the run acts, so a
restart (even a kill mid-drain) remembers it. Stored state that cannot be read or written stops the
run (like a pause that cannot be read); stored state that is not valid is reported and replaced, and
that run does not scale down.

With a ``lease`` (``clusterman.state.lease``), a run first claims the pool's lease and renews it
right before acting: a run that does not hold it reads nothing and changes nothing
(``standby``), and the kept state is read afresh when the lease is won back. With a
``budget_seconds``, a run whose snapshot is older than the budget when it is about to act holds
instead (``overrun``): nothing is ever done on inputs older than the budget.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Protocol

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.core.model import NO_TIME
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import NOTHING_AHEAD
from clusterman.core.notices import DrainOutcome
from clusterman.core.notices import NoSource
from clusterman.core.notices import Notice
from clusterman.core.notices import NoticeError
from clusterman.core.notices import NoticeSource
from clusterman.core.notices import Plans
from clusterman.core.resources import ResourceRequest
from clusterman.datastore.store import MetricsError
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.decide import decide
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import SnapshotError
from clusterman.decision.result import Decision
from clusterman.errors import Unworkable
from clusterman.events.exporter import ErrorSource
from clusterman.events.recorder import Recorder
from clusterman.run.apply import apply
from clusterman.run.demand_source import DemandSource
from clusterman.run.demand_source import Requests
from clusterman.run.permit import Permit
from clusterman.run.permit import Refusal
from clusterman.run.reading import read_pool
from clusterman.run.record import RunRecording
from clusterman.run.report import ApplyReport
from clusterman.run.report import Outcome
from clusterman.run.report import Problem
from clusterman.run.report import RunReport
from clusterman.signals.outcomes import SignalOutcomes
from clusterman.signals.protocol import SignalError
from clusterman.state.carried import CorruptState
from clusterman.state.lease import LeaseStatus
from clusterman.state.lease import PoolLease
from clusterman.state.pause import NOT_PAUSED
from clusterman.state.pause import PauseStatus
from clusterman.state.store import StateError

log = logging.getLogger(__name__)


class Decider(Protocol):
    """The decision's signature (``decide``'s). ``notices`` and ``ahead`` are passed only when there
    are some: a decider that knows nothing of them (the scoreboard's peers) is then called without."""

    def __call__(
        self,
        snapshot: PoolSnapshot,
        requests: Mapping[str, ResourceRequest],
        policy: ScalingPolicy,
        state: AutoscalerState,
        now: float,
        holds: tuple[Hold, ...] = (),
        unseen: Fraction | None = ZERO,
        notices: tuple[Notice, ...] = NO_NOTICES,
        ahead: Fraction = ZERO,
    ) -> Decision: ...


class StateKeeper(Protocol):
    """Where the carried-over state lives between restarts (``clusterman.state.carried.StoredState``)."""

    def load(self) -> AutoscalerState:
        """Raises StateError when unreadable, CorruptState when not valid."""

    def save(self, state: AutoscalerState, now: float) -> None:
        """Raises StateError when it cannot be written."""

    def load_targets(self) -> dict[str, float]:
        """Each group's target as last read; raises as ``load``."""

    def save_targets(self, targets: Mapping[str, float], now: float) -> None:
        """Raises StateError when they cannot be written."""


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
        lease: PoolLease | None = None,
        budget_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        record: bool = True,
        decider: Decider = decide,
        notices: NoticeSource | None = None,
    ) -> None:
        """``record``: False when nothing reads the runs' events, pool metrics and signal health (a
        simulation, whose recorder keeps none): the run then does not work out what it would record.
        ``decider``: the decision (``decide``); the scoreboard replays other autoscalers' rules
        through the same run with their own (bench/_peers.py)."""
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
        self.lease = lease
        self.budget_seconds = budget_seconds
        self.clock = clock  # only to measure how old a run's inputs are (monotonic); decisions use ``now``
        self._last_target: float | None = None
        self._group_targets: dict[str, float] = {}  # each group's target as last read, by id
        self._targets_kept: dict[str, float] | None = None  # what the keeper holds of them, once known
        self.signal_outcomes = SignalOutcomes()  # for /healthz and ``clusterman status``
        self.record = record
        self.recording = RunRecording(recorder, float(policy.setpoint), record)
        self.decider = decider
        self.notices: NoticeSource = notices or NoSource()  # nodes that must go for a reason of their own
        self._unworkable = ""  # why this run found the configuration cannot work ("" when it did not)

    def run_once(self, now: float) -> RunReport:
        """One run, recorded once at its end from its report (``run/record.py``)."""
        self._unworkable = ""
        notes = _Notes()
        report = self._run(now, notes)
        report = replace(
            report,
            unworkable=self._unworkable,
            problems=tuple(notes.problems),
            pause=notes.pause,
            state_before=notes.state,
        )
        self.recording(report)
        return report

    def _note(self, error: Exception) -> None:
        """An error of this run: the first that says the configuration cannot work goes in its report."""
        if isinstance(error, Unworkable) and not self._unworkable:
            self._unworkable = str(error)

    def _run(self, now: float, notes: _Notes) -> RunReport:
        permit = self._permit(now)
        standby = self._claim(permit, notes)
        if standby is not None:
            return standby
        paused = self._pause(now, notes)
        if paused is not None:
            return paused
        try:
            holds = list(self._load(notes))
        except StateError as e:  # tried again next run
            self._note(e)
            return self._no_change(
                notes, now, Outcome.NO_STATE, f"cannot read the autoscaler state: {e}", ErrorSource.INTERNAL
            )
        permit.reading()
        try:
            reading = read_pool(self.connector, self.cloud, now)
        except ConnectorError as e:
            self._note(e)
            message = f"cannot read the pool: {e}"
            return self._no_change(notes, now, Outcome.NO_SNAPSHOT, message, ErrorSource.SCHEDULER)
        snapshot, unreadable = reading.snapshot, len(reading.unreadable)
        for error in (*reading.unreadable, *reading.mistagged):
            notes.problem(ErrorSource.CLOUD, error.group, error.problem)
        if not unreadable:
            self._last_target = snapshot.target_capacity
        if not self.dry_run:
            self._settle(snapshot)
        notes.state = self.state
        unseen = self._unseen(snapshot, unreadable)
        permit.going_on()
        if self.write_metrics is not None:
            try:
                self.write_metrics(snapshot)
            except MetricsError as e:
                self._note(e)
                message = f"cannot write the pool's metrics: {e}"
                log.warning("%s: the signals read older data: no scale-down this run", message)
                notes.problem(ErrorSource.INTERNAL, "metrics", message)
                text = "the pool's metrics could not be written (signals read older data): no scale-down"
                holds.append(Hold(HoldReason.METRICS_NOT_WRITTEN, text))

        try:
            requests = self.demand.requests(snapshot, int(now))
        except (SignalError, MetricsError) as e:
            self._note(e)
            self.signal_outcomes.no_answer(str(e), now)
            message = f"no usable demand, target kept: {e}"
            return self._no_change(notes, now, Outcome.NO_DEMAND, message, None, snapshot)
        permit.going_on()
        if self.record:
            self.signal_outcomes.observe(requests.evaluations, now)
        for reason, stale in ((HoldReason.SCHEDULER_STALE, snapshot.stale), (HoldReason.SIGNALS_STALE, requests.stale)):
            if stale:
                log.warning("%s: no scale-down this run", stale)
                holds.append(Hold(reason, f"{stale}: no scale-down"))

        if unreadable:
            text = f"{unreadable} resource group(s) could not be read: no scale-down this run"
            holds.append(Hold(HoldReason.GROUPS_UNREADABLE, text))
        notices = self._notices(snapshot, now, notes)
        ahead = self.notices.ahead() if isinstance(self.notices, Plans) else NOTHING_AHEAD
        if ahead.hold:
            holds.append(Hold(HoldReason.NODE_MIGRATION, ahead.hold))
        try:
            args = (snapshot, requests.by_app, self.policy, self.state, now, tuple(holds), unseen)
            if ahead.weight:
                decision = self.decider(*args, notices, exact(ahead.weight))
            else:
                decision = self.decider(*args, notices) if notices else self.decider(*args)
        except SnapshotError as e:
            message = f"snapshot refused: {e}"
            return self._no_change(notes, now, Outcome.NO_SNAPSHOT, message, ErrorSource.SCHEDULER, snapshot, requests)

        refusal = permit.acting()
        if refusal is not None:
            return self._refused(now, refusal, snapshot, decision, requests, unreadable)
        if not self.dry_run:  # a dry run must not take a scale lock for a change it did not make
            unsaved = self._save(decision.state, now)
            if unsaved:
                message = f"cannot keep the autoscaler state before acting: {unsaved}: nothing changed"
                return self._no_change(notes, now, Outcome.NO_STATE, message, ErrorSource.INTERNAL, snapshot, requests)
        applied = apply(decision, snapshot, reading.groups_by_id, self.lifecycle, now, permit, self.dry_run)
        if not self.dry_run:
            self.state = self._untaken(decision, applied, now)
            self._keep_targets(now)  # after acting: a slow store must not delay the run's changes
            self._settle_notices(decision, applied, snapshot, now)
        report = RunReport(
            now, Outcome.ACTED, "", snapshot, decision, applied, requests, unreadable, migration=ahead.line
        )
        if log.isEnabledFor(logging.INFO):  # building the line costs; a simulated run logs nothing
            log.info("%s", report.line())
        return report

    # --- nodes that must go for a reason of their own ------------------------------------------

    def due(self, now: float) -> bool:
        """Whether a run is due before the next one on the grid: a notice came (its source says
        so), or a node leaving before a deadline is owed its next drain step."""
        waiting = getattr(self.notices, "waiting", None)
        if waiting is not None and waiting():
            return True
        drains = self.state.drains
        gap = self.policy.draining.redrain_seconds
        steps = dict(drains.steps)
        return any(
            e.drain and e.deadline != NO_TIME and now - steps.get(e.node_id, e.since) >= gap for e in drains.leaving
        )

    def _notices(self, snapshot: PoolSnapshot, now: float, notes: _Notes) -> tuple[Notice, ...]:
        """The notices in force; when a source cannot be read, the run goes on with the nodes its
        record already has (they keep leaving) and says so."""
        try:
            return self.notices.notices(snapshot, now)
        except NoticeError as e:
            message = f"cannot read the notices of nodes to replace: {e}"
            log.warning("%s", message)
            notes.problem(ErrorSource.CLOUD, "notices", message)
            return getattr(self.notices, "last", NO_NOTICES)

    def _settle_notices(self, decision: Decision, applied: ApplyReport, snapshot: PoolSnapshot, now: float) -> None:
        drains = decision.drains
        gone = {n: drains.why[n] for n in applied.terminated_nodes(snapshot) if n in drains.why}
        outcome = DrainOutcome(
            now,
            {e.node_id: e.reason for e in decision.state.drains.leaving},
            gone,
            dict(drains.given_up),
            {n: p for n, p in drains.lost.items() if n in gone},
            drains.unknown,
        )
        try:
            self.notices.settle(outcome)
        except Exception:  # a source's bookkeeping must not undo a run that acted
            log.exception("a source of notices failed to settle the run's outcome")

    # --- one autoscaler per pool, and inputs no older than the budget -------------------------

    def keep_lease(self, now: float, hand_over: bool = True) -> LeaseStatus | None:
        """Claim or renew the lease (between runs too, so a standby takes over within one TTL).

        Between runs and at a run's start (``hand_over``) the lease goes to an operator's command
        that asked for it (``clusterman manage``); during a run it is only renewed.
        """
        if self.lease is None:
            return None
        last = self.lease.last
        was_held = last is not None and last.held
        sent = self.clock()
        try:
            status = self.lease.claim(now, hand_over=hand_over)
        except StateError as e:
            self._note(e)
            status = LeaseStatus(False, "", now, str(e))
            self.lease.last = status
        # not held, or lapsed before the store answered (this process stopped or stuck, the store
        # slow): another may have acted meanwhile
        won = not (last is not None and last.covers(now + (self.clock() - sent)))
        if status.held and won:
            self._loaded = self.keeper is None  # another autoscaler may have changed the kept state
            self.recording.lease_won()
            log.info("this autoscaler now holds the pool's lease: the lease %s", status.describe())
        elif was_held and status.requested:
            log.info("handing the pool's lease over between runs: the lease %s", status.describe())
        elif was_held and not status.held:
            log.warning("this autoscaler lost the pool's lease: the lease %s", status.describe())
        self.recorder.metrics.set_lease(status.held)
        return status

    def _permit(self, now: float) -> Permit:
        """This run's permit: the one place that says whether it may act (a dry run changes nothing,
        so only the budget limits it)."""
        return Permit(
            now,
            lease=None if self.dry_run else self.lease,
            keep=self.keep_lease,
            budget_seconds=self.budget_seconds,
            clock=self.clock,
        )

    def _claim(self, permit: Permit, notes: _Notes) -> RunReport | None:
        refusal = permit.claim()
        if refusal is None:
            return None
        if refusal.lease_error:
            notes.problem(ErrorSource.INTERNAL, "lease", refusal.message)
        return RunReport(permit.now, refusal.outcome, refusal.message, target_seen=self._known_target())

    def _refused(
        self,
        now: float,
        refusal: Refusal,
        snapshot: PoolSnapshot,
        decision: Decision,
        requests: Requests,
        unreadable: int,
    ) -> RunReport:
        """The run decided but may not act: what it would have done is recorded, nothing changes."""
        log.warning("%s", refusal.message)
        return RunReport(now, refusal.outcome, refusal.message, snapshot, decision, None, requests, unreadable)

    def release_lease(self) -> None:
        """At a clean stop: give the lease up so another autoscaler need not wait for its TTL."""
        if self.lease is None or self.lease.last is None or not self.lease.last.held:
            return
        try:
            self.lease.release()
        except StateError as e:
            log.warning("could not release the pool's lease (it expires by itself): %s", e)

    # --- the state kept across restarts -------------------------------------------------------

    def _load(self, notes: _Notes) -> tuple[Hold, ...]:
        """Load the kept state once; a state that was not valid holds scale-down this run. Raises
        StateError when it cannot be read."""
        if self._loaded or self.keeper is None:
            return ()
        holds: tuple[Hold, ...] = ()
        try:
            self.state = self._kept = self.keeper.load()
        except CorruptState as e:
            notes.problem(ErrorSource.INTERNAL, "autoscaler_state", f"{e}: starting afresh")
            text = "the stored autoscaler state was not valid: no scale-down this run"
            holds = (Hold(HoldReason.STATE_NOT_VALID, text),)
        try:
            kept = self.keeper.load_targets()
        except CorruptState as e:  # a group not read then counts as never read: no growth
            notes.problem(ErrorSource.INTERNAL, "group_targets", f"{e}: not used")
            kept = {}
        self._group_targets = {**self._group_targets, **kept}  # kept by the last holder: newer
        self._targets_kept = kept
        self._loaded = True
        return holds

    def _keep_targets(self, now: float) -> None:
        """Keep the groups' targets as last read, if they changed: a restart then counts a group
        it cannot read at that target. One not kept is tried again next run."""
        if self.keeper is None or self._group_targets == self._targets_kept:
            return
        try:
            self.keeper.save_targets(self._group_targets, now)
        except StateError as e:
            self._note(e)
            log.warning("cannot keep the groups' targets (after a restart, no growth beside a group not read): %s", e)
            return
        self._targets_kept = dict(self._group_targets)

    def _save(self, state: AutoscalerState, now: float) -> str:
        """Keep the state a decision hands on, if it changed, before the run acts on it: what it
        spends (the disruption budget, a node drained to be kept) is then counted after a kill
        mid-drain. Why it could not be kept ("" when it was): then the run must not act."""
        if self.keeper is None or state == self._kept:
            return ""
        try:
            self.keeper.save(state, now)
        except StateError as e:
            self._note(e)
            return str(e)
        self._kept = state
        return ""

    def _settle(self, snapshot: PoolSnapshot) -> None:
        """Settle, from this run's snapshot, the nodes an earlier run chose whose taint's outcome it
        did not learn (not answered, or that run was killed): one found tainted was tainted by it,
        and what choosing it spent stands; one found untainted or gone was not, and that spend is
        taken back. The state is kept with the rest before this run acts."""
        before = self.state.disruption
        if not before.unknown:
            return
        present = {n.id for n in snapshot.nodes if n.state is not NodeState.ORPHAN}
        after, found = before.settled(frozenset(snapshot.node_sets.tainted_ids), present)
        self.state = replace(self.state, disruption=after)
        for how in ("tainted", "untainted", "gone"):
            nodes = ", ".join(n for n, h in found.items() if h == how)
            if nodes:
                spend = "stands" if how == "tainted" else "taken back"
                log.info("consolidation's spend on %s %s: its taint's outcome was unknown, found %s", nodes, spend, how)

    def _untaken(self, decision: Decision, applied: ApplyReport, now: float) -> AutoscalerState:
        """The decision's state, without what consolidation spent on nodes it chose that were never
        tainted (acting stopped before taints, or their taint was refused): kept before acting,
        that spend would count evictions that never happen and use the hourly budget up. A node
        whose taint was not answered may be tainted all the same: its spend stays, its outcome
        unknown, and the next run settles it from its snapshot (``_settle``). Kept again, with the
        nodes tainted known so (a restart must not settle them later, on a snapshot where they are
        gone); when that cannot be, the next run's save keeps it."""
        state = decision.state
        tainted = set(applied.tainted_now)
        chosen = [c.node for c in decision.consolidation.chosen]
        unknown = [n for n in chosen if n not in tainted and n in applied.tainted and applied.tainted[n].unknown]
        untainted = [n for n in chosen if n not in tainted and n not in unknown]
        if unknown:
            log.warning(
                "consolidation's spend on %s stands until the next run reads it: its taint was not answered",
                ", ".join(unknown),
            )
        disruption = state.disruption.confirmed(n for n in chosen if n in tainted).untaken(untainted, now)
        if disruption == state.disruption:
            return state
        state = replace(state, disruption=disruption)
        if untainted:
            log.info("consolidation's spend on %s taken back: not tainted", ", ".join(untainted))
        unsaved = self._save(state, now)
        if unsaved:
            log.warning(
                "cannot keep the autoscaler state with consolidation's spend taken back or confirmed: %s", unsaved
            )
        return state

    # --- the ways a run ends without deciding -------------------------------------------------

    def _pause(self, now: float, notes: _Notes) -> RunReport | None:
        try:
            status = self.pause_status(now)
        except StateError as e:
            self._note(e)
            # a pause we cannot read is a pause we may be ignoring: do nothing, loudly
            message = f"cannot read the pause state: {e}"
            return self._no_change(notes, now, Outcome.PAUSED, message, ErrorSource.INTERNAL)
        notes.pause = status
        if status.paused:
            return RunReport(now, Outcome.PAUSED, status.describe(), target_seen=self._current_target(now))
        return None

    def _no_change(
        self,
        notes: _Notes,
        now: float,
        outcome: Outcome,
        message: str,
        source: ErrorSource | None,
        snapshot: PoolSnapshot | None = None,
        requests: Requests | None = None,
    ) -> RunReport:
        """A run that ends before deciding: the pool as it was, and why (an error of ``source``)."""
        log.warning("%s", message)
        if source is not None:
            notes.problem(source, "pool", message)
        target = snapshot.target_capacity if snapshot is not None else self._known_target()
        return RunReport(now, outcome, message, snapshot, requests=requests, target_seen=target)

    def _unseen(self, snapshot: PoolSnapshot, unreadable: int) -> Fraction | None:
        """The capacity of the groups this read missed, at their targets as last read: the pool's
        bounds count it (a pool at its max with one group unreadable must not grow the others).
        None when a group missed was never read (or not since its own id is not known)."""
        for g in snapshot.groups:
            self._group_targets[g.id] = g.target_capacity
        if not unreadable:
            if len(self._group_targets) > len(snapshot.groups):  # a group deleted: forget it
                self._group_targets = {g.id: g.target_capacity for g in snapshot.groups}
            return ZERO
        read = {g.id for g in snapshot.groups}
        missed = [t for gid, t in self._group_targets.items() if gid not in read]
        if len(missed) < unreadable:
            return None
        return sum((exact(t) for t in missed), ZERO)

    def _known_target(self) -> float:
        """The pool's target as last read in full, or NaN (unknown): never a made-up 0."""
        return self._last_target if self._last_target is not None else math.nan

    def _current_target(self, now: float) -> float:
        """The pool's target read now (a paused pool still has one), else the last one known."""
        try:
            reading = self.cloud.read(now)
        except Exception as e:  # the cloud adapters raise their own errors: report the last known target
            log.warning("cannot read the pool's target while paused: %s", e)
            return self._known_target()
        if reading.unreadable:
            return self._known_target()
        self._last_target = sum(g.target_capacity for g in reading.view.groups if not g.stale)
        return self._last_target

    def close(self) -> None:
        for closeable in (self.demand, self.lifecycle, self.connector, self.notices):
            try:
                closeable.close()
            except Exception:  # closing must not hide the reason the loop is stopping
                log.exception("closing %s failed", type(closeable).__name__)


class _Notes:
    """What one run notes on the way, for its report: the problems it met, the pause and the
    carried state it read."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.pause: PauseStatus | None = None
        self.state: AutoscalerState | None = None

    def problem(self, source: ErrorSource, object_id: str, message: str) -> None:
        self.problems.append(Problem(source, object_id, message))

"""A pool's node migration as a source of notices: the run asks it which nodes to replace, the
drain machinery replaces them (docs/node_lifecycle.md, "Node migration").

Each run, ``notices`` reads the migration's record from the state store (every run, so a process
that just took the pool's lease goes on where the last holder stopped), the pool's
``NodeMigration`` resources (kept current by a watch), the nodes their label selectors select, and
which nodes drifted; ``decision/migration.py: plan`` says what to do; the record is written back
before the run acts, and the step's nodes are returned as ``node_migration`` notices: replaced
ahead (``drain=False``) while their replacements join, then drained. ``ahead`` is the capacity asked
beyond the decision's (prescaling), the hold of ``disable_autoscaling``, and the line for the
run's log. ``settle`` counts the nodes terminated and the drains given up, writes the resources'
status (label and ``status``, only what changed), and records events.

A part that cannot be read raises ``NoticeError``: the run goes on with the notices of the run
before (``last``), and the migration does not move until it can be read again. Nothing is written
in a dry run.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from typing import Protocol

from clusterman.cluster.connector import ConnectorError
from clusterman.core.config import NodeMigrationConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.notices import NO_NOTICES
from clusterman.core.notices import NOTHING_AHEAD
from clusterman.core.notices import Ahead
from clusterman.core.notices import DrainOutcome
from clusterman.core.notices import LeaveReason
from clusterman.core.notices import Notice
from clusterman.core.notices import NoticeError
from clusterman.decision import migration
from clusterman.decision.drift import drifted
from clusterman.decision.migration import MigrationInputs
from clusterman.decision.migration import MigrationPlan
from clusterman.decision.migration import MigrationRecord
from clusterman.decision.migration_request import MigrationRequest
from clusterman.decision.migration_request import Status
from clusterman.events.recorder import Recorder
from clusterman.state.store import StateError

log = logging.getLogger(__name__)


class Resources(Protocol):
    """The cluster's NodeMigration resources (``cluster/node_migrations.py: NodeMigrations``):
    read, the nodes a selector selects, their status written. Each call may raise ConnectorError."""

    def requests(self) -> tuple[MigrationRequest, ...]: ...

    def nodes_selected(self, pool_selector: str, selectors: tuple[str, ...]) -> frozenset[str]: ...

    def mark(self, name: str, status: Status, attempts: int | None = None) -> None: ...

    def report(self, name: str, fields: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class RecordKeeper(Protocol):
    """Where the record lives (``state/node_migration.py: StoredMigration``); StateError when it
    cannot be read or written."""

    def load(self) -> MigrationRecord: ...

    def save(self, record: MigrationRecord, now: float) -> None: ...


class KeptInMemory:
    """A record kept in this process only (the simulator's: nothing outlives its run)."""

    def __init__(self) -> None:
        self.record = MigrationRecord()

    def load(self) -> MigrationRecord:
        return self.record

    def save(self, record: MigrationRecord, now: float) -> None:
        self.record = record


class MigrationSource:
    """``resources``: None for a pool that takes no NodeMigration resources (then only max_uptime
    and drift start migrations); ``pool_selector`` the label selector of the pool's nodes.
    ``budget_share``: the share of the pool's nodes that may be disrupted at once (the pool's
    disruption budget, at least one node)."""

    def __init__(
        self,
        identity: PoolIdentity,
        settings: NodeMigrationConfig,
        record: RecordKeeper,
        recorder: Recorder,
        *,
        resources: Resources | None = None,
        pool_selector: str = "",
        budget_share: float = 0.1,
        attempts_margin: int = 5,
        dry_run: bool = False,
    ) -> None:
        self.identity = identity
        self.settings = settings
        self.record = record
        self.recorder = recorder
        self.resources = resources
        self.pool_selector = pool_selector
        self.budget_share = budget_share
        self.attempts_margin = attempts_margin
        self.dry_run = dry_run
        self.last: tuple[Notice, ...] = NO_NOTICES
        self._plan: MigrationPlan | None = None
        self._mine: dict[str, MigrationRequest] = {}

    # --- the run asks -------------------------------------------------------------------------------

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        try:
            record = self.record.load()
        except StateError as e:
            raise NoticeError(f"node migration: cannot read its record: {e}") from e
        mine = self._requests()
        plan = migration.plan(record, snapshot, self._inputs(record, snapshot, mine), now)
        if plan.record != record and not self.dry_run:
            try:
                self.record.save(plan.record, now)
            except StateError as e:  # never act on a step that a restart would not know of
                raise NoticeError(f"node migration: cannot keep its record before acting: {e}") from e
        self._plan = plan
        for happened in plan.happened:
            log.info("node migration: %s", happened)
            self.recorder.migration(happened.key, happened.trigger.value, happened.outcome, str(happened))
        key = plan.active.key if plan.active is not None else ""
        self.last = tuple(
            Notice(LeaveReason.NODE_MIGRATION, now, node_id=n, drain=drain, key=key)
            for nodes, drain in ((plan.replace, False), (plan.drain, True))
            for n in nodes
        )
        return self.last

    def ahead(self) -> Ahead:
        plan = self._plan
        if plan is None or plan.active is None:
            return NOTHING_AHEAD
        hold = ""
        if self.settings.disable_autoscaling:
            hold = f"node migration {plan.active.key} runs (disable_autoscaling): no scale-down"
        return Ahead(plan.prescale, hold, plan.line)

    def settle(self, outcome: DrainOutcome) -> None:
        plan = self._plan
        if plan is None:
            return
        record = migration.settle(plan.record, outcome.gone, outcome.given_up)
        if record != plan.record and not self.dry_run:
            try:
                self.record.save(record, outcome.now)
            except StateError as e:  # the next run counts the nodes gone from its snapshot
                log.warning("node migration: cannot keep what this run did: %s", e)
        before, after = plan.record.active, record.active
        if before is not None and after is not None:
            self.recorder.migration_progress(before.trigger.value, after.done - before.done, after.left)
            for node_id, why in outcome.given_up.items():
                if node_id in before.batch:
                    text = f"{before.key}: the drain of {node_id} was given up ({why}): queued again"
                    self.recorder.migration(before.key, before.trigger.value, "drain_given_up", text)
        elif after is None:
            self.recorder.migration_progress("", 0, 0)
        self._plan = replace(plan, record=record)
        if not self.dry_run:
            self._write_marks(plan)

    def close(self) -> None:
        if self.resources is not None:
            self.resources.close()

    # --- reading and writing ------------------------------------------------------------------------

    def _requests(self) -> tuple[MigrationRequest, ...]:
        if self.resources is None:
            return ()
        try:
            found = self.resources.requests()
        except ConnectorError as e:
            raise NoticeError(f"node migration: cannot read the NodeMigration resources: {e}") from e
        mine = tuple(r for r in found if (r.cluster, r.pool) == (self.identity.cluster, self.identity.pool))
        self._mine = {r.name: r for r in mine}
        return mine

    def _inputs(
        self, record: MigrationRecord, snapshot: PoolSnapshot, mine: tuple[MigrationRequest, ...]
    ) -> MigrationInputs:
        joined = sum(1 for n in snapshot.nodes if n.state in (NodeState.READY, NodeState.TAINTED))
        selected: dict[str, frozenset[str]] = {}
        for r in mine:  # only where a step may be chosen: the running one, or the next to start
            running = record.active is not None and record.active.key == r.name
            open_ = r.status is not None and r.status.open
            if self.resources is not None and r.selectors and open_ and (running or record.active is None):
                try:
                    chosen = tuple(str(s) for s in r.selectors)
                    selected[r.name] = self.resources.nodes_selected(self.pool_selector, chosen)
                except ConnectorError as e:
                    log.warning("node migration %s: cannot list the nodes its selectors select: %s", r.name, e)
        return MigrationInputs(
            self.settings,
            mine,
            selected,
            frozenset(drifted(snapshot)) if self.settings.trigger.drift else frozenset(),
            self.settings.trigger.drift,
            max(1, int(self.budget_share * joined)),
            self.attempts_margin,
        )

    def _write_marks(self, plan: MigrationPlan) -> None:
        """Each resource's ``status``, then its status label (when it changes): a label that says
        the migration ended closes it, so it is written only once the reason is; what cannot be
        written is written at a later run (it still differs from what the plan says)."""
        if self.resources is None:
            return
        for mark in plan.marks:
            try:
                self.resources.report(mark.name, mark.fields)
                shown = self._mine.get(mark.name)
                if shown is None or shown.status is not mark.status:
                    self.resources.mark(mark.name, mark.status)
            except ConnectorError as e:
                log.warning("node migration: cannot write the status of %s: %s", mark.name, e)

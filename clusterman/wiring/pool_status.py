"""What ``clusterman status`` reports for one pool, read from the same adapters the autoscaler uses.

Each part (pause, groups, nodes, utilisation, kept state, last decisions) is read on its own; a
part that cannot be read is an ``Unavailable`` saying why, and never hides the others. Utilisation
comes from the autoscaler's own last decision when its event API answers (its ``/metrics``), else
it is measured now from a snapshot and the pool's demand source, exactly as a run would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.core.cloud_view import CloudView
from clusterman.core.config import NodeMigrationConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.durations import format_duration
from clusterman.core.model import NO_TIME
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.timestamps import format_time
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.consolidate import Budget
from clusterman.decision.demand import total_request
from clusterman.decision.migration import MigrationRecord
from clusterman.decision.pool_view import view_of
from clusterman.decision.utilisation import measure
from clusterman.errors import Reported
from clusterman.errors import UserError
from clusterman.events.client import EventAPIError
from clusterman.events.client import EventClient
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.exporter import NAMESPACE
from clusterman.run.budget import SCHEDULER_TIMEOUT_SECONDS
from clusterman.run.demand_source import DemandSource
from clusterman.signals.outcomes import SignalOutcome
from clusterman.signals.outcomes import SignalOutcomes
from clusterman.state.carried import StoredState
from clusterman.state.lease import Holder
from clusterman.state.lease import read_lease
from clusterman.state.node_migration import StoredMigration
from clusterman.state.pause import PauseStatus
from clusterman.state.pause import pause_status
from clusterman.state.store import StateStore
from clusterman.wiring.schedulers import connector_for_pool
from clusterman.wiring.setup import PoolSetup

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Unavailable:
    """A part of the status that could not be read, and why."""

    why: str

    def as_json(self) -> dict[str, str]:
        return {"unavailable": self.why}


@dataclass(frozen=True)
class UtilisationReading:
    source: str  # "last decision" (the autoscaler's own) or "measured now"
    ratios: dict[str, float]  # load / capacity per resource, 0..1
    demand: dict[str, float]  # resources.py units
    capacity: dict[str, float]
    setpoint: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecisionLine:
    id: int
    at: float  # Unix seconds
    reason: str  # the DECISION_* detail without its prefix, lower case
    delta: float  # weight units added (+) or removed (-)
    message: str

    @staticmethod
    def of(record: EventRecord) -> DecisionLine:
        e = record.event
        amount = dict(e.resource).get("capacity", 0.0)
        sign = -1 if e.change.name == "REMOVE" else 1
        reason = e.detail.name.removeprefix("DECISION_").lower()
        return DecisionLine(record.id, e.timestamp_ns / 1e9, reason, sign * amount, e.message)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": format_time(self.at),
            "reason": self.reason,
            "delta": self.delta,
            "message": self.message,
        }


@dataclass(frozen=True)
class AutoscalerHealth:
    """The autoscaler's ``/healthz``: problems make it unhealthy; an app on its fallback signal
    makes it ``degraded`` (it scales, on another signal's answer)."""

    problems: tuple[str, ...]
    degraded: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        return "unhealthy" if self.problems else "degraded" if self.degraded else "ok"

    def describe(self) -> str:
        if self.problems:
            return "; ".join(self.problems)
        if self.degraded:
            return "degraded: " + "; ".join(self.degraded)
        return "ok"

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "problems": list(self.problems), "degraded": list(self.degraded)}


@dataclass(frozen=True)
class SignalsReading:
    """Each app's signal: as the autoscaler's last run found it, or as evaluated now."""

    source: str  # "last run" (the autoscaler's) or "measured now"
    outcomes: tuple[SignalOutcome, ...]

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "outcomes": [o.as_json() for o in self.outcomes]}


@dataclass(frozen=True)
class NodeCounts:
    by_state: dict[str, int]  # every NodeState value
    weight_by_state: dict[str, float]  # capacity units
    running_tasks: int
    pending_tasks: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PoolStatus:
    pool: str
    taken_at: float
    pause: PauseStatus | Unavailable
    groups: tuple[ResourceGroup, ...]
    group_errors: tuple[str, ...]  # the pool's groups that could not be found or read
    mistagged: tuple[str, ...]  # groups whose tag names no pool: not counted
    nodes: NodeCounts | Unavailable
    utilisation: UtilisationReading | Unavailable
    kept: AutoscalerState | Unavailable
    decisions: tuple[DecisionLine, ...] | Unavailable
    lease: LeaseView | Unavailable = field(default_factory=lambda: Unavailable("not read"))
    health: AutoscalerHealth | Unavailable = field(default_factory=lambda: Unavailable("no event API to ask"))
    signals: SignalsReading | Unavailable = field(default_factory=lambda: Unavailable("not read"))
    pool_file_refused: str = ""  # why the pool's file on disk is not valid ("" when it is)
    consolidation: ConsolidationReading | Unavailable = field(default_factory=lambda: ConsolidationReading(None))
    migration: MigrationReading | Unavailable = field(default_factory=lambda: Unavailable("not read"))

    def as_json(self) -> dict[str, Any]:
        def part(value: Any, shown: Callable[[Any], Any]) -> Any:
            return value.as_json() if isinstance(value, Unavailable) else shown(value)

        return {
            "pool": self.pool,
            "pool_file_refused": self.pool_file_refused or None,
            "taken_at": format_time(self.taken_at),
            "pause": part(self.pause, pause_json),
            "lease": part(self.lease, LeaseView.as_json),
            "groups": [group_json(g) for g in self.groups],
            "group_errors": list(self.group_errors),
            "mistagged_groups": list(self.mistagged),
            "nodes": part(self.nodes, NodeCounts.as_json),
            "utilisation": part(self.utilisation, UtilisationReading.as_json),
            "autoscaler_state": part(self.kept, AutoscalerState.as_json),
            "last_decisions": part(self.decisions, lambda ds: [d.as_json() for d in ds]),
            "signals": part(self.signals, SignalsReading.as_json),
            "autoscaler_health": part(self.health, AutoscalerHealth.as_json),
            "consolidation": part(self.consolidation, ConsolidationReading.as_json),
            "node_migration": part(self.migration, MigrationReading.as_json),
        }


@dataclass(frozen=True)
class ConsolidationReading:
    """The disruption budget consolidation has used (None: consolidation is off for the pool)."""

    budget: Budget | None
    kept: int = 0  # nodes being drained to be kept
    off_because: str = ""  # why it is off although the configuration turns it on

    def describe(self) -> str:
        if self.budget is None:
            return f"consolidation off: {self.off_because}" if self.off_because else "consolidation: off"
        kept = f", {self.kept} node(s) being drained to be kept" if self.kept else ""
        return f"consolidation budget: {self.budget.describe()}{kept}"

    def as_json(self) -> dict[str, Any]:
        if self.budget is None:
            return {"enabled": False, "text": self.describe()}
        return {"enabled": True, **self.budget.as_json(), "nodes_kept": self.kept, "text": self.describe()}


@dataclass(frozen=True)
class MigrationReading:
    """The pool's node migration as its record says (docs/node_lifecycle.md, "Node migration")."""

    settings: NodeMigrationConfig
    record: MigrationRecord
    now: float

    def describe(self) -> str:
        s = self.settings
        if not s.enabled:
            return "node migration: off (no node_migration block)"
        m = self.record.active
        if m is None:
            triggers = [name for name, on in (("event", s.trigger.event), ("drift", s.trigger.drift)) if on]
            if math.isfinite(s.trigger.max_uptime):
                triggers.append(f"max_uptime {format_duration(s.trigger.max_uptime)}")
            ended = f"; last ended: {self.record.ended[-1][0]} {self.record.ended[-1][1]}" if self.record.ended else ""
            return f"node migration: none running (triggers: {', '.join(triggers) or 'none'}){ended}"
        end = m.estimated_end(self.now, s.expected_duration)
        due = m.started_at + s.expected_duration
        pace = "within expected_duration" if end <= due else f"{format_duration(end - due)} past expected_duration"
        step = f"step {m.step}: {m.phase.value} {len(m.batch)} node(s)" if m.step else m.phase.value
        waits = f"; {m.reason}" if m.reason else ""
        return (
            f"node migration {m.key} ({m.trigger.value}): {step}, {m.done} done, {m.left} left, "
            f"drains failed {m.failed_drains} of {s.strategy.allowed_failed_drains} allowed, "
            f"started {format_time(m.started_at)}, ends about {format_time(end)} ({pace}){waits}"
        )

    def as_json(self) -> dict[str, Any]:
        m = self.record.active
        active = None
        if m is not None:
            active = {**m.as_json(), "estimated_end": m.estimated_end(self.now, self.settings.expected_duration)}
        return {"enabled": self.settings.enabled, "active": active, "ended": [list(e) for e in self.record.ended],
                "text": self.describe()}  # fmt: skip


def consolidation_reading(
    setup: PoolSetup, snapshot: PoolSnapshot | Unavailable, kept: AutoscalerState | Unavailable, now: float
) -> ConsolidationReading | Unavailable:
    policy = setup.policy.consolidation
    if not policy.enabled:
        return ConsolidationReading(None, off_because=policy.off_because)
    if isinstance(snapshot, Unavailable):
        return Unavailable(f"no snapshot: {snapshot.why}")
    if isinstance(kept, Unavailable):
        return Unavailable(f"no autoscaler state: {kept.why}")
    counts = snapshot.counts_by_state
    ready, tainted = counts[NodeState.READY], counts[NodeState.TAINTED]
    state = kept.disruption
    return ConsolidationReading(Budget.of(policy, ready, tainted, state, now), len(state.keeping))


@dataclass(frozen=True)
class LeaseView:
    """The pool's lease as stored (``clusterman.state.lease``): who may act on the pool now."""

    holder: str  # the holder's id (host:pid:start), "" when nobody holds a live lease
    purpose: str  # "" for an autoscaler, "clusterman manage by ..." for an operator's command
    since: float  # Unix seconds the holder took it; 0 = unknown
    expires_at: float  # Unix seconds; 0 when nobody holds it

    @property
    def could_act(self) -> bool:
        """Whether a process asking now (this one, or an autoscaler starting now) would get the lease."""
        return not self.holder

    def describe(self) -> str:
        if self.could_act:
            return "lease: free (no live holder): an autoscaler asking now would act"
        who = Holder.describe_id(self.holder)
        if self.purpose:
            who = f"{self.purpose}, {who}"
        since = f" since {format_time(self.since)}" if self.since else ""
        return f"lease: held by {who}{since} until {format_time(self.expires_at)}; this process could not act now"

    def as_json(self) -> dict[str, Any]:
        return {
            "held": not self.could_act,
            "holder": self.holder or None,
            "purpose": self.purpose,
            "since": format_time(self.since) if self.since else None,
            "expires": format_time(self.expires_at) if self.expires_at else None,
            "this_process_could_act": self.could_act,
            "text": self.describe(),
        }


def lease_view(store: StateStore, identity: PoolIdentity, now: float) -> LeaseView:
    status = read_lease(store, identity, now)
    if status is None:
        return LeaseView("", "", 0.0, 0.0)
    return LeaseView(status.holder, status.purpose, status.since, status.expires_at)


def pause_json(status: PauseStatus) -> dict[str, Any]:
    until = None if not status.paused or not status.until else format_time(status.until)
    return {"paused": status.paused, "until": until, "reason": status.reason, "text": status.describe()}


def group_json(g: ResourceGroup) -> dict[str, Any]:
    return {
        "id": g.id,
        "kind": g.kind,
        "target": g.target_capacity,
        "fulfilled": g.fulfilled_capacity,
        "min": g.min_capacity,
        "max": None if g.max_capacity == float("inf") else g.max_capacity,
        "stale": g.stale,
    }


def read(what: str, reader: Callable[[], T]) -> T | Unavailable:
    """``reader()``, or why it could not be read (a person-fixable error: config, network, store)."""
    try:
        return reader()
    except Reported as e:
        log.debug("%s unavailable: %s", what, e)
        return Unavailable(str(e))


class _Seen:
    """The cloud view already read, for the connector to join (AWS is read once)."""

    def __init__(self, view: CloudView) -> None:
        self.view = view

    def cloud_view(self, now: float) -> CloudView:
        return self.view


def gather(
    setup: PoolSetup,
    now: float,
    *,
    store: StateStore,
    cloud: GroupsCloudView,
    demand: Callable[[], DemandSource],
    events: EventClient | None,
    decisions: int = 5,
    scheduler_timeout_seconds: float = SCHEDULER_TIMEOUT_SECONDS,
) -> PoolStatus:
    identity = setup.identity
    groups = cloud.read(now)
    view = groups.view
    snapshot: PoolSnapshot | Unavailable
    if groups.unreadable and not view.groups and identity.scheduler.traits.nodes_are_instances:
        snapshot = Unavailable("its nodes are its groups' instances, and no group could be read")
    else:
        snapshot = read("nodes", lambda: _snapshot(setup, view, now, scheduler_timeout_seconds))
    told = _told(events, identity, decisions)
    utilisation, signals = told.utilisation, told.signals
    if isinstance(utilisation, Unavailable):
        utilisation, measured_signals = measured(setup, snapshot, demand)
        if isinstance(signals, Unavailable):
            signals = measured_signals
    kept = read("autoscaler state", StoredState(store, identity).load)
    return PoolStatus(
        pool=str(identity),
        taken_at=now,
        pause=read("pause", lambda: pause_status(store, identity, now)),
        lease=read("lease", lambda: lease_view(store, identity, now)),
        groups=tuple(sorted(view.groups, key=lambda g: g.id)),
        group_errors=tuple(str(e) for e in groups.unreadable),
        mistagged=tuple(str(e) for e in groups.mistagged),
        nodes=snapshot if isinstance(snapshot, Unavailable) else node_counts(snapshot),
        utilisation=utilisation,
        kept=kept,
        decisions=told.decisions,
        health=told.health,
        signals=signals,
        consolidation=consolidation_reading(setup, snapshot, kept, now),
        migration=read(
            "node migration",
            lambda: MigrationReading(setup.pool.node_migration, StoredMigration(store, identity).load(), now),
        ),
    )


def gather_refused(
    identity: PoolIdentity,
    refused: str,
    now: float,
    *,
    store: StateStore,
    events: EventClient | None,
    decisions: int = 5,
) -> PoolStatus:
    """The status while the pool's file on disk is refused (``refused`` says why): the running
    autoscaler goes on with the last good copy its bootstrap kept, so what its event API tells,
    the pause, the lease and the kept state are shown; the groups and nodes, which only the pool
    file says how to find, are not."""
    told = _told(events, identity, decisions)
    unknown = Unavailable("not read while the pool file is refused")
    return PoolStatus(
        pool=str(identity),
        taken_at=now,
        pause=read("pause", lambda: pause_status(store, identity, now)),
        lease=read("lease", lambda: lease_view(store, identity, now)),
        groups=(),
        group_errors=(unknown.why,),
        mistagged=(),
        nodes=unknown,
        utilisation=told.utilisation,
        kept=read("autoscaler state", StoredState(store, identity).load),
        decisions=told.decisions,
        health=told.health,
        signals=told.signals,
        pool_file_refused=refused,
    )


@dataclass(frozen=True)
class _Told:
    """What the autoscaler's event API tells about the pool."""

    decisions: tuple[DecisionLine, ...] | Unavailable
    utilisation: UtilisationReading | Unavailable
    health: AutoscalerHealth | Unavailable
    signals: SignalsReading | Unavailable


def _told(events: EventClient | None, identity: PoolIdentity, decisions: int) -> _Told:
    unasked = Unavailable("no event API to ask")
    if events is None:
        return _Told(unasked, unasked, unasked, unasked)
    history = read("decisions", lambda: last_decisions(events, identity.pool_with_scheduler, decisions))
    if isinstance(history, Unavailable):
        return _Told(history, history, history, history)
    from_metrics = read("utilisation", lambda: decided_utilisation(events.metrics(), identity))
    asked = read("health", events.health)
    if isinstance(asked, Unavailable):
        return _Told(history, from_metrics, asked, asked)
    signals = read("signals", lambda: last_run_signals(asked.signals))
    return _Told(history, from_metrics, AutoscalerHealth(asked.problems, asked.degraded), signals)


def last_run_signals(sent: tuple[Any, ...]) -> SignalsReading:
    """The outcomes the autoscaler's ``/healthz`` sent (an older autoscaler sends none)."""
    try:
        return SignalsReading("last run", tuple(SignalOutcome.from_json(doc) for doc in sent))
    except ValueError as e:
        raise EventAPIError(f"/healthz: unexpected signal outcome: {e}") from e


def _snapshot(setup: PoolSetup, view: CloudView, now: float, timeout_seconds: float) -> PoolSnapshot:
    connector = connector_for_pool(setup.main, setup.identity, setup.pool, _Seen(view), timeout_seconds, watch=False)
    try:
        return connector.snapshot(now)
    finally:
        connector.close()


def node_counts(snapshot: PoolSnapshot) -> NodeCounts:
    by_state = {s.value: 0 for s in NodeState}
    weight = {s.value: 0.0 for s in NodeState}
    running = 0
    for n in snapshot.nodes:
        by_state[n.state.value] += 1
        weight[n.state.value] += n.weight
        running += sum(1 for t in n.tasks if not t.daemon)
    return NodeCounts(by_state, weight, running, len(snapshot.pending))


def measured(
    setup: PoolSetup, snapshot: PoolSnapshot | Unavailable, demand: Callable[[], DemandSource]
) -> tuple[UtilisationReading | Unavailable, SignalsReading | Unavailable]:
    """The utilisation measured now, and how each app's signal answered for it."""
    if isinstance(snapshot, Unavailable):
        why = Unavailable(f"no snapshot to measure: {snapshot.why}")
        return why, why
    policy = setup.policy
    now = snapshot.taken_at
    try:
        source = demand()
        try:
            requests = source.requests(snapshot, int(now))
        finally:
            source.close()
    except Reported as e:
        log.debug("utilisation unavailable: %s", e)
        return Unavailable(str(e)), Unavailable(str(e))
    outcomes = SignalOutcomes()
    outcomes.observe(requests.evaluations, now)
    util = measure(view_of(snapshot), total_request(requests.by_app), policy.excluded_resources)
    reading = UtilisationReading(
        "measured now",
        {k: float(v) for k, v in util.ratios.items()},
        {k: float(v) for k, v in util.demand.items()},
        {k: float(v) for k, v in util.capacity.items()},
        float(policy.setpoint),
    )
    return reading, SignalsReading("measured now", outcomes.outcomes)


def last_decisions(events: EventClient, pool: str, count: int) -> tuple[DecisionLine, ...]:
    """The pool's newest ``count`` decisions: the server filters DECISION events, then counts."""
    found = [
        DecisionLine.of(r)
        for r in events.newest(count, {EventType.DECISION})
        if isinstance(r, EventRecord) and r.event.object_id == pool
    ]
    return tuple(found)


def decided_utilisation(exposition: str, identity: PoolIdentity) -> UtilisationReading:
    """The figures of the autoscaler's last decision, from its Prometheus gauges."""
    labels = {"cluster": identity.cluster, "pool": identity.pool_with_scheduler}
    per_resource: dict[str, dict[str, float]] = {"utilisation_ratio": {}, "demand": {}, "capacity": {}}
    setpoints: list[float] = []
    for family in text_string_to_metric_families(exposition):
        name = family.name.removeprefix(f"{NAMESPACE}_")
        for sample in family.samples:
            if any(sample.labels.get(k) != v for k, v in labels.items()):
                continue
            if name in per_resource and "resource" in sample.labels:
                per_resource[name][sample.labels["resource"]] = sample.value
            elif name == "setpoint_ratio":
                setpoints.append(sample.value)
    if not per_resource["utilisation_ratio"] or not setpoints:
        raise UserError(f"the autoscaler has not measured {identity} yet (or the pool is paused)")
    return UtilisationReading(
        "last decision",
        per_resource["utilisation_ratio"],
        per_resource["demand"],
        per_resource["capacity"],
        setpoints[-1],
    )


def describe_kept(state: AutoscalerState, now: float) -> str:
    lock, breaker = state.scale_lock, state.breaker
    parts = []
    if lock.until != NO_TIME and now < lock.until:
        parts.append(f"scale lock held until {format_time(lock.until)} (waiting for {lock.requested:g} units)")
    else:
        parts.append("scale lock free")
    if breaker.is_open:
        parts.append(f"breaker open since {format_time(breaker.opened_at)} after {breaker.failures} failed scale-ups")
    else:
        parts.append("breaker closed")
    if state.memory.terminating:
        parts.append(f"{len(state.memory.terminating)} node(s) being terminated")
    if state.disruption.keeping:
        parts.append(f"{len(state.disruption.keeping)} node(s) being drained to be kept")
    if state.disruption.unknown:
        nodes = " ".join(sorted(n for n, _, _ in state.disruption.unknown))
        parts.append(f"taint not answered for {nodes}: the next run settles what choosing it spent")
    for node, until in sorted(state.disruption.rest_ends(now).items()):
        parts.append(f"{node} rests until {format_time(until)} (its drain to keep was given up)")
    for e in state.drains.leaving:
        deadline = f", gone by {format_time(e.deadline)}" if e.deadline != NO_TIME else ""
        replaced = f", {e.replacement:g} unit(s) kept for its replacement" if e.replacement else ""
        what = "leaving" if e.drain else "replaced ahead"
        parts.append(f"{e.node_id} {what} for {e.reason.value} since {format_time(e.since)}{deadline}{replaced}")
    for node, at in state.drains.given_up:
        parts.append(f"{node}: its drain was given up at {format_time(at)} (back in the pool)")
    return ", ".join(parts)


def percent_line(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.1%}" for k, v in values.items()) or "none"

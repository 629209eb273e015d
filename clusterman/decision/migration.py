"""A pool's node migration as a value: which nodes it replaces, in what order and how fast, and
where it is (docs/node_lifecycle.md, "Node migration").

One migration runs at a time per pool, inside the pool's own run: this module says, each run,
which nodes to replace ahead and which to drain, and the run hands them to the drain machinery
as notices (reason ``node_migration``). Three triggers start one, the first that has work:

  event       a ``NodeMigration`` resource for the pool (``node_migration.trigger.event``): the
              nodes that do not meet its condition (and match its label selectors)
  max_uptime  nodes that would pass ``trigger.max_uptime`` before a migration could reach them
  drift       nodes whose instance was launched from another template version or image than
              their group launches now (``trigger.drift``, ``decision/drift.py``)

A migration goes through these phases, time passed in and every step kept in the state store:

  prescaling  ``strategy.prescaling`` nodes' weight is asked of the decision for the whole
              migration; it waits (at most 15 minutes, as Clusterman) for the pool to have it
  replacing   batch k: ``strategy.rate`` nodes (fewer when the disruption budget has no room), in
              ``strategy.precedence`` order, are replaced ahead: their capacity is asked for
              while they still run. It waits at least ``bootstrap_wait`` and until the pool is
              healthy (the capacity asked for has joined, no pod pending); after
              ``bootstrap_timeout`` the migration fails and the batch is left as it was
  draining    the batch is drained and terminated by the drain machinery; a drain given up
              counts against ``allowed_failed_drains`` (its node goes back in the queue) and the
              migration fails past it. Once no node of the batch is left, batch k+1 is replaced
  completed, failed (with the reason), stopped (``migrate-stop``, or its resource deleted)

Clusterman drained a batch first and waited for the autoscaler to replace it afterwards; here the
replacements come first, so a batch whose replacements never come is never drained.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from clusterman.core.config import MigrationPrecedence
from clusterman.core.config import NodeMigrationConfig
from clusterman.core.durations import format_duration
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.stored import is_amount
from clusterman.core.timestamps import format_time
from clusterman.decision.migration_request import MigrationRequest
from clusterman.decision.migration_request import Status

INITIAL_HEALTH_TIMEOUT = 15 * 60.0  # seconds the pool may take to reach its prescaled capacity (Clusterman's)
MIN_MAX_UPTIME = 86400.0  # a max_uptime below a day is not acted on (Clusterman's floor)
ENDED_KEPT = 100  # ended migrations remembered, so a resource whose label could not be written is not run again


class Trigger(enum.Enum):
    EVENT = "event"
    MAX_UPTIME = "max_uptime"
    DRIFT = "drift"


class Phase(enum.Enum):
    PRESCALING = "prescaling"
    REPLACING = "replacing"
    DRAINING = "draining"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED, Phase.STOPPED)

    @property
    def status(self) -> Status:
        """The resource's status label for this phase (Clusterman's values: stopped is skipped)."""
        return {Phase.COMPLETED: Status.COMPLETED, Phase.FAILED: Status.FAILED, Phase.STOPPED: Status.SKIPPED}.get(
            self, Status.INPROGRESS
        )


@dataclass(frozen=True)
class Migration:
    """One migration's progress. ``since``: when its phase began; ``batch``: the nodes of the
    current step; ``requeued``: nodes whose drain was given up, chosen again last."""

    key: str  # the NodeMigration's name, or the trigger's
    trigger: Trigger
    phase: Phase
    started_at: float
    since: float
    step: int = 0
    batch: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    selected: int = 0  # nodes it had to replace when it started
    done: int = 0
    failed_drains: int = 0
    rate: int = 1  # nodes per step, fixed when it starts
    prescale: float = 0.0  # weight asked ahead while it runs
    created: float = NO_TIME  # the resource's creation time: an uptime condition is measured then
    reason: str = ""  # why it ended, or what it waits for

    @property
    def left(self) -> int:
        return max(self.selected - self.done, len(self.batch))

    def estimated_end(self, now: float, expected_duration: float) -> float:
        """From the pace so far; before the first node is done, ``expected_duration`` from its start."""
        if not self.done:
            return self.started_at + expected_duration
        return now + (now - self.started_at) / self.done * max(0, self.selected - self.done)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "trigger": self.trigger.value,
            "phase": self.phase.value,
            "started_at": self.started_at,
            "since": self.since,
            "step": self.step,
            "batch": list(self.batch),
            "requeued": list(self.requeued),
            "selected": self.selected,
            "done": self.done,
            "failed_drains": self.failed_drains,
            "rate": self.rate,
            "prescale": self.prescale,
            "created": None if self.created == NO_TIME else self.created,
            "reason": self.reason,
        }

    @staticmethod
    def from_json(data: Any) -> Migration:
        if not isinstance(data, Mapping):
            raise ValueError(f"migration: expected an object, got {data!r}")
        try:
            trigger, phase = Trigger(data.get("trigger")), Phase(data.get("phase"))
        except ValueError as e:
            raise ValueError(f"migration: {e}") from None
        for name in ("key", "reason"):
            if not isinstance(data.get(name), str):
                raise ValueError(f"migration.{name}: expected a string, got {data.get(name)!r}")
        for name in ("started_at", "since", "step", "selected", "done", "failed_drains", "rate", "prescale"):
            if not is_amount(data.get(name)):
                raise ValueError(f"migration.{name}: expected a number >= 0, got {data.get(name)!r}")
        for name in ("batch", "requeued"):
            value = data.get(name)
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise ValueError(f"migration.{name}: expected a list of node ids, got {value!r}")
        created = data.get("created")
        if created is not None and not is_amount(created):
            raise ValueError(f"migration.created: expected a time or null, got {created!r}")
        return Migration(
            data["key"], trigger, phase, float(data["started_at"]), float(data["since"]), int(data["step"]),
            tuple(data["batch"]), tuple(data["requeued"]), int(data["selected"]), int(data["done"]),
            int(data["failed_drains"]), max(1, int(data["rate"])), float(data["prescale"]),
            NO_TIME if created is None else float(created), data["reason"],
        )  # fmt: skip


@dataclass(frozen=True)
class MigrationRecord:
    """What a pool remembers of its migrations (the state store's ``node_migration`` item)."""

    active: Migration | None = None
    # (resource name, phase, reason) of migrations of resources that ended: the reason is written
    # again with the label when the run that ended it could not write them
    ended: tuple[tuple[str, str, str], ...] = ()
    skips: int = 0  # max_uptime starts put off because the pool was not healthy
    skipped_at: float = NO_TIME

    def ended_as(self, name: str) -> Phase | None:
        return next((Phase(p) for n, p, _ in self.ended if n == name), None)

    def ended_because(self, name: str) -> str:
        return next((why for n, _, why in self.ended if n == name), "")

    def as_json(self) -> dict[str, Any]:
        return {
            "active": None if self.active is None else self.active.as_json(),
            "ended": [list(e) for e in self.ended],
            "skips": self.skips,
            "skipped_at": None if self.skipped_at == NO_TIME else self.skipped_at,
        }

    @staticmethod
    def from_json(data: Any) -> MigrationRecord:
        if not isinstance(data, Mapping):
            raise ValueError(f"expected an object, got {data!r}")
        ended = data.get("ended") or []
        if not isinstance(ended, list) or not all(
            isinstance(e, list)
            and len(e) in (2, 3)  # a record written before the reason was kept has none
            and all(isinstance(x, str) for x in e)
            and e[1] in {p.value for p in Phase}
            for e in ended
        ):
            raise ValueError(f"ended: expected a list of [name, phase, reason], got {ended!r}")
        skips, skipped_at = data.get("skips", 0), data.get("skipped_at")
        if not is_amount(skips) or (skipped_at is not None and not is_amount(skipped_at)):
            raise ValueError(f"skips: expected numbers, got {skips!r}, {skipped_at!r}")
        active = data.get("active")
        return MigrationRecord(
            None if active is None else Migration.from_json(active),
            tuple((e[0], e[1], e[2] if len(e) == 3 else "") for e in ended),
            int(skips),
            NO_TIME if skipped_at is None else float(skipped_at),
        )


@dataclass(frozen=True)
class Mark:
    """A resource's status to write: its label, and the fields of its ``status``."""

    name: str
    status: Status
    fields: dict[str, Any]


@dataclass(frozen=True)
class Happened:
    """Something a run did to a migration, for events: ``outcome`` is started, step, completed,
    failed, stopped, skipped or put_off; ``text`` says it in words."""

    key: str
    trigger: Trigger
    outcome: str
    text: str

    def __str__(self) -> str:
        return f"{self.key}: {self.text}"


@dataclass(frozen=True)
class MigrationInputs:
    """What a run knows besides the snapshot. ``requests``: this pool's NodeMigration resources;
    ``selected``: per resource with label selectors, the pool's nodes they select (absent: not
    known this run); ``drifted``: nodes launched from another template or image than their group's;
    ``budget``: nodes that may be disrupted at once; ``attempts_margin``: a migration fails once
    this many times ``expected_duration`` have passed (``batches.node_migration.failed_attemps_margin``)."""

    settings: NodeMigrationConfig
    requests: tuple[MigrationRequest, ...] = ()
    selected: Mapping[str, frozenset[str]] = field(default_factory=dict)
    drifted: frozenset[str] = frozenset()
    drift: bool = False
    budget: int = 1
    attempts_margin: int = 5


@dataclass(frozen=True)
class MigrationPlan:
    """This run's part: ``replace`` nodes to replace ahead (still running), ``drain`` nodes to
    drain, terminate and replace, ``prescale`` weight to ask beyond the decision's, the resources'
    statuses to write, what happened (one line each, for events) and the line for the run."""

    record: MigrationRecord
    replace: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    prescale: float = 0.0
    marks: tuple[Mark, ...] = ()
    happened: tuple[Happened, ...] = ()
    line: str = ""

    @property
    def active(self) -> Migration | None:
        return self.record.active


# --- the pool, as a migration sees it -------------------------------------------------------------


def health(snapshot: PoolSnapshot, settings: NodeMigrationConfig, pods: bool = True) -> str:
    """Why the pool is not healthy ("" when it is), as Clusterman judges it: the capacity asked for
    has joined (or is fulfilled, with joined capacity short by at most the orphan tolerance), and,
    unless ``ignore_pod_health``, no pod waits for room."""
    target = snapshot.target_capacity
    joined = snapshot.member_weights[1]
    fulfilled = snapshot.fulfilled_capacity
    tolerance = settings.orphan_capacity_tollerance
    if not (joined >= target or (fulfilled >= target and joined * (1 + tolerance) >= target)):
        return f"{joined:g} of target {target:g} joined"
    if pods and not settings.ignore_pod_health:
        waiting = sum(1 for t in snapshot.pending if t.asks_for_capacity)
        if waiting:
            return f"{waiting} pod(s) pending"
    return ""


def candidates(snapshot: PoolSnapshot) -> list[Node]:
    """The nodes a migration may choose: ready, in one of the pool's groups."""
    groups = {g.id for g in snapshot.groups if not g.stale}
    return [n for n in snapshot.nodes if n.state is NodeState.READY and n.group_id in groups]


def ordered(nodes: Iterable[Node], precedence: MigrationPrecedence, last: Iterable[str] = ()) -> list[Node]:
    """``strategy.precedence`` order, ties by node id; the nodes ``last`` (requeued) at the end."""
    later = frozenset(last)
    key: Callable[[Node], Any]
    if precedence is MigrationPrecedence.LOWEST_TASK_COUNT:
        key = lambda n: (n.id in later, n.usage.tasks, n.id)  # noqa: E731
    elif precedence is MigrationPrecedence.AZ_NAME_ALPHABETICAL:
        key = lambda n: (n.id in later, n.market, n.id)  # noqa: E731
    else:  # the oldest first; a node of unknown age last
        key = lambda n: (n.id in later, n.launched_at == NO_TIME, n.launched_at, n.id)  # noqa: E731
    return sorted(nodes, key=key)


def step_seconds(settings: NodeMigrationConfig) -> float:
    """How long one step may take: its replacements' longest wait, then a health check."""
    return settings.strategy.bootstrap_timeout + settings.health_check_interval


def due_for_uptime(nodes: Iterable[Node], settings: NodeMigrationConfig, rate: int, now: float) -> list[Node]:
    """The nodes a max_uptime migration must start on now: oldest first, each node's step must
    begin by its deadline (launch + ``max_uptime``) less the steps before it and its own
    (``step_seconds``), so that at ``rate`` nodes a step no node outlives the limit by more than a
    step when many reach it together. Every node up to the last one due is due."""
    limit = settings.trigger.max_uptime
    aged = sorted((n for n in nodes if n.launched_at != NO_TIME), key=lambda n: (n.launched_at, n.id))
    last = -1
    for i, node in enumerate(aged):
        if node.launched_at + limit - step_seconds(settings) * (i // rate + 1) <= now:
            last = i
    return aged[: last + 1]


# --- one run ----------------------------------------------------------------------------------------


def plan(record: MigrationRecord, snapshot: PoolSnapshot, inputs: MigrationInputs, now: float) -> MigrationPlan:
    """This run's part of the pool's migrations (the module's docstring), and the record for the next.
    A resource's status is written only when it would change (``marks``)."""
    s = inputs.settings
    marks: list[Mark] = []
    happened: list[Happened] = []
    requests = {r.name: r for r in inputs.requests}
    ended = list(record.ended)
    active = record.active
    for r in inputs.requests:  # resources that cannot run, or are not this pool's to run
        if active is not None and r.name == active.key:
            continue
        before = record.ended_as(r.name)
        if before is not None:  # ended here, and its label may not have been written
            if r.status is not None and r.status.open:
                fields = {"state": before.status.value, "reason": record.ended_because(r.name)}
                marks.append(Mark(r.name, before.status, {k: v for k, v in fields.items() if v}))
            continue
        why, status = _refusal(r, s)
        if why:
            marks.append(Mark(r.name, status, {"state": status.value, "reason": why, "updatedAt": format_time(now)}))
            ended.append((r.name, (Phase.FAILED if status is Status.FAILED else Phase.STOPPED).value, why))
            happened.append(Happened(r.name, Trigger.EVENT, status.value, f"{status.value}: {why}"))
    record = replace(record, ended=tuple(ended))

    def finished(m: Migration) -> bool:
        """An end is said in the resource's status (for an event) and remembered."""
        nonlocal record
        if not m.phase.ended:
            return False
        if m.trigger is Trigger.EVENT:
            record = replace(record, ended=(*record.ended, (m.key, m.phase.value, m.reason)))
            marks.append(_mark(m, s, now))
        return True

    if active is not None:
        active, events = _advance(active, snapshot, inputs, requests, now)
        happened += events
        if finished(active):
            active = None
    if active is None:
        record, active, events = _start(record, snapshot, inputs, now)
        happened += events
        if active is not None and finished(active):  # nothing to replace after all
            active = None
    if active is not None:
        if active.trigger is Trigger.EVENT:
            marks.append(_mark(active, s, now))
        for r in inputs.requests:  # the others wait their turn, as in Clusterman
            if r.name != active.key and r.status is not None and r.status.open and record.ended_as(r.name) is None:
                why = f"waiting: {active.key} migrates the pool first"
                marks.append(Mark(r.name, Status.PENDING, {"state": Status.PENDING.value, "reason": why}))
    record = replace(record, active=active, ended=record.ended[-ENDED_KEPT:])
    marks = [m for m in marks if m.name not in requests or not requests[m.name].shows(m.status, _compared(m))]
    return _plan(record, marks, happened, s, now)


def _compared(mark: Mark) -> dict[str, Any]:
    """The fields that say something new: not the times written each run."""
    return {k: v for k, v in mark.fields.items() if k not in ("updatedAt", "estimatedEnd", "startedAt")}


def settle(record: MigrationRecord, gone: Iterable[str], given_up: Mapping[str, str]) -> MigrationRecord:
    """After the run acted: the batch's nodes terminated are done, and each drain given up counts
    against ``allowed_failed_drains`` (its node is queued again, last)."""
    active = record.active
    if active is None:
        return record
    gone = set(gone)
    finished = [n for n in active.batch if n in gone]
    failed = [n for n in active.batch if n in given_up]
    if not finished and not failed:
        return record
    active = replace(
        active,
        batch=tuple(n for n in active.batch if n not in finished and n not in failed),
        done=active.done + len(finished),
        failed_drains=active.failed_drains + len(failed),
        requeued=tuple(dict.fromkeys((*active.requeued, *failed))),
    )
    return replace(record, active=active)


def _refusal(r: MigrationRequest, s: NodeMigrationConfig) -> tuple[str, Status]:
    """Why a resource of this pool is not run ("" when it may be), and the status it then gets."""
    if r.status is Status.STOP:
        return "stopped before it started", Status.SKIPPED
    if r.status is not None and not r.status.open:
        return "", Status.PENDING  # ended earlier (by another process, or Clusterman)
    if r.refused:
        return f"refused: {r.refused}", Status.FAILED
    if not s.enabled:
        return "the pool file has no node_migration block", Status.SKIPPED
    if not s.trigger.event:
        return (
            "the pool does not take NodeMigration resources (node_migration.trigger.event is not true)",
            Status.SKIPPED,
        )
    return "", Status.PENDING


def _start(
    record: MigrationRecord, snapshot: PoolSnapshot, inputs: MigrationInputs, now: float
) -> tuple[MigrationRecord, Migration | None, list[Happened]]:
    """The next migration to run, if any has work: the oldest open resource, else max_uptime, else drift."""
    s = inputs.settings
    if not s.enabled:
        return record, None, []
    nodes = candidates(snapshot)
    rate = max(1, s.strategy.rate.of(len(nodes)))
    prescale = s.strategy.prescaling.of(len(nodes)) * _mean_weight(nodes)
    phase = Phase.PRESCALING if prescale > 0 else Phase.REPLACING
    events: list[Happened] = []

    def begin(key: str, trigger: Trigger, selected: int, what: str, created: float = NO_TIME) -> Migration:
        m = Migration(key, trigger, phase, now, now, selected=selected, rate=rate, prescale=prescale, created=created)
        events.append(Happened(key, trigger, "started", f"started: {what}"))
        return m if phase is Phase.PRESCALING else _next_step(m, snapshot, inputs, now)

    openings = sorted(
        (r for r in inputs.requests if r.status is not None and r.status.open and not r.refused),
        key=lambda r: (r.created, r.name),
    )
    for r in openings:
        if record.ended_as(r.name) is None and s.trigger.event:
            count = len(_chosen(Trigger.EVENT, r, nodes, inputs, rate, now) or ())
            created = r.created if r.created != NO_TIME else now
            what = f"{r.spec_line()}: {count} node(s) to replace"
            return record, begin(r.name, Trigger.EVENT, count, what, created), events
    if math.isfinite(s.trigger.max_uptime) and s.trigger.max_uptime >= MIN_MAX_UPTIME:
        due = due_for_uptime(nodes, s, rate, now)
        if due:
            unhealthy = health(snapshot, s)
            limit = s.max_uptime_worker_skips
            if unhealthy and (limit == 0 or record.skips < limit):
                if record.skipped_at == NO_TIME or now - record.skipped_at >= s.health_check_interval:
                    record = replace(record, skips=record.skips + 1, skipped_at=now)
                    text = f"{len(due)} node(s) due, put off: the pool is not healthy ({unhealthy})"
                    events.append(Happened(Trigger.MAX_UPTIME.value, Trigger.MAX_UPTIME, "put_off", text))
                return record, None, events
            record = replace(record, skips=0, skipped_at=NO_TIME)
            what = f"{len(due)} node(s) older than they may be when reached"
            return record, begin(Trigger.MAX_UPTIME.value, Trigger.MAX_UPTIME, len(due), what), events
    drifted = [n for n in nodes if n.id in inputs.drifted] if inputs.drift else []
    if drifted:
        what = f"{len(drifted)} node(s) launched from another template or image"
        return record, begin(Trigger.DRIFT.value, Trigger.DRIFT, len(drifted), what), events
    return record, None, events


def _advance(
    m: Migration,
    snapshot: PoolSnapshot,
    inputs: MigrationInputs,
    requests: Mapping[str, MigrationRequest],
    now: float,
) -> tuple[Migration, list[Happened]]:
    s = inputs.settings
    if m.trigger is Trigger.EVENT:
        r = requests.get(m.key)
        if r is None:
            return _end(m, Phase.STOPPED, "its NodeMigration was deleted", now)
        if r.status is Status.STOP:
            return _end(m, Phase.STOPPED, "stopped by migrate-stop", now)
        if not s.trigger.event or not s.enabled:
            return _end(m, Phase.STOPPED, "the pool no longer takes NodeMigration resources", now)
    elif not s.enabled:
        return _end(m, Phase.STOPPED, "the pool file no longer has a node_migration block", now)
    limit = inputs.attempts_margin * s.expected_duration
    if now - m.started_at > limit:
        why = f"not done within {inputs.attempts_margin} × expected_duration ({format_duration(limit)})"
        return _end(m, Phase.FAILED, why, now)
    present = {n.id for n in snapshot.nodes if n.state is not NodeState.ORPHAN}
    gone = [n for n in m.batch if n not in present]
    if gone:  # terminated (and settled or not: a restart finds them gone all the same)
        m = replace(m, batch=tuple(n for n in m.batch if n in present), done=m.done + len(gone))
    if m.failed_drains > s.strategy.allowed_failed_drains:
        why = f"{m.failed_drains} drains failed > allowed_failed_drains {s.strategy.allowed_failed_drains}"
        return _end(m, Phase.FAILED, why, now)
    if m.phase is Phase.PRESCALING:
        unhealthy = health(snapshot, s, pods=False)
        if not unhealthy:
            return _next_step(replace(m, reason=""), snapshot, inputs, now), []
        if now - m.since > INITIAL_HEALTH_TIMEOUT:
            why = f"the pool did not reach its prescaled capacity within {format_duration(INITIAL_HEALTH_TIMEOUT)}"
            return _end(m, Phase.FAILED, f"{why} ({unhealthy})", now)
        return replace(m, reason=f"waiting for the prescaled capacity: {unhealthy}"), []
    if m.phase is Phase.REPLACING:
        if not m.batch:
            return _next_step(m, snapshot, inputs, now), []
        unhealthy = health(snapshot, s)
        waited = now - m.since
        if waited >= s.strategy.bootstrap_wait and not unhealthy:
            text = f"step {m.step}: replacements ready, draining {len(m.batch)} node(s)"
            return replace(m, phase=Phase.DRAINING, since=now, reason=""), [Happened(m.key, m.trigger, "step", text)]
        if waited > s.strategy.bootstrap_timeout:
            why = f"replacements not ready within bootstrap_timeout {format_duration(s.strategy.bootstrap_timeout)}"
            return _end(m, Phase.FAILED, f"{why} ({unhealthy}); the step's nodes are left as they were", now)
        return replace(m, reason=f"waiting for replacements: {unhealthy or 'bootstrap_wait'}"), []
    if m.batch:  # draining
        return replace(m, reason=""), []
    return _next_step(m, snapshot, inputs, now), []


def _next_step(m: Migration, snapshot: PoolSnapshot, inputs: MigrationInputs, now: float) -> Migration:
    """Choose the next batch, or end: nothing left to replace. Waits when the budget has no room."""
    s = inputs.settings
    nodes = candidates(snapshot)
    request = None
    if m.trigger is Trigger.EVENT:
        request = next((r for r in inputs.requests if r.name == m.key), None)
    chosen = _chosen(m.trigger, request, nodes, inputs, m.rate, now, m.created)
    if chosen is None:
        return replace(m, reason="waiting for the nodes its label selectors select")
    if not chosen:
        return replace(m, phase=Phase.COMPLETED, since=now, batch=(), reason=_completed(m, snapshot, request))
    waiting = any(r.status is not None and r.status.open and not r.refused for r in inputs.requests)
    if m.trigger is not Trigger.EVENT and waiting and s.trigger.event:  # a standing trigger yields between steps
        return replace(m, phase=Phase.COMPLETED, since=now, batch=(), reason="yields to a NodeMigration")
    tainted = sum(1 for n in snapshot.nodes if n.state is NodeState.TAINTED)
    room = inputs.budget - tainted
    if room <= 0:
        return replace(m, batch=(), reason=f"waiting for room in the disruption budget ({tainted} of {inputs.budget})")
    batch = tuple(n.id for n in ordered(chosen, s.strategy.precedence, m.requeued)[: min(m.rate, room)])
    return replace(
        m,
        phase=Phase.REPLACING,
        since=now,
        step=m.step + 1,
        batch=batch,
        requeued=tuple(n for n in m.requeued if n not in batch),
        selected=max(m.selected, m.done + len(chosen)),
        reason="",
    )


def _chosen(
    trigger: Trigger,
    request: MigrationRequest | None,
    nodes: list[Node],
    inputs: MigrationInputs,
    rate: int,
    now: float,
    created: float = NO_TIME,
) -> list[Node] | None:
    """The nodes a migration has yet to replace (None: not known this run)."""
    if trigger is Trigger.DRIFT:
        return [n for n in nodes if n.id in inputs.drifted]
    if trigger is Trigger.MAX_UPTIME:
        return due_for_uptime(nodes, inputs.settings, rate, now)
    assert request is not None and request.condition is not None
    if request.selectors:
        selected = inputs.selected.get(request.name)
        if selected is None:
            return None
        nodes = [n for n in nodes if n.id in selected]
    at = created if created != NO_TIME else (request.created if request.created != NO_TIME else now)
    return [n for n in nodes if request.condition.holds(n, at) is False]


def _completed(m: Migration, snapshot: PoolSnapshot, request: MigrationRequest | None) -> str:
    if request is None or request.condition is None:
        return ""
    unread = [n for n in candidates(snapshot) if request.condition.holds(n, m.created) is None]
    return (
        f"{len(unread)} node(s) whose {request.condition.trait.value} is not reported left as they are"
        if unread
        else ""
    )


def _end(m: Migration, phase: Phase, why: str, now: float) -> tuple[Migration, list[Happened]]:
    ended = replace(m, phase=phase, since=now, reason=why)
    return ended, [Happened(m.key, m.trigger, phase.value, f"{phase.value}: {why}")]


def _mean_weight(nodes: list[Node]) -> float:
    return math.fsum(n.weight for n in nodes) / len(nodes) if nodes else 1.0


def _mark(m: Migration, s: NodeMigrationConfig, now: float) -> Mark:
    fields: dict[str, Any] = {
        "state": m.phase.status.value,
        "reason": m.reason,
        "step": _step_line(m),
        "nodesSelected": m.selected,
        "nodesDone": m.done,
        "nodesLeft": 0 if m.phase is Phase.COMPLETED else m.left,
        "failedDrains": m.failed_drains,
        "startedAt": format_time(m.started_at),
        "updatedAt": format_time(now),
    }
    if not m.phase.ended:
        fields["estimatedEnd"] = format_time(m.estimated_end(now, s.expected_duration))
    return Mark(m.key, m.phase.status, fields)


def _step_line(m: Migration) -> str:
    if m.phase is Phase.PRESCALING:
        return "prescaling"
    if m.phase in (Phase.REPLACING, Phase.DRAINING):
        return f"step {m.step}: {m.phase.value} {len(m.batch)} node(s)"
    return m.phase.value


def _plan(
    record: MigrationRecord, marks: list[Mark], happened: list[Happened], s: NodeMigrationConfig, now: float
) -> MigrationPlan:
    m = record.active
    if m is None:
        return MigrationPlan(record, marks=tuple(marks), happened=tuple(happened))
    replace_ = m.batch if m.phase is Phase.REPLACING else ()
    drain = m.batch if m.phase is Phase.DRAINING else ()
    end = m.estimated_end(now, s.expected_duration)
    late = " (later than expected_duration)" if end > m.started_at + s.expected_duration else ""
    waits = f"; {m.reason}" if m.reason else ""
    line = (
        f"migration {m.key}: {_step_line(m)}, {m.done} done, {m.left} left, "
        f"end in {format_duration(max(0.0, end - now))}{late}{waits}"
    )
    return MigrationPlan(record, replace_, drain, m.prescale, tuple(marks), tuple(happened), line)

"""One call per thing the autoscaler does: records the event and updates the metrics together.

The autoscaler loop calls these with plain values; nothing here blocks (events go through the
publisher's bounded hand-off) and nothing reads a clock but the injected ``clock_ns``, so the
simulator can pass its own time. Which event each call records is listed in docs/events.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Final

from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.events.event import NO_RESOURCE
from clusterman.events.event import ChangeDetail as D
from clusterman.events.event import ChangeType
from clusterman.events.event import Event
from clusterman.events.event import EventType
from clusterman.events.event import Resource
from clusterman.events.event import resource
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.exporter import ErrorSource
from clusterman.events.exporter import NodeAction
from clusterman.events.publisher import EventPublisher

_NODE_DETAIL: Final = {
    NodeAction.JOIN: (D.NODE_JOIN, ChangeType.ADD),
    NodeAction.UNTAINT: (D.NODE_UNTAINT, ChangeType.SET),
    NodeAction.TAINT: (D.NODE_TAINT, ChangeType.SET),
    NodeAction.DRAIN: (D.NODE_DRAIN, ChangeType.SET),
    NodeAction.TERMINATE: (D.NODE_TERMINATE, ChangeType.REMOVE),
    NodeAction.ORPHAN_CLEANUP: (D.NODE_ORPHAN, ChangeType.REMOVE),
    NodeAction.CONSOLIDATE: (D.NODE_CONSOLIDATE, ChangeType.SET),
    NodeAction.NOTICE: (D.NODE_NOTICE, ChangeType.SET),
    NodeAction.GIVE_UP: (D.NODE_DRAIN_GIVEN_UP, ChangeType.SET),
}
_ERROR_DETAIL: Final = {
    ErrorSource.CLOUD: D.ERROR_CLOUD,
    ErrorSource.SCHEDULER: D.ERROR_SCHEDULER,
    ErrorSource.INTERNAL: D.ERROR_INTERNAL,
}
_DECISION_DETAILS: Final = frozenset(d for d in D if d.event_type is EventType.DECISION)

Amounts = ResourceRequest | Resources | Mapping[str, float]


class Recorder:
    def __init__(
        self,
        publisher: EventPublisher,
        metrics: AutoscalerMetrics,
        pool: str,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.pool = pool
        self._clock_ns = clock_ns

    def _publish(
        self,
        type_: EventType,
        change: ChangeType,
        detail: D,
        object_id: str,
        reference_id: str = "",
        amounts: Resource = NO_RESOURCE,
        message: str = "",
    ) -> None:
        self.publisher.publish(
            Event(type_, change, detail, self._clock_ns(), object_id, reference_id, amounts, message)
        )

    # --- signals ---------------------------------------------------------------------------

    def signal_evaluated(self, app: str, signal: str, request: Amounts, seconds: float) -> None:
        """A signal answered ``request`` (resources it has no opinion on are left out)."""
        self._publish(
            EventType.SIGNAL,
            ChangeType.SET,
            D.SIGNAL_REQUEST,
            app,
            signal,
            _resource(request),
            f"answered in {seconds * 1000:.0f} ms",
        )
        self.metrics.observe_signal(app, seconds, ok=True)

    def signal_failed(
        self, app: str, signal: str, error: str, seconds: float, fallback: str, fallback_request: Amounts
    ) -> None:
        """A signal failed; ``fallback`` names what was used instead (e.g. "previous request")."""
        self._publish(EventType.SIGNAL, ChangeType.NONE, D.SIGNAL_FAILED, app, signal, message=error)
        amounts = _resource(fallback_request)
        self._publish(
            EventType.SIGNAL,
            ChangeType.SET if amounts else ChangeType.NONE,
            D.SIGNAL_FALLBACK,
            app,
            fallback,
            amounts,
            f"using {fallback} instead of {signal}",
        )
        self.metrics.observe_signal(app, seconds, ok=False)

    # --- the decision and its execution ----------------------------------------------------

    def decision(
        self,
        reason: D,
        delta: float,
        *,
        target: float,
        demand: Amounts,
        capacity: Amounts,
        utilisation: Mapping[str, float],
        setpoint: float,
        explanation: str,
    ) -> None:
        """The run's decision: ``delta`` capacity (weight units) added or removed, and why.

        ``reason`` is one of the DECISION_* details; ``utilisation`` is 0..1 per resource.
        """
        if reason not in _DECISION_DETAILS:
            raise ValueError(f"decision reason must be a DECISION_* detail, got {reason.name}")
        change = ChangeType.ADD if delta > 0 else ChangeType.REMOVE if delta < 0 else ChangeType.NONE
        amounts = resource(capacity=abs(delta)) if delta else NO_RESOURCE
        shown = " ".join(f"{name}={ratio:.1%}" for name, ratio in utilisation.items())
        message = f"utilisation {shown or 'unknown'} (setpoint {setpoint:.0%}), target {target:g}: {explanation}"
        self._publish(EventType.DECISION, change, reason, self.pool, "", amounts, message)
        self.metrics.observe_decision(
            demand=_plain(demand),
            capacity=_plain(capacity),
            utilisation=utilisation,
            setpoint=setpoint,
            delta=delta,
            target=target,
        )

    def group_target(self, group: str, old: float, new: float, reason: str = "") -> None:
        """A resource group's target capacity was set from ``old`` to ``new`` (weight units)."""
        message = f"target {old:g} -> {new:g}" + (f": {reason}" if reason else "")
        self._publish(
            EventType.GROUP, ChangeType.SET, D.GROUP_TARGET, group, self.pool, resource(capacity=new), message
        )

    def node(
        self,
        action: NodeAction,
        node_id: str,
        group: str,
        resources: Amounts | Resource = NO_RESOURCE,
        reason: str = "",
        join_seconds: float | None = None,
    ) -> None:
        """Something was done to a node; ``resources`` is the node's size (resources.py units)."""
        detail, change = _NODE_DETAIL[action]
        amounts = _resource(resources)
        if not amounts and change is ChangeType.SET:
            change = ChangeType.NONE
        if not amounts and change in (ChangeType.ADD, ChangeType.REMOVE):
            amounts = resource(nodes=1)
        self._publish(EventType.NODE, change, detail, node_id, group, amounts, reason)
        self.metrics.observe_node_action(action, join_seconds)

    def consolidated(self, choice: str, node_id: str, group: str, resources: Amounts, explanation: str) -> None:
        """Consolidation drains a node (``choice``: remove or keep); ``explanation`` says where its
        pods are expected to go, the free places before and after, and the saving."""
        detail, change = _NODE_DETAIL[NodeAction.CONSOLIDATE]
        amounts = _resource(resources)
        self._publish(
            EventType.NODE, change if amounts else ChangeType.NONE, detail, node_id, group, amounts, explanation
        )
        self.metrics.observe_consolidation(choice)

    def drain(self, reason: str, outcome: str, pods_lost: int = 0) -> None:
        """A drain started or ended (``outcome``: started, done, given_up, forced), and the pods a
        node took with it when it went before its drain finished."""
        self.metrics.observe_drain(reason, outcome, pods_lost)

    def notice(self, reason: str, outcome: str) -> None:
        """A notice was read: ``handled`` (its node is in the pool) or ``unknown``."""
        self.metrics.observe_notice(reason, outcome)

    def evicted(self, pods: int) -> None:
        """Drains evicted ``pods`` pods this run (each one restarts elsewhere)."""
        if pods:
            self.metrics.observe_evictions(pods)

    # --- safety mechanisms and the pool ----------------------------------------------------

    def lock_taken(self, seconds: float, reason: str) -> None:
        self._publish(EventType.LOCK, ChangeType.NONE, D.LOCK_TAKEN, self.pool, message=f"for {seconds:g} s: {reason}")
        self.metrics.set_scale_lock(True, seconds)

    def lock_released(self, reason: str = "cool-down over") -> None:
        self._publish(EventType.LOCK, ChangeType.NONE, D.LOCK_RELEASED, self.pool, message=reason)
        self.metrics.set_scale_lock(False)

    def breaker_opened(self, failures: int, reason: str) -> None:
        message = f"after {failures} failed scale-up(s): {reason}"
        self._publish(EventType.BREAKER, ChangeType.NONE, D.BREAKER_OPEN, self.pool, message=message)
        self.metrics.set_breaker(True, failures)

    def breaker_closed(self, reason: str) -> None:
        self._publish(EventType.BREAKER, ChangeType.NONE, D.BREAKER_CLOSED, self.pool, message=reason)
        self.metrics.set_breaker(False, 0)

    def paused(self, reason: str) -> None:
        self._publish(EventType.POOL, ChangeType.NONE, D.POOL_PAUSE, self.pool, message=reason)
        self.metrics.set_paused(True)

    def migration(self, key: str, trigger: str, outcome: str, message: str) -> None:
        """A node migration (``key``: its NodeMigration, or the trigger) started, moved on to its
        next step, or ended (``outcome``: started, step, completed, failed, stopped, put_off)."""
        self._publish(EventType.POOL, ChangeType.NONE, D.POOL_MIGRATION, self.pool, key, message=message)
        self.metrics.observe_migration(trigger, outcome)

    def migration_progress(self, trigger: str, replaced: int, left: int) -> None:
        """Nodes a migration replaced this run, and how many it has left (0 when none runs)."""
        self.metrics.observe_migration_nodes(trigger, replaced, left)

    def resumed(self, reason: str) -> None:
        self._publish(EventType.POOL, ChangeType.NONE, D.POOL_RESUME, self.pool, message=reason)
        self.metrics.set_paused(False)

    def config_reloaded(self, path: str, summary: str = "") -> None:
        self._publish(EventType.CONFIG, ChangeType.NONE, D.CONFIG_RELOAD, path, message=summary)
        self.metrics.observe_config_reload(ok=True)

    def config_rejected(self, path: str, error: str) -> None:
        """A changed file was invalid: ``error`` names the key; the previous config stays."""
        self._publish(EventType.CONFIG, ChangeType.NONE, D.CONFIG_REJECTED, path, message=error)
        self.metrics.observe_config_reload(ok=False)

    def run_took(self, seconds: float) -> None:
        self.metrics.observe_run(seconds)

    def overrun(self, seconds: float, budget: float, what: str) -> None:
        """A run took ``seconds`` > its ``budget``; ``what`` says what it did (never act on older inputs)."""
        message = f"the run took {seconds:.1f} s > budget {budget:g} s: {what}"
        self._publish(EventType.DECISION, ChangeType.NONE, D.DECISION_OVERRUN, self.pool, message=message)
        self.metrics.observe_overrun()

    def error(self, source: ErrorSource, object_id: str, message: str) -> None:
        """A call to the cloud or the scheduler failed (or clusterman hit a bug and went on)."""
        self._publish(EventType.ERROR, ChangeType.NONE, _ERROR_DETAIL[source], object_id, message=message)
        self.metrics.observe_error(source)


def _plain(amounts: Amounts) -> dict[str, float]:
    if isinstance(amounts, ResourceRequest):
        return amounts.opinions()
    return dict(amounts.items())


def _resource(amounts: Amounts | Resource) -> Resource:
    if isinstance(amounts, tuple):
        return amounts
    return resource(_plain(amounts))

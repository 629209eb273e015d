"""The autoscaler's Prometheus metrics, set through a small typed API of plain values.

Coverage follows Escalator's metric set (REFERENCE.md section 4): runs, nodes by state, tasks,
demand / capacity / utilisation per resource, scale delta, scale lock, breaker, taint and
untaint actions, node join lag, resource-group min / max / target / fulfilled capacity; plus
what only clusterman has: signal latency and failures per app, pause, config reloads, and the
event history's own health (stored, dropped, streams cut).

Every series carries ``cluster`` and ``pool`` (``<pool>.<scheduler>``, as in the metrics
store) so one Prometheus can scrape many autoscalers. Each instance owns its registry: no
process-global state, so tests and the simulator can run several side by side.

Units: resource amounts in ``clusterman.core.resources`` units (cpus in shares, mem and disk in MB,
gpus in devices), capacity in resource-group weight units, ratios in 0..1, times in seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client import Counter
from prometheus_client import Gauge
from prometheus_client import Histogram
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from clusterman.core.model import NodeState
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.events.publisher import EventPublisher

NAMESPACE: Final = "clusterman"
SIGNAL_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
JOIN_BUCKETS: Final = (15.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)
RUN_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class NodeAction(enum.Enum):
    JOIN = "join"
    UNTAINT = "untaint"
    TAINT = "taint"
    DRAIN = "drain"
    TERMINATE = "terminate"
    ORPHAN_CLEANUP = "orphan_cleanup"
    CONSOLIDATE = "consolidate"
    NOTICE = "notice"
    GIVE_UP = "give_up"


class ErrorSource(enum.Enum):
    CLOUD = "cloud"
    SCHEDULER = "scheduler"
    INTERNAL = "internal"


Amounts = Mapping[str, float] | Resources


class AutoscalerMetrics:
    def __init__(self, cluster: str, pool: str, events: EventPublisher | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.cluster = cluster
        self.pool = pool
        base = ("cluster", "pool")
        r = self.registry

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, (*base, *labels), namespace=NAMESPACE, registry=r)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, (*base, *labels), namespace=NAMESPACE, registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
            return Histogram(name, doc, (*base, *labels), namespace=NAMESPACE, registry=r, buckets=buckets)

        self._runs = counter("runs", "Autoscaler runs completed")
        self._run_seconds = histogram("run_duration_seconds", "Time one autoscaler run took", RUN_BUCKETS)
        self._overruns = counter("run_overruns", "Runs that took longer than their budget")
        self._lease = gauge("lease_held", "1 while this autoscaler holds the pool's lease (may act)")
        self._demand = gauge("demand", "Resources the signals ask for, in resources.py units", "resource")
        self._capacity = gauge("capacity", "Resources of the pool's joined, untainted nodes", "resource")
        self._utilisation = gauge("utilisation_ratio", "Demand / capacity per resource (0..1)", "resource")
        self._setpoint = gauge("setpoint_ratio", "The utilisation the autoscaler aims at (0..1)")
        self._delta = gauge(
            "scale_delta", "Change of the pool's target by the last decision (+ added, - removed), weight units"
        )
        self._target = gauge("target_capacity", "The pool's total target capacity, weight units")
        self._group_target = gauge("group_target_capacity", "Target capacity per resource group", "group")
        self._group_fulfilled = gauge("group_fulfilled_capacity", "Capacity a resource group has running", "group")
        self._group_min = gauge("group_min_capacity", "A resource group's minimum capacity", "group")
        self._group_max = gauge("group_max_capacity", "A resource group's maximum capacity", "group")
        self._nodes = gauge("nodes", "Nodes by state", "state")
        self._tasks = gauge("tasks", "Tasks (pods) by state", "state")
        self._node_actions = counter("node_actions", "Actions taken on nodes", "action")
        self._join_seconds = histogram("node_join_seconds", "Launch to scheduler registration", JOIN_BUCKETS)
        self._evictions = counter("evictions", "Pods evicted by drains (scale-down and consolidation)")
        self._notices = counter(
            "notices", "Notices that a node must go, by reason and outcome (handled, unknown)", "reason", "outcome"
        )
        self._drains = counter(
            "drains", "Drains by reason and how they ended (started, done, given_up, forced)", "reason", "outcome"
        )
        self._pods_lost = counter("pods_lost", "Pods still on a node that went before its drain finished", "reason")
        self._migrations = counter(
            "node_migrations",
            "Node migrations by trigger (event, max_uptime, drift) and what happened (started, completed, ...)",
            "trigger",
            "outcome",
        )
        self._migrated = counter("node_migration_nodes", "Nodes a node migration replaced, by trigger", "trigger")
        self._migration_left = gauge("node_migration_nodes_left", "Nodes the running node migration has left")
        self._consolidated = counter(
            "consolidated_nodes", "Nodes consolidation drained, by what for (remove, keep)", "choice"
        )
        self._lock = gauge("scale_lock", "1 while the scale lock holds scale-down back")
        self._lock_left = gauge("scale_lock_remaining_seconds", "Seconds until the scale lock is released")
        self._breaker = gauge("breaker_open", "1 while the scale-up breaker is open")
        self._breaker_failures = gauge("breaker_failures", "Scale-ups in a row that did not grow the pool")
        self._paused = gauge("paused", "1 while autoscaling is paused")
        self._signal_seconds = histogram(
            "signal_latency_seconds", "Time a signal took to answer", SIGNAL_BUCKETS, "app"
        )
        self._signal_failures = counter("signal_failures", "Signal evaluations that failed", "app")
        self._errors = counter("errors", "Errors from the cloud, the scheduler or clusterman", "source")
        self._reloads = counter("config_reloads", "Configuration reloads by result (ok, rejected)", "result")
        self._fallbacks = gauge(
            "signal_version_fallback", "1 for a signal version run from its installed copy: S3 gave none", "version"
        )
        self._versions_disk = gauge("signal_versions_disk_bytes", "Disk the fetched signal versions take")
        self._unwritable = gauge("tree_file_unwritable", "1 while a file of the tree cannot be written", "file")
        self._groups: set[str] = set()
        self._fallback_versions: set[str] = set()
        self._unwritable_files: set[str] = set()
        if events is not None:
            r.register(_EventStats(events, cluster, pool))

    def _l(self, *values: str) -> tuple[str, ...]:
        return (self.cluster, self.pool, *values)

    # --- the typed API the autoscaler loop calls ------------------------------------------

    def observe_run(self, seconds: float) -> None:
        self._runs.labels(*self._l()).inc()
        self._run_seconds.labels(*self._l()).observe(seconds)

    def observe_overrun(self) -> None:
        self._overruns.labels(*self._l()).inc()

    def set_lease(self, held: bool) -> None:
        self._lease.labels(*self._l()).set(1 if held else 0)

    def observe_decision(
        self,
        *,
        demand: Amounts,
        capacity: Amounts,
        utilisation: Mapping[str, float],
        setpoint: float,
        delta: float,
        target: float,
    ) -> None:
        """One decision: resources in resources.py units, ratios in 0..1, capacity in weight units.

        A resource missing from a mapping has no series this time (no data, not zero).
        """
        self._set_per_resource(self._demand, demand)
        self._set_per_resource(self._capacity, capacity)
        self._set_per_resource(self._utilisation, utilisation)
        self._setpoint.labels(*self._l()).set(setpoint)
        self._delta.labels(*self._l()).set(delta)
        self._target.labels(*self._l()).set(target)

    def observe_group(self, group: str, *, target: float, fulfilled: float, minimum: float, maximum: float) -> None:
        for gauge, value in (
            (self._group_target, target),
            (self._group_fulfilled, fulfilled),
            (self._group_min, minimum),
            (self._group_max, maximum),
        ):
            gauge.labels(*self._l(group)).set(value)
        self._groups.add(group)

    def forget_group(self, group: str) -> None:
        """A group left the pool: its series go instead of freezing at their last value."""
        if group in self._groups:
            for gauge in (self._group_target, self._group_fulfilled, self._group_min, self._group_max):
                gauge.remove(*self._l(group))
            self._groups.discard(group)

    def observe_nodes(self, counts: Mapping[NodeState, int]) -> None:
        """Node counts by state; a state not given is 0 (every state is always exported)."""
        for state in NodeState:
            self._nodes.labels(*self._l(state.value)).set(counts.get(state, 0))

    def observe_tasks(self, *, running: int, pending: int) -> None:
        self._tasks.labels(*self._l("running")).set(running)
        self._tasks.labels(*self._l("pending")).set(pending)

    def observe_node_action(self, action: NodeAction, join_seconds: float | None = None) -> None:
        self._node_actions.labels(*self._l(action.value)).inc()
        if action is NodeAction.JOIN and join_seconds is not None:
            self._join_seconds.labels(*self._l()).observe(join_seconds)

    def observe_evictions(self, pods: int) -> None:
        self._evictions.labels(*self._l()).inc(pods)

    def observe_notice(self, reason: str, outcome: str) -> None:
        self._notices.labels(*self._l(reason, outcome)).inc()

    def observe_drain(self, reason: str, outcome: str, pods_lost: int = 0) -> None:
        self._drains.labels(*self._l(reason, outcome)).inc()
        if pods_lost:
            self._pods_lost.labels(*self._l(reason)).inc(pods_lost)

    def observe_migration(self, trigger: str, outcome: str) -> None:
        self._migrations.labels(*self._l(trigger, outcome)).inc()

    def observe_migration_nodes(self, trigger: str, replaced: int, left: int) -> None:
        if replaced:
            self._migrated.labels(*self._l(trigger)).inc(replaced)
        self._migration_left.labels(*self._l()).set(left)

    def observe_consolidation(self, choice: str) -> None:
        self._consolidated.labels(*self._l(choice)).inc()

    def observe_signal(self, app: str, seconds: float, ok: bool) -> None:
        self._signal_seconds.labels(*self._l(app)).observe(seconds)
        failures = self._signal_failures.labels(*self._l(app))
        if not ok:
            failures.inc()

    def set_scale_lock(self, held: bool, remaining_seconds: float = 0.0) -> None:
        self._lock.labels(*self._l()).set(1 if held else 0)
        self._lock_left.labels(*self._l()).set(remaining_seconds if held else 0.0)

    def set_breaker(self, is_open: bool, failures: int) -> None:
        self._breaker.labels(*self._l()).set(1 if is_open else 0)
        self._breaker_failures.labels(*self._l()).set(failures)

    def set_paused(self, paused: bool) -> None:
        self._paused.labels(*self._l()).set(1 if paused else 0)

    def observe_error(self, source: ErrorSource) -> None:
        self._errors.labels(*self._l(source.value)).inc()

    def observe_config_reload(self, ok: bool) -> None:
        self._reloads.labels(*self._l("ok" if ok else "rejected")).inc()

    def set_signal_fallbacks(self, versions: list[str]) -> None:
        """The versions the bootstrap runs from their installed copy (S3 gave no verified one); a
        version S3 confirmed since goes back to 0."""
        for version in self._fallback_versions - set(versions):
            self._fallbacks.labels(*self._l(version)).set(0)
        for version in versions:
            self._fallbacks.labels(*self._l(version)).set(1)
        self._fallback_versions |= set(versions)

    def set_unwritable(self, files: Mapping[str, str]) -> None:
        """The files of the tree (the autoscaler's heartbeat, the bootstrap's) that cannot be written
        now (file -> why); one that can again goes back to 0."""
        for name in self._unwritable_files - set(files):
            self._unwritable.labels(*self._l(name)).set(0)
        for name in files:
            self._unwritable.labels(*self._l(name)).set(1)
        self._unwritable_files |= set(files)

    def set_signal_versions_disk(self, size: int) -> None:
        """Bytes the bootstrap's signals directory takes, as it last measured them."""
        self._versions_disk.labels(*self._l()).set(size)

    def _set_per_resource(self, gauge: Gauge, amounts: Amounts) -> None:
        values = dict(amounts.items())
        unknown = set(values) - set(RESOURCE_NAMES)
        if unknown:
            raise ValueError(f"unknown resource(s) {sorted(unknown)}: known are {', '.join(RESOURCE_NAMES)}")
        for name in RESOURCE_NAMES:
            if name in values:
                gauge.labels(*self._l(name)).set(values[name])
            else:
                gauge.remove(*self._l(name))  # no data this time: no series, not a stale value

    def exposition(self) -> bytes:
        """The registry in Prometheus text format (what ``/metrics`` serves)."""
        return generate_latest(self.registry)


class _EventStats(Collector):
    """Read the event history's counters at scrape time: nothing to update on the hot path."""

    def __init__(self, events: EventPublisher, cluster: str, pool: str) -> None:
        self._events = events
        self._labels = [cluster, pool]

    def collect(self) -> Iterator[Metric]:
        names = ["cluster", "pool"]
        ring = self._events.ring

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"{NAMESPACE}_{name}", doc, labels=names)
            family.add_metric(self._labels, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(f"{NAMESPACE}_{name}", doc, labels=names)
            family.add_metric(self._labels, value)
            return family

        yield gauge("events_stored", "Events held in the history ring", len(ring))
        yield gauge("events_capacity", "Capacity of the history ring", ring.capacity)
        yield counter("events_published", "Events stored since the process started", ring.highest_id + 1)
        yield counter("events_dropped", "Events lost because the hand-off queue was full", self._events.dropped)
        yield gauge("event_streams", "Live event streams being served", self._events.streams)
        yield counter("event_streams_cut", "Event streams ended for falling behind", self._events.streams_cut)

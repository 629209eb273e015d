"""The typed shape of srv-configs: the main ``clusterman.yaml`` and one file per pool.

Key names are Clusterman's, so existing srv-configs load unchanged. Keys Clusterman reads for
features we do not have (``sensu_config``, ``module_config``, ...) are listed in ``IGNORED_KEYS``
of their block: accepted and logged, never silently mistaken for a typo of ours.
"""

from __future__ import annotations

import enum
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from typing import ClassVar

from clusterman.core.config_schema import Check
from clusterman.core.config_schema import field
from clusterman.core.config_schema import fraction
from clusterman.core.config_schema import non_negative
from clusterman.core.config_schema import positive
from clusterman.core.config_schema import unit_interval
from clusterman.core.durations import parse_duration
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources


class Scheduler(enum.Enum):
    """A pool's scheduler: the suffix of its pool file (``web.kubernetes``). What follows from it
    is its row of ``SCHEDULER_TRAITS``, which any layer reads; what the autoscaler builds for it,
    its row of ``wiring/schedulers.py: SCHEDULERS``."""

    KUBERNETES = "kubernetes"
    MESOS = "mesos"
    SIMULATED = "simulated"

    @property
    def traits(self) -> SchedulerTraits:
        return SCHEDULER_TRAITS[self]


@dataclass(frozen=True)
class SchedulerTraits:
    # it says what work it could not place: the pool's ``*_pending`` metrics (Mesos has no such queue)
    reports_pending: bool
    # why consolidation stays off for its pools, whatever the config ("": it may run). It moves
    # pods by draining nodes, so the drain must be evictions a disruption budget can refuse.
    no_consolidation: str = ""
    # its nodes are its groups' instances (a simulated scheduler): a group not read would look like
    # nodes gone, so a reader that cannot read every group fails instead (the metrics collector)
    nodes_are_instances: bool = False


SCHEDULER_TRAITS: Mapping[Scheduler, SchedulerTraits] = {
    Scheduler.KUBERNETES: SchedulerTraits(reports_pending=True),
    Scheduler.MESOS: SchedulerTraits(reports_pending=False, no_consolidation="a Mesos drain moves no task"),
    Scheduler.SIMULATED: SchedulerTraits(reports_pending=True, nodes_are_instances=True),
}


def split_scheduler(name: str) -> tuple[str, Scheduler | None]:
    """A pool file's name, or a metric's ``pool`` dimension, as the pool and its scheduler:
    ``web.kubernetes`` is ``("web", KUBERNETES)``; a name without a scheduler's suffix is all pool
    (``("web.v2", None)``)."""
    pool, _, suffix = name.rpartition(".")
    scheduler = next((s for s in Scheduler if s.value == suffix), None) if pool else None
    return (pool, scheduler) if scheduler is not None else (name, None)


class GroupKind(enum.StrEnum):
    """A kind of resource group, as a ``resource_groups`` entry names it (``- asg: {tag: ...}``).
    What the autoscaler builds for each is its row of ``cloud/kinds.py: KINDS``."""

    ASG = "asg"  # an EC2 Auto Scaling group
    SFR = "sfr"  # an EC2 Spot Fleet request
    SIMULATED = "simulated"  # a group of the simulator or the local stack, in the process


class MetricType(enum.Enum):
    SYSTEM_METRICS = "system_metrics"
    APP_METRICS = "app_metrics"
    METADATA = "metadata"


def merge_parameters(value: Any) -> dict[str, Any]:
    """Clusterman writes signal parameters as a YAML list of one-key maps; a plain map works too."""
    if isinstance(value, Mapping):
        return dict(value)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a mapping or a list of one-key mappings, got {value!r}")
    merged: dict[str, Any] = {}
    for item in value:
        if not isinstance(item, Mapping):
            raise ValueError(f"parameters: each list item must be a one-key mapping, got {item!r}")
        merged.update(item)
    return merged


@dataclass(frozen=True)
class RequiredMetric:
    name: str
    type: MetricType
    minute_range: int = field(check=positive)
    regex: bool = False


@dataclass(frozen=True)
class SignalConfig:
    """A signal block (``autoscale_signal``); also spelled ``autoscaling_signal`` in the seed.

    ``internal: true`` (as Clusterman's Kubernetes pools use it) means no signal process: the
    pool's demand is read from the scheduler itself (running and pending pods' requests).
    """

    period_minutes: int = field(check=positive)
    name: str | None = None
    branch_or_tag: str | None = None
    namespace: str | None = None
    required_metrics: tuple[RequiredMetric, ...] = ()
    parameters: Any = field(default_factory=dict, parser=merge_parameters)
    internal: bool = False

    def __post_init__(self) -> None:
        if not self.internal and (self.name is None or self.branch_or_tag is None):
            missing = "name" if self.name is None else "branch_or_tag"
            raise ValueError(f"{missing} is required unless the signal is internal (internal: true)")
        names = [m.name for m in self.required_metrics]
        if len(names) != len(set(names)):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"required_metrics: {', '.join(dupes)} listed more than once")


NO_QUEUE = ""  # a queue URL not given: that queue is not read or written


def queue_url(value: Any) -> str:
    """An SQS queue URL (``https://sqs.<region>.amazonaws.com/<account>/<name>``), or empty for none."""
    if value is None or value == NO_QUEUE:
        return NO_QUEUE
    if not isinstance(value, str):
        raise ValueError(f"expected an SQS queue URL, got {value!r}")
    scheme, sep, rest = value.partition("://")
    if scheme not in ("http", "https") or not sep or not rest.split("/", 1)[0]:
        raise ValueError(
            f"expected an SQS queue URL such as https://sqs.us-west-2.amazonaws.com/<account>/<name>, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class ClusterConfig:
    aws_region: str | None = None
    mesos_master_fqdn: str | None = field(None, aliases={"fqdn": None})
    kubeconfig_path: str | None = None
    # Clusterman's drainer queues (docs/configuration.md); NO_QUEUE when not given
    drain_queue_url: str = field(NO_QUEUE, parser=queue_url, doc="hosts to drain")
    termination_queue_url: str = field(NO_QUEUE, parser=queue_url, doc="hosts to terminate")
    warning_queue_url: str = field(NO_QUEUE, parser=queue_url, doc="Spot interruption warnings")
    pod_safe_to_evict_annotation: str = field(
        "cluster-autoscaler.kubernetes.io/safe-to-evict", doc="a pod annotated with it as false pins its node"
    )

    QUEUE_KEYS: ClassVar = ("drain_queue_url", "termination_queue_url", "warning_queue_url")

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues the cluster's drainer reads (none: it runs no drainer)."""
        return tuple(url for url in (getattr(self, key) for key in self.QUEUE_KEYS) if url)

    IGNORED_KEYS: ClassVar = {
        "cluster_manager": "each pool file's suffix (.kubernetes, .mesos) names its scheduler",
        "aws_account_number": "nothing clusterman does needs the account number",
        "mesos_api_url": "mesos_master_fqdn (or fqdn) names the Mesos master",
        "paasta_cluster": "resource groups are matched by the cluster's name in their tag",
        "max_weight_to_add": "the pool file's scaling_limits bound each pool",
        "max_weight_to_remove": "the pool file's scaling_limits bound each pool",
        "sensu_config": "no Sensu alerts: clusterman reports through events and /metrics",
        "always_delay_drain_processing": "Clusterman's drainer paused even after handling messages; "
        "not used by clusterman's drainer",
        "spot_fleet_resource_groups_cache_seconds": "Clusterman's drainer's cache of the cluster's Spot Fleets; "
        "not used by clusterman's drainer",
        "auto_scaling_resource_groups_cache_seconds": "Clusterman's drainer's cache of the cluster's ASGs; "
        "not used by clusterman's drainer",
    }


@dataclass(frozen=True)
class AwsConfig:
    region: str = "us-west-2"
    access_key_file: str | None = None
    endpoint_url: str | None = None
    signals_bucket: str = "yelp-clusterman-signals"
    state_table: str = "clusterman_cluster_state"

    IGNORED_KEYS: ClassVar = {
        "spot_price_table": "spot prices are kept in the metrics datastore (metrics.backend)",
        "add_entrypoint_info": "Clusterman put the calling program in boto's user agent; clusterman sends boto's own",
    }


CONSOLIDATION_PLACEMENTS = ("first_fit", "most_allocated")


@dataclass(frozen=True)
class ConsolidationConfig:
    """``autoscaling.consolidation``: packing the pool within a disruption budget
    (docs/consolidation.md). In the main file and the pool file alike; a key the pool file leaves
    out is the main file's, and one neither gives the default below."""

    enabled: bool | None = field(None, doc="false")
    placement: str | None = field(
        None,
        check=Check(lambda v: v in CONSOLIDATION_PLACEMENTS, f"must be one of {', '.join(CONSOLIDATION_PLACEMENTS)}"),
        doc="first_fit: where the pool's scheduler puts pods (first fit in launch order, or most_allocated)",
    )
    consolidate_after_seconds: float | None = field(
        None, parser=parse_duration, check=non_negative, aliases={"consolidate_after": None}, doc="600"
    )
    max_disrupted_share: float | None = field(None, check=unit_interval, doc="0.1: of the pool's nodes at once")
    drains_per_run: int | None = field(None, check=positive, doc="1: nodes with pods drained per run")
    evictions_per_hour: int | None = field(None, check=non_negative, doc="pods evicted by consolidation")
    evict_local_storage: bool | None = field(None, doc="false: pods with emptyDir or hostPath volumes stay")
    surplus: float | None = field(
        None, check=non_negative, doc="3: weight units above the asked capacity and the reserve before it packs"
    )


@dataclass(frozen=True)
class AutoscalingDefaults:
    """The main file's ``autoscaling`` block: defaults every pool may override."""

    setpoint: float = field(0.7, check=fraction)
    target_capacity_margin: float = field(0.1, check=unit_interval)
    slot_reserve: int = field(0, check=non_negative)
    slot_reserve_band: int = field(0, check=non_negative)
    slot_reserve_fraction: float = field(0.0, check=unit_interval)
    scale_up_hedge: float = field(0.0, check=non_negative)
    spare: bool = False
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    excluded_resources: tuple[str, ...] = ()
    # Clusterman's docs call it default_signal_pool
    default_signal_role: str = field("clusterman", aliases={"default_signal_pool": None})
    prevent_scale_down_after_capacity_loss: bool = False
    instance_loss_threshold: int = field(0, check=non_negative)
    cpus_per_weight: float | None = None

    IGNORED_KEYS: ClassVar = {"setpoint_margin": "in Clusterman's schema only: its code never reads it"}

    def __post_init__(self) -> None:
        check_excluded_resources(self.excluded_resources)


@dataclass(frozen=True)
class BatchConfig:
    run_interval_seconds: int = field(60, check=positive)

    IGNORED_KEYS: ClassVar = {
        "dedupe_interval_seconds": "read only for batches.spot_prices",
        "lookback_minutes": "the signals' required_metrics say how far back they read",
    }


@dataclass(frozen=True)
class SpotPricesBatch:
    """``batches.spot_prices``: Clusterman's spot price collector (``clusterman.batch.spot_price_collector``)."""

    run_interval_seconds: float = field(60.0, check=positive, doc="how often prices are read")
    dedupe_interval_seconds: float = field(
        60.0, check=positive, doc="at most one price per instance type and zone in each such interval"
    )


@dataclass(frozen=True)
class DrainerBatch:
    """``batches.drainer``: how often Clusterman's drainer (``clusterman.batch.drainer``) polls its queues."""

    run_interval_seconds: float = field(5.0, check=positive)


@dataclass(frozen=True)
class NodeMigrationBatch:
    """``batches.node_migration``: Clusterman's node migration batch (``clusterman.batch.node_migration``).
    Migrations run in each pool's own run here, so only ``failed_attemps_margin`` is used."""

    run_interval_seconds: float = field(60.0, check=positive, doc="Clusterman's: how often its batch looked")
    max_worker_processes: float = field(6.0, check=positive, doc="Clusterman's: its worker processes at once")
    worker_termination_timeout_seconds: float = field(10.0, check=non_negative)
    failed_attemps_margin: int = field(
        5,
        check=non_negative,
        doc="a migration fails past this many times its expected_duration (Clusterman's spelling)",
    )


@dataclass(frozen=True)
class Batches:
    cluster_metrics: BatchConfig = field(default_factory=BatchConfig)
    autoscaler: BatchConfig = field(default_factory=BatchConfig)
    spot_prices: SpotPricesBatch = field(default_factory=SpotPricesBatch)
    drainer: DrainerBatch = field(default_factory=DrainerBatch)
    node_migration: NodeMigrationBatch = field(default_factory=NodeMigrationBatch)

    IGNORED_KEYS: ClassVar = {"spot_price_collector": "the spot price collector's settings are batches.spot_prices"}


class StateBackend(enum.Enum):
    SQLITE = "sqlite"
    DYNAMODB = "dynamodb"


class LeaseBackend(enum.Enum):
    STORE = "store"  # in the state backend, with the rest
    KUBERNETES = "kubernetes"  # a coordination.k8s.io Lease per pool


@dataclass(frozen=True)
class StateConfig:
    """Where pauses and other durable state live: a local SQLite file, or Clusterman's DynamoDB table;
    the pool's lease with them, or in Kubernetes Leases."""

    backend: StateBackend = StateBackend.SQLITE
    path: str = "state.sqlite"  # relative to state_directory
    lease: LeaseBackend = LeaseBackend.STORE
    lease_namespace: str = "clusterman"


@dataclass(frozen=True)
class EventsConfig:
    """The ``events`` block: event history, its HTTP API and ``/metrics`` (docs/events.md).

    YuniKorn's spellings (``ringBufferCapacity``, ``RESTResponseSize``) are accepted too.
    ``host`` and ``port`` are read at start; the rest applies on reload.
    """

    ring_capacity: int = field(100_000, check=positive, aliases={"ringBufferCapacity": None})
    rest_response_size: int = field(10_000, check=positive, aliases={"RESTResponseSize": None})
    host: str = "127.0.0.1"
    port: int = field(7780, check=Check(lambda v: 0 <= v <= 65535, "must be a TCP port, 0 to 65535 (0: any free)"))
    publish_queue_size: int = field(10_000, check=positive)
    stream_buffer_size: int = field(1000, check=positive)
    stream_max_total: int = field(100, check=positive)
    stream_max_per_client: int = field(15, check=positive)
    stream_heartbeat_seconds: float = field(15.0, check=positive)
    stream_write_timeout_seconds: float = field(10.0, check=positive)


REBALANCE_POLICIES = ("ignore", "replace_ahead", "drain")


@dataclass(frozen=True)
class NoticesConfig:
    """The ``notices`` block: how the cloud's notices (the cluster's ``warning_queue_url``) are read
    and handled (docs/node_lifecycle.md). Clusterman has no such block; these are clusterman's."""

    rebalance: str = field(
        "ignore",
        check=Check(lambda v: v in REBALANCE_POLICIES, f"must be one of {', '.join(REBALANCE_POLICIES)}"),
        doc="what a rebalance recommendation does: ignore (counted), replace_ahead or drain",
    )
    max_receives: int = field(5, check=positive, doc="a message received this often without being handled is set aside")
    dead_letter_queue_url: str = field(
        NO_QUEUE, parser=queue_url, doc="where messages set aside go (none: logged whole and deleted)"
    )
    visibility_timeout_seconds: float = field(
        30.0, parser=parse_duration, check=positive, doc="how long a message received is hidden from other readers"
    )
    poll_seconds: float = field(
        1.0, parser=parse_duration, check=positive, doc="how often the autoscaler looks for new notices between runs"
    )


class MetricsBackend(enum.Enum):
    SQLITE = "sqlite"
    DYNAMODB = "dynamodb"
    PROMETHEUS = "prometheus"


@dataclass(frozen=True)
class DynamoDBMetricsConfig:
    """Clusterman's three tables (hash key ``key``, range key ``timestamp``) and their TTL attribute."""

    system_metrics_table: str = "clusterman_system_metrics"
    app_metrics_table: str = "clusterman_app_metrics"
    metadata_table: str = "clusterman_metadata"
    ttl_attribute: str = "expiration_timestamp"
    region: str | None = field(None, doc="defaults to aws.region")

    def table(self, metric_type: MetricType) -> str:
        return {
            MetricType.SYSTEM_METRICS: self.system_metrics_table,
            MetricType.APP_METRICS: self.app_metrics_table,
            MetricType.METADATA: self.metadata_table,
        }[metric_type]


@dataclass(frozen=True)
class PrometheusMetricsConfig:
    """Where the read-only Prometheus backend sends ``query_range`` requests; queries live per pool."""

    url: str = "http://127.0.0.1:9090"
    step_seconds: int = field(60, check=positive, doc="resolution of the windows read")
    timeout_seconds: float = field(10.0, check=positive)


@dataclass(frozen=True)
class MetricsConfig:
    """The main file's ``metrics`` block: which datastore signals read from and the collector writes to."""

    backend: MetricsBackend = MetricsBackend.SQLITE
    sqlite_path: str = field("metrics.sqlite3", doc="relative to state_directory unless absolute")
    retention_days: int = field(
        30, check=non_negative, doc="SQLite drops, DynamoDB expires (TTL) points this old; 0 keeps them forever"
    )
    dynamodb: DynamoDBMetricsConfig = field(default_factory=DynamoDBMetricsConfig)
    prometheus: PrometheusMetricsConfig = field(default_factory=PrometheusMetricsConfig)


@dataclass(frozen=True)
class MainConfig:
    clusters: dict[str, ClusterConfig] = field(default_factory=dict, aliases={"mesos_clusters": None})
    aws: AwsConfig = field(default_factory=AwsConfig)
    autoscaling: AutoscalingDefaults = field(default_factory=AutoscalingDefaults)
    autoscale_signal: SignalConfig | None = field(None, aliases={"autoscaling_signal": None})
    batches: Batches = field(default_factory=Batches)
    events: EventsConfig = field(default_factory=EventsConfig)
    cluster_config_directory: str = "/nail/srv/configs/clusterman-clusters"

    def runs_drainer(self, cluster: str) -> bool:
        """Whether the cluster has a queue of notices: its trees run a drainer, and its pools' runs
        read the inbox the drainer fills."""
        config = self.clusters.get(cluster)
        return config is not None and bool(config.queues)

    state_directory: str = "/var/lib/clusterman"
    state: StateConfig = field(default_factory=StateConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    notices: NoticesConfig = field(default_factory=NoticesConfig)

    global_redraining_delay_seconds: float = field(
        15.0, parser=parse_duration, doc="a pool's draining.redraining_delay_seconds when its file gives none"
    )

    IGNORED_KEYS: ClassVar = {
        "module_config": "staticconf namespaces for Yelp's libraries (clog, clusterman_metrics, yelp_batch); "
        "clusterman's own blocks (metrics, events) configure what they did",
        "module_env_config": "staticconf namespaces for Yelp's libraries, per environment",
        "sensu_config": "no Sensu alerts: clusterman reports through events and /metrics",
        "monitoring_client": "Clusterman's metrics emitter (SignalFx or logs); clusterman serves its counters "
        "on /metrics",
        "mesos_maintenance_timeout_seconds": "Mesos maintenance windows for drains; clusterman does not drain "
        "Mesos agents",
        "drain_termination_timeout_seconds": "the wait between a Mesos drain and termination; clusterman does not "
        "drain Mesos agents",
        "mesos": "the drainer's Mesos operator credentials (mesos_agent_secret_path); clusterman does not drain "
        "Mesos agents",
        "exclude_daemonset_pods": "DaemonSet pods are always taken out of node capacity and demand",
        "node_migration": "a pool file's block; the batch's settings are batches.node_migration",
        "spot_prices": "the collector's settings are batches.spot_prices",
        "join_delay_mean_seconds": "set by Clusterman's simulate flags; here the pool's simulation.join_delay_seconds",
        "join_delay_stdev_seconds": "set by Clusterman's simulate flags; here the pool's "
        "simulation.join_delay_stdev_seconds",
        "cpus_per_weight": "set by Clusterman's simulate flags; here autoscaling.cpus_per_weight",
        "ebs_volume_size": "set by Clusterman's simulate flags; here the markets' resources give disk",
    }


@dataclass(frozen=True)
class ResourceGroupConfig:
    """One entry of ``resource_groups``: ``- asg: {tag: ...}`` or ``- sfr: {tag: ... | s3: ...}``.

    ``tag`` is a tag *key* (Yelp's configs use ``puppet:role::paasta``); a group belongs to the
    pool when that tag's value is JSON ``{"pool": <pool>, "paasta_cluster": <cluster>}``.
    ``s3`` (Spot Fleets only) names Clusterman's JSON listing of fleet ids.
    """

    kind: GroupKind
    tag: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", GroupKind(self.kind))  # ``"asg"`` is read as ``GroupKind.ASG``


def parse_resource_groups(value: Any) -> tuple[ResourceGroupConfig, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError("expected a list such as `- asg: {tag: ...}`")
    groups = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or len(item) != 1:
            raise ValueError(f"resource_groups[{i}]: expected a one-key mapping such as `asg: {{tag: ...}}`")
        ((name, body),) = item.items()
        try:
            kind = GroupKind(name)
        except ValueError:
            known = ", ".join(GroupKind)
            raise ValueError(f"resource_groups[{i}]: unknown group kind {name!r} (known: {known})") from None
        body = body or {}
        if not isinstance(body, Mapping):
            raise ValueError(f"resource_groups[{i}].{kind}: expected a mapping")
        unknown = set(body) - {"tag", "s3"}
        if unknown:
            raise ValueError(f"resource_groups[{i}].{kind}: unknown key(s) {', '.join(sorted(unknown))}")
        where = f"resource_groups[{i}].{kind}"
        tag = body.get("tag")
        if tag is not None and (not isinstance(tag, str) or tag.lstrip().startswith("{")):
            raise ValueError(
                f"{where}.tag: expected a tag key such as puppet:role::paasta (the groups' value of that tag "
                f'is the JSON {{"pool": ..., "paasta_cluster": ...}}), got {tag!r}'
            )
        s3 = body.get("s3") or {}
        if s3:
            if kind is not GroupKind.SFR:
                raise ValueError(f"{where}.s3: only sfr groups are listed in S3; {kind} groups are found by tag")
            if not isinstance(s3, Mapping) or set(s3) != {"bucket", "prefix"}:
                raise ValueError(f"{where}.s3: expected {{bucket: ..., prefix: ...}}, got {s3!r}")
        groups.append(ResourceGroupConfig(kind, tag, s3.get("bucket"), s3.get("prefix")))
    return tuple(groups)


def percent(value: float) -> float:
    """Escalator writes thresholds in percent (70); clusterman keeps fractions (0.7)."""
    return value / 100


def tasks_limit(value: Any) -> float:
    """A whole number of tasks, or ``inf`` (Clusterman reads max_tasks_to_kill as an int or infinity)."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", ".inf"):
        return math.inf
    if isinstance(value, float) and value == math.inf:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise ValueError(f"expected a whole number or inf, got {value!r}")
    if value < 0:
        raise ValueError(f"must be at least 0, got {value!r}")
    return float(value)


def check_excluded_resources(names: tuple[str, ...]) -> None:
    unknown = sorted(set(names) - set(RESOURCE_NAMES))
    if unknown:
        raise ValueError(
            f"excluded_resources: unknown resource(s) {', '.join(unknown)} (known: {', '.join(RESOURCE_NAMES)})"
        )


@dataclass(frozen=True)
class ScalingLimits:
    """``scaling_limits``: capacities in weight units (Escalator's min_nodes/max_nodes are accepted)."""

    min_capacity: int = field(check=non_negative, aliases={"min_nodes": None})
    max_capacity: int = field(check=non_negative, aliases={"max_nodes": None})
    max_weight_to_add: float = field(check=positive)
    max_weight_to_remove: float = field(check=positive)
    # tasks a scale-down may kill per run (0: only empty nodes are terminated); may be ``inf``
    max_tasks_to_kill: float = field(0.0, parser=tasks_limit)
    min_node_scalein_uptime_seconds: int = field(0, check=non_negative)

    def __post_init__(self) -> None:
        if self.min_capacity > self.max_capacity:
            raise ValueError(f"min_capacity ({self.min_capacity}) is greater than max_capacity ({self.max_capacity})")


@dataclass(frozen=True)
class PoolAutoscaling:
    """The pool file's ``autoscaling`` block; unset values fall back to the main file's defaults.

    Escalator's names are accepted for the same ideas: ``scale_up_threshold_percent`` is the setpoint
    (in percent), the ``*_percent`` taint thresholds are converted to fractions, and its durations
    (``2m``) to seconds. See docs/scaling.md.
    """

    # Escalator's percents may pass 100 (its only rules: > 0, and ordered lower < upper < scale-up)
    setpoint: float | None = field(
        None, check=fraction, alias_check=positive, aliases={"scale_up_threshold_percent": percent}
    )
    target_capacity_margin: float | None = field(None, check=unit_interval)
    # places kept free for the largest pod (docs/scaling.md, "The target")
    slot_reserve: int | None = field(None, check=non_negative)
    slot_reserve_band: int | None = field(None, check=non_negative)
    slot_reserve_fraction: float | None = field(None, check=unit_interval)
    # more asked for pending pods than they need, for the join delay's spread (docs/scaling.md)
    scale_up_hedge: float | None = field(None, check=non_negative)
    spare: bool | None = None
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    excluded_resources: tuple[str, ...] | None = None
    prevent_scale_down_after_capacity_loss: bool | None = field(None, doc="false")
    instance_loss_threshold: int | None = field(None, check=non_negative)
    orphan_instance_uptime_threshold_seconds: int = field(1800, check=positive)
    # Escalator's removal below taint thresholds (all four or none): when set, they replace the
    # default scale-down (the target following utilisation down to the setpoint).
    taint_upper_capacity_threshold: float | None = field(
        None,
        check=unit_interval,
        alias_check=positive,
        aliases={"taint_upper_capacity_threshold_percent": percent},
    )
    taint_lower_capacity_threshold: float | None = field(
        None,
        check=unit_interval,
        alias_check=positive,
        aliases={"taint_lower_capacity_threshold_percent": percent},
    )
    slow_node_removal_rate: float | None = field(None, check=positive)  # weight units per run
    fast_node_removal_rate: float | None = field(None, check=positive)
    soft_delete_grace_period_seconds: float = field(
        0.0, parser=parse_duration, aliases={"soft_delete_grace_period": None}
    )
    hard_delete_grace_period_seconds: float | None = field(
        None, parser=parse_duration, aliases={"hard_delete_grace_period": None}
    )
    scale_up_cool_down_period_seconds: float = field(
        0.0, parser=parse_duration, aliases={"scale_up_cool_down_period": None}
    )
    scale_up_failure_threshold: int = field(0, check=non_negative)
    scale_up_failure_cooldown_seconds: float = field(
        300.0, parser=parse_duration, aliases={"scale_up_failure_cooldown": None}
    )

    IGNORED_KEYS: ClassVar = {
        "killable_nodes_prioritizing_v2": "Clusterman's second order of nodes to remove ranks by pod priority; "
        "clusterman's order (docs/scaling.md) does not read pod priority",
        "setpoint_margin": "in Clusterman's schema only: its code never reads it",
    }

    def __post_init__(self) -> None:
        check_excluded_resources(self.excluded_resources or ())
        taint = {
            "taint_upper_capacity_threshold": self.taint_upper_capacity_threshold,
            "taint_lower_capacity_threshold": self.taint_lower_capacity_threshold,
            "slow_node_removal_rate": self.slow_node_removal_rate,
            "fast_node_removal_rate": self.fast_node_removal_rate,
        }
        given = [k for k, v in taint.items() if v is not None]
        if given and len(given) < len(taint):
            missing = ", ".join(k for k in taint if k not in given)
            raise ValueError(f"{', '.join(given)} given without {missing}: Escalator's removal needs all four")
        lower, upper = self.taint_lower_capacity_threshold, self.taint_upper_capacity_threshold
        if lower is not None and upper is not None and not lower < upper:
            raise ValueError(f"taint_lower_capacity_threshold ({lower:g}) must be below the upper one ({upper:g})")
        if upper is not None and self.setpoint is not None and not upper < self.setpoint:
            raise ValueError(
                f"taint_upper_capacity_threshold ({upper:g}) must be below the setpoint ({self.setpoint:g})"
            )
        slow, fast = self.slow_node_removal_rate, self.fast_node_removal_rate
        if slow is not None and fast is not None and slow > fast:
            raise ValueError(f"slow_node_removal_rate ({slow:g}) is greater than fast_node_removal_rate ({fast:g})")
        hard = self.hard_delete_grace_period_seconds
        if hard is not None and hard < self.soft_delete_grace_period_seconds:
            raise ValueError(
                f"hard_delete_grace_period ({hard:g}s) is shorter than soft_delete_grace_period "
                f"({self.soft_delete_grace_period_seconds:g}s)"
            )


# What the Kubernetes scheduler assumes for a container that requests nothing (100m CPU, 200 MiB).
DEFAULT_POD_REQUEST = Resources(cpus=0.1, mem=200 * 2**20 / 1e6)


def parse_resources(value: Any) -> Resources:
    """``{cpus: 0.1, mem: 200}`` (MB) -> Resources; every amount a finite number >= 0."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of cpus/mem/disk/gpus, got {value!r}")
    for name, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < float("inf"):
            raise ValueError(f"{name}: expected a finite number >= 0, got {amount!r}")
    return Resources.from_mapping(value)


@dataclass(frozen=True)
class SimulatedTasks:
    """``count`` identical tasks that run for as long as the simulated pool does."""

    count: int = field(check=positive)
    cpus: float = field(0.0, check=non_negative)
    mem: float = field(0.0, check=non_negative)
    disk: float = field(0.0, check=non_negative)
    gpus: float = field(0.0, check=non_negative)


@dataclass(frozen=True)
class DemandPod:
    """One size of task a demand trace is run as, drawn with probability ``weight`` / the sum of the
    weights (``simulation.demand_mix``): pods of several sizes fragment nodes as real ones do."""

    weight: float = field(check=positive)
    cpus: float = field(0.0, check=non_negative)
    mem: float = field(0.0, check=non_negative)
    disk: float = field(0.0, check=non_negative)
    gpus: float = field(0.0, check=non_negative)


DEPARTURES = ("newest", "random")
PLACEMENTS = ("first_fit", "most_allocated", "least_allocated")


@dataclass(frozen=True)
class SimulatedTrace:
    """A workload replayed from a metrics file (``generate-data`` output, or Clusterman's), faster
    than real time and looping: the local stack shows a day of demand in a few minutes. It runs as
    tasks of the block's ``demand_task`` size."""

    file: str = field(doc="the metrics file or generate-data design, relative to the pool file's directory")
    metric: str = field("cpus_allocated", doc="the series to replay: a key in the file, or a metric name")
    speedup: float = field(1.0, check=positive, doc="simulated seconds per real second")


@dataclass(frozen=True)
class SimulatedMarketConfig:
    """One kind of instance a simulated group launches; size and price default to the catalog's
    (``clusterman/cloud/instance_types.py``), so an instance type it does not know needs both."""

    instance_type: str
    availability_zone: str = field("us-west-2a", aliases={"market": None})
    weight: float = field(1.0, check=positive, doc="capacity units one instance counts for")
    resources: Resources | None = field(
        None, parser=parse_resources, doc="allocatable of one instance, MB for mem and disk (default: the catalog's)"
    )
    price: float | None = field(
        None, check=non_negative, doc="dollars per instance-hour (default: the catalog's on-demand price)"
    )
    spot: bool = field(False, doc="priced by the metrics file's spot_prices series (markets of sfr groups always are)")
    interruptions_per_node_hour: float | None = field(
        None, check=non_negative, doc="Spot interruptions of this market (default: the simulation block's)"
    )


LEGACY_MARKET_DEFAULTS = {"instance_type": "m5.large", "market": "us-west-2a", "weight": 1.0, "node_resources": None}


@dataclass(frozen=True)
class SimulationConfig:
    """The ``simulation`` block: how a simulated pool behaves (``<pool>.simulated``, and every pool
    ``clusterman simulate`` runs). Its instances come from ``markets``, or from the one market that
    ``instance_type``, ``market``, ``weight`` and ``node_resources`` describe."""

    node_resources: Resources | None = field(
        None, parser=parse_resources, doc="allocatable of one instance, MB for mem and disk (default: the catalog's)"
    )
    weight: float = field(1.0, check=positive)
    instance_type: str = "m5.large"
    market: str = "us-west-2a"
    markets: tuple[SimulatedMarketConfig, ...] = ()
    join_delay_seconds: float = field(60.0, check=non_negative)
    join_delay_stdev_seconds: float = field(0.0, check=non_negative)
    seed: int = 0
    initial_capacity: int | None = field(None, check=non_negative, doc="capacity at start (default: min_capacity)")
    tasks: tuple[SimulatedTasks, ...] = ()
    trace: SimulatedTrace | None = None
    demand_task: Resources | None = field(
        None,
        parser=parse_resources,
        doc="the size of one task a demand trace is run as (default: one CPU of the smallest instance's shape)",
    )
    demand_mix: tuple[DemandPod, ...] = field(
        (), doc="tasks of several sizes instead of demand_task, each drawn with its weight's share"
    )
    departures: str = field(
        "newest",
        check=Check(lambda v: v in DEPARTURES, f"must be one of {', '.join(DEPARTURES)}"),
        doc="which tasks leave when demand falls: the newest (the old mode), or random ones (fragments nodes)",
    )
    task_lifetime_minutes: float | None = field(
        None, check=positive, doc="mean lifetime of a demand task (exponential); it is replaced when it ends"
    )
    new_template_at_minutes: tuple[float, ...] = field(
        (), doc="minutes into a simulation at which the groups' launch template gets a new version (its nodes drift)"
    )
    interruptions_per_node_hour: float = field(
        0.0, check=non_negative, doc="Spot interruptions per instance and hour, each with the two-minute warning"
    )
    interruption_handling: bool = field(
        True, doc="the warnings reach the autoscaler (the queue and the drainer); false: the node just goes"
    )
    lost_pods_return_seconds: float = field(
        60.0, check=non_negative, doc="how long the pods of a node taken with them take to be pending again"
    )
    placement: str = field(
        "first_fit",
        check=Check(lambda v: v in PLACEMENTS, f"must be one of {', '.join(PLACEMENTS)}"),
        doc="where the scheduler puts a task: the first ready node with room in join order, or "
        "scored as Kubernetes' MostAllocated (packs) or LeastAllocated (spreads, its default)",
    )

    def __post_init__(self) -> None:
        legacy = {k: getattr(self, k) for k in LEGACY_MARKET_DEFAULTS}
        if self.markets and legacy != LEGACY_MARKET_DEFAULTS:
            given = ", ".join(k for k, v in legacy.items() if v != LEGACY_MARKET_DEFAULTS[k])
            raise ValueError(f"give either markets or {given}, not both")
        if self.demand_task is not None and not any(self.demand_task):
            raise ValueError("demand_task: must ask for some resource")
        if self.demand_mix and self.demand_task is not None:
            raise ValueError("give either demand_task or demand_mix, not both")
        for k, pod in enumerate(self.demand_mix):
            if not (pod.cpus or pod.mem or pod.disk or pod.gpus):
                raise ValueError(f"demand_mix[{k}]: must ask for some resource")

    def market_configs(self) -> tuple[SimulatedMarketConfig, ...]:
        if self.markets:
            return self.markets
        return (SimulatedMarketConfig(self.instance_type, self.market, self.weight, self.node_resources),)


PROMQL_VARIABLES = frozenset({"cluster", "pool", "scheduler", "app"})


def parse_promql_mapping(value: Any) -> dict[str, str]:
    """A mapping of metric name (``app,name`` for app metrics) -> PromQL, with ``$cluster``-style variables."""
    if not isinstance(value, Mapping):
        raise ValueError("expected a mapping of metric name -> PromQL expression")
    queries: dict[str, str] = {}
    for name, query in value.items():
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"{name}: expected a PromQL expression (a non-empty string)")
        template = string.Template(query)
        if not template.is_valid():
            raise ValueError(f"{name}: a lone '$' in {query!r}; write $$ for a literal dollar sign")
        unknown = set(template.get_identifiers()) - PROMQL_VARIABLES
        if unknown:
            known = ", ".join("$" + v for v in sorted(PROMQL_VARIABLES))
            raise ValueError(f"{name}: unknown variable(s) {', '.join(sorted(unknown))} (known: {known})")
        queries[str(name)] = query
    return queries


@dataclass(frozen=True)
class PrometheusQueries:
    """A pool's ``prometheus_queries``: what each required metric means in PromQL, per metric type.

    Used only by the Prometheus metrics backend. ``$cluster``, ``$pool``, ``$scheduler`` (and ``$app``
    for app metrics) are filled in from the key read, else the pool's identity (docs/metrics.md).
    """

    system_metrics: dict[str, str] = field(default_factory=dict, parser=parse_promql_mapping)
    app_metrics: dict[str, str] = field(
        default_factory=dict, parser=parse_promql_mapping, doc="keyed `app,name`, as app metrics are stored"
    )
    metadata: dict[str, str] = field(default_factory=dict, parser=parse_promql_mapping)

    def __post_init__(self) -> None:
        bare = sorted(name for name in self.app_metrics if "," not in name)
        if bare:
            raise ValueError(f"app_metrics: {', '.join(bare)}: name app metrics as `app,name`")

    def for_type(self, metric_type: MetricType) -> dict[str, str]:
        return {
            MetricType.SYSTEM_METRICS: self.system_metrics,
            MetricType.APP_METRICS: self.app_metrics,
            MetricType.METADATA: self.metadata,
        }[metric_type]


@dataclass(frozen=True)
class DrainingConfig:
    """A pool's ``draining`` block, Clusterman's keys and defaults: how long a drain may take and what
    happens when it does not finish (docs/configuration.md)."""

    draining_time_threshold_seconds: float = field(
        1800.0, parser=parse_duration, check=positive, doc="the longest a node's drain may take"
    )
    redraining_delay_seconds: float = field(
        15.0,
        parser=parse_duration,
        doc="wait before a failed drain is tried again (default: the main file's global_redraining_delay_seconds, 15)",
    )
    force_terminate: bool = field(False, doc="past the threshold: terminate the node (else it is uncordoned and kept)")
    process_spot_warnings: bool = field(True, doc="drain this pool's nodes on a Spot interruption warning")


@dataclass(frozen=True)
class PoolPortion:
    """A number of nodes, or a percent of the pool's (Clusterman's ``rate: 5`` or ``rate: '3%'``).

    A percent other than 0 is at least one node, as in Clusterman."""

    amount: float  # nodes, or a percent (0 to 100 and above) when ``percent``
    percent: bool = False

    def of(self, pool_nodes: int) -> int:
        """The nodes this portion stands for in a pool of ``pool_nodes``."""
        if not self.percent:
            return int(self.amount)
        if self.amount == 0:
            return 0
        return max(1, round(self.amount / 100 * pool_nodes))

    def __bool__(self) -> bool:
        return self.amount > 0

    def __str__(self) -> str:
        return f"{self.amount:g}%" if self.percent else f"{self.amount:g}"


NO_NODES = PoolPortion(0)


def pool_portion(value: Any) -> PoolPortion:
    """``5`` (nodes) or ``'3%'`` (of the pool); never negative."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            amount = float(value.strip()[:-1])
        except ValueError:
            amount = math.nan
        if not math.isfinite(amount) or amount < 0:
            raise ValueError(f"expected a percent such as '5%', got {value!r}")
        return PoolPortion(amount, percent=True)
    if isinstance(value, str) and value.strip().isdigit():
        return PoolPortion(int(value.strip()))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() or value < 0:
        raise ValueError(f"expected a whole number of nodes or a percent such as '5%', got {value!r}")
    return PoolPortion(int(value))


class MigrationPrecedence(enum.Enum):
    """Which nodes a migration replaces first (Clusterman's ``strategy.precedence``)."""

    HIGHEST_UPTIME = "highest_uptime"  # the oldest first
    LOWEST_TASK_COUNT = "lowest_task_count"
    AZ_NAME_ALPHABETICAL = "az_name_alphabetical"  # zone by zone, in alphabetical order


NO_UPTIME_LIMIT = math.inf
MAX_ORPHAN_CAPACITY_TOLLERANCE = 0.2  # Clusterman's: a larger value counts as this


def orphan_tolerance(value: Any) -> float:
    """A fraction >= 0; above 0.2 counts as 0.2, as in Clusterman."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"expected a fraction >= 0, got {value!r}")
    return min(float(value), MAX_ORPHAN_CAPACITY_TOLLERANCE)


@dataclass(frozen=True)
class MigrationTrigger:
    """``node_migration.trigger``: what starts a migration of the pool."""

    max_uptime: float = field(
        NO_UPTIME_LIMIT, parser=parse_duration, check=positive, doc="seconds: replace nodes older than this (30d)"
    )
    event: bool = field(False, doc="accept NodeMigration resources for this pool")
    drift: bool = field(
        False, doc="replace nodes launched from another launch template version or image than their group's (ours)"
    )


@dataclass(frozen=True)
class MigrationStrategy:
    """``node_migration.strategy``: how fast, in which order, and with how much room nodes are replaced.
    Durations are seconds (written as 5m, 1h...)."""

    rate: PoolPortion = field(
        parser=pool_portion,
        check=Check(bool, "must be greater than 0"),
        doc="nodes (or a percent of the pool) replaced at a time; required",
    )
    prescaling: PoolPortion = field(NO_NODES, parser=pool_portion, doc="nodes added to the pool before replacing")
    precedence: MigrationPrecedence = MigrationPrecedence.HIGHEST_UPTIME
    bootstrap_wait: float = field(180.0, parser=parse_duration, doc="how long a new node takes to be ready")
    bootstrap_timeout: float = field(600.0, parser=parse_duration, doc="the longest wait for new nodes")
    allowed_failed_drains: int = field(3, check=non_negative, doc="drains that may fail before the migration stops")


@dataclass(frozen=True)
class NodeMigrationConfig:
    """A pool's ``node_migration`` block, Clusterman's keys and defaults (``decision/migration.py``
    acts on it). ``enabled`` is whether the pool file has the block."""

    trigger: MigrationTrigger
    strategy: MigrationStrategy
    disable_autoscaling: bool = field(False, doc="no autoscaling while nodes are replaced")
    ignore_pod_health: bool = field(False, doc="judge the pool's health without reading its pods")
    health_check_interval: float = field(120.0, parser=parse_duration, doc="seconds between health checks")
    orphan_capacity_tollerance: float = field(
        0.0, parser=orphan_tolerance, doc="orphan capacity over target still healthy (at most 0.2; their spelling)"
    )
    max_uptime_worker_skips: int = field(
        6, check=non_negative, doc="times the uptime trigger may wait for the pool's capacity (0: no limit)"
    )
    expected_duration: float = field(7200.0, parser=parse_duration, doc="how long migrating the whole pool takes")

    @property
    def enabled(self) -> bool:
        return bool(self.strategy.rate)


NO_NODE_MIGRATION = NodeMigrationConfig(MigrationTrigger(), MigrationStrategy(rate=NO_NODES))


@dataclass(frozen=True)
class PoolConfig:
    """Everything one autoscaler instance needs to know about its pool."""

    scaling_limits: ScalingLimits
    resource_groups: tuple[ResourceGroupConfig, ...] = field((), parser=parse_resource_groups)
    autoscale_signal: SignalConfig | None = field(None, aliases={"autoscaling_signal": None})
    app_signals: dict[str, SignalConfig] = field(
        default_factory=dict, doc="more applications on this pool, each with its own signal (app -> signal block)"
    )
    autoscaling: PoolAutoscaling = field(default_factory=PoolAutoscaling)
    draining_enabled: bool = False
    draining: DrainingConfig = field(default_factory=DrainingConfig)
    node_migration: NodeMigrationConfig = NO_NODE_MIGRATION
    # Kubernetes (Clusterman's keys and defaults): the node label naming the pool, the pod label
    # naming it, and the pod annotation that pins a node ("false": never remove it).
    node_label_key: str = "clusterman.com/pool"
    pool_label_key: str = "clusterman.com/pool"
    safe_to_evict_key: str = "clusterman.com/safe_to_evict"
    default_pod_request: Resources = field(
        DEFAULT_POD_REQUEST, parser=parse_resources, doc="what a pod that requests no cpu or memory counts for"
    )
    # Mesos: frameworks whose tasks are not batch work (Clusterman's key and default)
    non_batch_framework_prefixes: tuple[str, ...] = ("marathon",)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    prometheus_queries: PrometheusQueries = field(default_factory=PrometheusQueries)

    IGNORED_KEYS: ClassVar = {
        "sensu_config": "no Sensu alerts: clusterman reports through events and /metrics",
        "pool_owner": "no Sensu alerts to route",
        "paasta_cluster": "resource groups are matched by the cluster's name in their tag",
        "exclude_daemonset_pods": "DaemonSet pods are always taken out of node capacity and demand",
        "alert_on_max_capacity": "no Sensu alert; the decision's DECISION_MAX_CAPACITY event says when the "
        "maximum caps the target",
    }

    def __post_init__(self) -> None:
        if "__default__" in self.app_signals:
            raise ValueError("app_signals: __default__ is the default signal's app name and cannot be used")


@dataclass(frozen=True)
class PoolIdentity:
    cluster: str
    pool: str
    scheduler: Scheduler

    @cached_property  # read for every metric key, every run
    def pool_with_scheduler(self) -> str:
        """How Clusterman names the pool in metric dimensions: ``<pool>.<scheduler>``."""
        return f"{self.pool}.{self.scheduler.value}"

    def __str__(self) -> str:
        return f"{self.cluster}/{self.pool}.{self.scheduler.value}"

"""The typed shape of srv-configs: the main ``clusterman.yaml`` and one file per pool.

Key names are Clusterman's, so existing srv-configs load unchanged. Keys Clusterman reads for
features we do not have (``sensu_config``, ``module_config``, ...) are listed in ``IGNORED_KEYS``
of their block: accepted and logged, never silently mistaken for a typo of ours.
"""

from __future__ import annotations

import enum
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import ClassVar

from clusterman.config.schema import field
from clusterman.config.schema import fraction
from clusterman.config.schema import non_negative
from clusterman.config.schema import positive
from clusterman.config.schema import unit_interval


class Scheduler(enum.Enum):
    KUBERNETES = "kubernetes"
    MESOS = "mesos"
    SIMULATED = "simulated"


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


@dataclass(frozen=True)
class ClusterConfig:
    aws_region: str | None = None
    aws_account_number: str | None = None
    mesos_master_fqdn: str | None = field(None, aliases={"fqdn": None})
    kubeconfig_path: str | None = None
    cluster_manager: Scheduler | None = None

    IGNORED_KEYS: ClassVar = frozenset({"mesos_api_url", "paasta_cluster", "max_weight_to_add", "max_weight_to_remove"})


@dataclass(frozen=True)
class AwsConfig:
    region: str = "us-west-2"
    access_key_file: str | None = None
    endpoint_url: str | None = None
    signals_bucket: str = "yelp-clusterman-signals"
    state_table: str = "clusterman_cluster_state"

    IGNORED_KEYS: ClassVar = frozenset({"spot_price_table"})


@dataclass(frozen=True)
class AutoscalingDefaults:
    """The main file's ``autoscaling`` block: defaults every pool may override."""

    setpoint: float = field(0.7, check=fraction)
    target_capacity_margin: float = field(0.1, check=unit_interval)
    excluded_resources: tuple[str, ...] = ()
    default_signal_role: str = "clusterman"
    instance_loss_threshold: int = field(0, check=non_negative)
    cpus_per_weight: float | None = None

    IGNORED_KEYS: ClassVar = frozenset({"setpoint_margin"})


@dataclass(frozen=True)
class BatchConfig:
    run_interval_seconds: int = field(60, check=positive)

    IGNORED_KEYS: ClassVar = frozenset({"dedupe_interval_seconds", "lookback_minutes"})


@dataclass(frozen=True)
class Batches:
    cluster_metrics: BatchConfig = field(default_factory=BatchConfig)
    autoscaler: BatchConfig = field(default_factory=BatchConfig)

    IGNORED_KEYS: ClassVar = frozenset({"spot_prices", "node_migration", "spot_price_collector"})


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
    cluster_config_directory: str = "/nail/srv/configs/clusterman-clusters"
    state_directory: str = "/var/lib/clusterman"
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    IGNORED_KEYS: ClassVar = frozenset(
        {
            "module_config",
            "module_env_config",
            "sensu_config",
            "mesos_maintenance_timeout_seconds",
            "drain_termination_timeout_seconds",
            "node_migration",
            "spot_prices",
        }
    )


@dataclass(frozen=True)
class ResourceGroupConfig:
    """One entry of ``resource_groups``: ``- asg: {tag: ...}`` or ``- sfr: {tag: ...}``."""

    kind: str
    tag: str | None = None
    s3_bucket: str | None = None
    s3_prefix: str | None = None


def parse_resource_groups(value: Any) -> tuple[ResourceGroupConfig, ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError("expected a list such as `- asg: {tag: ...}`")
    groups = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or len(item) != 1:
            raise ValueError(f"resource_groups[{i}]: expected a one-key mapping such as `asg: {{tag: ...}}`")
        ((kind, body),) = item.items()
        if kind not in ("asg", "sfr", "simulated"):
            raise ValueError(f"resource_groups[{i}]: unknown group kind {kind!r} (known: asg, sfr, simulated)")
        body = body or {}
        if not isinstance(body, Mapping):
            raise ValueError(f"resource_groups[{i}].{kind}: expected a mapping")
        unknown = set(body) - {"tag", "s3"}
        if unknown:
            raise ValueError(f"resource_groups[{i}].{kind}: unknown key(s) {', '.join(sorted(unknown))}")
        s3 = body.get("s3") or {}
        groups.append(ResourceGroupConfig(kind, body.get("tag"), s3.get("bucket"), s3.get("prefix")))
    return tuple(groups)


@dataclass(frozen=True)
class ScalingLimits:
    min_capacity: int = field(check=non_negative)
    max_capacity: int = field(check=non_negative)
    max_weight_to_add: float = field(check=positive)
    max_weight_to_remove: float = field(check=positive)
    max_tasks_to_kill: int = field(0, check=non_negative)
    min_node_scalein_uptime_seconds: int = field(0, check=non_negative)

    def __post_init__(self) -> None:
        if self.min_capacity > self.max_capacity:
            raise ValueError(f"min_capacity ({self.min_capacity}) is greater than max_capacity ({self.max_capacity})")


@dataclass(frozen=True)
class PoolAutoscaling:
    """The pool file's ``autoscaling`` block; unset values fall back to the main file's defaults."""

    setpoint: float | None = field(None, check=fraction)
    target_capacity_margin: float | None = field(None, check=unit_interval)
    excluded_resources: tuple[str, ...] | None = None
    prevent_scale_down_after_capacity_loss: bool = False
    instance_loss_threshold: int | None = field(None, check=non_negative)
    orphan_instance_uptime_threshold_seconds: int = field(1800, check=positive)


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
    alert_on_max_capacity: bool = True
    prometheus_queries: PrometheusQueries = field(default_factory=PrometheusQueries)

    IGNORED_KEYS: ClassVar = frozenset({"sensu_config", "node_migration", "pool_owner", "paasta_cluster"})

    def __post_init__(self) -> None:
        if "__default__" in self.app_signals:
            raise ValueError("app_signals: __default__ is the default signal's app name and cannot be used")


@dataclass(frozen=True)
class PoolIdentity:
    cluster: str
    pool: str
    scheduler: Scheduler

    @property
    def pool_with_scheduler(self) -> str:
        """How Clusterman names the pool in metric dimensions: ``<pool>.<scheduler>``."""
        return f"{self.pool}.{self.scheduler.value}"

    def __str__(self) -> str:
        return f"{self.cluster}/{self.pool}.{self.scheduler.value}"

"""Open the metrics store that srv-configs' ``metrics`` block names. Nothing connects until first use."""

from __future__ import annotations

from pathlib import Path

from clusterman.aws.session import AwsSettings
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricsBackend
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.datastore.dynamodb import DynamoDBStore
from clusterman.datastore.prometheus import PrometheusStore
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore


def sqlite_path(main: MainConfig) -> Path:
    """``metrics.sqlite_path``, taken relative to ``state_directory`` unless absolute."""
    path = Path(main.metrics.sqlite_path)
    return path if path.is_absolute() else Path(main.state_directory) / path


def open_store(
    main: MainConfig,
    pool: PoolConfig | None = None,
    identity: PoolIdentity | None = None,
    timeout_seconds: float | None = None,
) -> MetricsStore:
    """The configured store; Prometheus needs the pool (its queries) and the pool's identity.
    ``timeout_seconds``: one call to a remote store, its retries included, at most that."""
    metrics = main.metrics
    if metrics.backend is MetricsBackend.SQLITE:
        return SqliteStore(sqlite_path(main), metrics.retention_days)
    if metrics.backend is MetricsBackend.DYNAMODB:
        settings = AwsSettings.from_config(main.aws, metrics.dynamodb.region)
        return DynamoDBStore(settings, metrics.dynamodb, metrics.retention_days, call_budget_seconds=timeout_seconds)
    if pool is None or identity is None:
        raise MetricsError(
            "the prometheus metrics backend reads a pool's prometheus_queries: name the cluster and pool"
        )
    prometheus = metrics.prometheus
    timeout = (
        prometheus.timeout_seconds if timeout_seconds is None else min(prometheus.timeout_seconds, timeout_seconds)
    )
    return PrometheusStore(prometheus.url, pool.prometheus_queries, identity, prometheus.step_seconds, timeout)

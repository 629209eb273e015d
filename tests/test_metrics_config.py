"""The ``metrics`` block, pools' ``prometheus_queries``, and the store they open."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterman.config import ConfigError
from clusterman.config import PoolIdentity
from clusterman.config import Scheduler
from clusterman.config import load_main_config
from clusterman.config import load_pool_config
from clusterman.core.config import MetricsBackend
from clusterman.core.config import MetricType
from clusterman.core.config import PrometheusQueries
from clusterman.datastore.dynamodb import DynamoDBStore
from clusterman.datastore.prometheus import PrometheusStore
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsError
from clusterman.run.budget import metrics_timeout
from clusterman.wiring.metrics_store import open_store

REPO = Path(__file__).resolve().parents[1]
LIMITS = "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}\n"
WEB = PoolIdentity("c1", "web", Scheduler.KUBERNETES)


def tree(tmp_path, main_text, pool_text=LIMITS):
    (tmp_path / "clusterman.yaml").write_text(main_text + "\ncluster_config_directory: pools\n")
    (tmp_path / "pools" / "c1").mkdir(parents=True)
    (tmp_path / "pools" / "c1" / "web.kubernetes").write_text(pool_text)
    return load_main_config(tmp_path / "clusterman.yaml")


def test_defaults_are_sqlite_under_the_state_directory(tmp_path):
    main = tree(tmp_path, "state_directory: st")
    assert main.metrics.backend is MetricsBackend.SQLITE
    store = open_store(main)
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "st" / "metrics.sqlite3"
    assert not store.path.exists(), "opening a store touches nothing"
    (tmp_path / "abs").mkdir()
    main = tree(tmp_path / "abs", f"metrics: {{sqlite_path: {tmp_path}/elsewhere.db, retention_days: 3}}")
    store = open_store(main)
    assert isinstance(store, SqliteStore) and store.path == tmp_path / "elsewhere.db"
    assert store.retention_seconds == 3 * 86400


def test_dynamodb_block(tmp_path):
    main = tree(
        tmp_path,
        "aws: {region: eu-west-1, endpoint_url: 'http://127.0.0.1:5000'}\n"
        "metrics:\n  backend: dynamodb\n  dynamodb: {app_metrics_table: my_apps, ttl_attribute: ttl}\n",
    )
    store = open_store(main)
    assert isinstance(store, DynamoDBStore)
    assert store.settings.region == "eu-west-1" and store.settings.endpoint_url == "http://127.0.0.1:5000"
    assert store.tables.table(MetricType.APP_METRICS) == "my_apps"
    assert store.tables.table(MetricType.SYSTEM_METRICS) == "clusterman_system_metrics"
    assert store.retention_seconds == 30 * 86400
    assert store.call_budget_seconds is None  # commands: botocore's limits


def test_a_runs_remote_metrics_store_calls_are_bounded_by_a_quarter_of_its_budget(tmp_path):
    assert metrics_timeout(None) is None and metrics_timeout(60.0) == 15.0
    (tmp_path / "d").mkdir()
    (tmp_path / "p").mkdir()
    main = tree(tmp_path / "d", "aws: {region: eu-west-1}\nmetrics: {backend: dynamodb}\n")
    store = open_store(main, timeout_seconds=metrics_timeout(60.0))
    assert isinstance(store, DynamoDBStore) and store.call_budget_seconds == 15.0
    main = tree(
        tmp_path / "p", "metrics: {backend: prometheus, prometheus: {url: 'http://prom:9090/', timeout_seconds: 30}}"
    )
    pool = load_pool_config(main, WEB)
    store = open_store(main, pool, WEB, timeout_seconds=metrics_timeout(8.0))
    assert isinstance(store, PrometheusStore) and store.timeout_seconds == 2.0


def test_prometheus_block_and_pool_queries(tmp_path):
    main = tree(
        tmp_path,
        "metrics: {backend: prometheus, prometheus: {url: 'http://prom:9090/', step_seconds: 30}}",
        LIMITS
        + "prometheus_queries:\n"
        + '  system_metrics:\n    cpus_allocated: \'sum(requests{cluster="$cluster", pool="$pool"})\'\n'
        + "  app_metrics:\n    'seagull,queue': 'max(queue{app=\"$app\", sched=\"$scheduler\"})'\n",
    )
    pool = load_pool_config(main, WEB)
    store = open_store(main, pool, WEB)
    assert isinstance(store, PrometheusStore) and store.url == "http://prom:9090" and store.step_seconds == 30
    assert store.query_for(MetricType.SYSTEM_METRICS, "cpus_allocated|cluster=c1,pool=web.kubernetes") == (
        'sum(requests{cluster="c1", pool="web"})'
    )
    assert store.query_for(MetricType.APP_METRICS, "seagull,queue") == 'max(queue{app="seagull", sched="kubernetes"})'
    # another pool's key fills in that pool's dimensions, not this store's
    assert store.query_for(MetricType.SYSTEM_METRICS, "cpus_allocated|cluster=c2,pool=db.mesos") == (
        'sum(requests{cluster="c2", pool="db"})'
    )
    assert store.keys(MetricType.SYSTEM_METRICS) == ["cpus_allocated|cluster=c1,pool=web.kubernetes"]
    with pytest.raises(MetricsError, match="the prometheus metrics backend reads a pool's prometheus_queries"):
        open_store(main)


@pytest.mark.parametrize(
    ("block", "key", "problem"),
    [
        ("metrics: {backend: influx}", "metrics.backend", "expected one of sqlite, dynamodb, prometheus"),
        ("metrics: {retention_days: -1}", "metrics.retention_days", "must be at least 0"),
        ("metrics: {prometheus: {step_seconds: 0}}", "metrics.prometheus.step_seconds", "greater than 0"),
        ("metrics: {dynamodb: {ttl: 5}}", "metrics.dynamodb.ttl", "unknown key"),
    ],
)
def test_bad_metrics_blocks(tmp_path, block, key, problem):
    with pytest.raises(ConfigError) as e:
        tree(tmp_path, block)
    assert e.value.key == key and problem in e.value.problem


@pytest.mark.parametrize(
    ("queries", "problem"),
    [
        ("{system_metrics: {cpus: ''}}", "cpus: expected a PromQL expression"),
        ("{system_metrics: {cpus: 'sum(x{c=\"$cluser\"})'}}", "cpus: unknown variable(s) cluser"),
        ("{system_metrics: {cpus: 'x * $'}}", "cpus: a lone '$'"),
        ("{app_metrics: {queue: 'x'}}", "queue: name app metrics as `app,name`"),
    ],
)
def test_bad_prometheus_queries(tmp_path, queries, problem):
    main = tree(tmp_path, "")
    (tmp_path / "pools" / "c1" / "web.kubernetes").write_text(LIMITS + f"prometheus_queries: {queries}\n")
    with pytest.raises(ConfigError, match="prometheus_queries") as e:
        load_pool_config(main, WEB)
    assert problem in e.value.problem


def test_prometheus_queries_for_each_type():
    queries = PrometheusQueries(metadata={"target_capacity": "x"})
    assert queries.for_type(MetricType.METADATA) == {"target_capacity": "x"}
    assert queries.for_type(MetricType.SYSTEM_METRICS) == {}


def test_shipped_config_opens_the_embedded_store():
    main = load_main_config(REPO / "config" / "clusterman.yaml")
    assert isinstance(open_store(main), SqliteStore)

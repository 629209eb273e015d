"""Metrics-store fixtures: one seeded store per backend, real servers on loopback, nothing patched."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusterman.aws.session import AwsSettings
from clusterman.core.config import DynamoDBMetricsConfig
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import PrometheusQueries
from clusterman.core.config import Scheduler
from clusterman.datastore.dynamodb import DynamoDBStore
from clusterman.datastore.prometheus import PrometheusStore
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import app_key
from clusterman.datastore.store import system_key
from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer
from itests.datastore.prometheus import Exporter
from itests.prometheus_server import PrometheusServer

SYS = MetricType.SYSTEM_METRICS
APP = MetricType.APP_METRICS
META = MetricType.METADATA
IDENTITY = PoolIdentity("c1", "web", Scheduler.KUBERNETES)

# The known data every readable backend holds (the exporter serves the same values to Prometheus).
WEB_CPUS = system_key("test_cpus", "c1", "web.kubernetes")  # 42
OTHER_CPUS = system_key("test_cpus", "c1", "other.kubernetes")  # 7
NO_DATA = system_key("test_cpus", "c1", "nodata.kubernetes")

SEAGULL_QUEUE = app_key("seagull", "queue_depth")  # 5
ALBATROSS_QUEUE = app_key("albatross", "queue_depth")  # 9
KNOWN = {(SYS, WEB_CPUS): 42.0, (SYS, OTHER_CPUS): 7.0, (APP, SEAGULL_QUEUE): 5.0, (APP, ALBATROSS_QUEUE): 9.0}


@pytest.fixture(autouse=True, scope="session")
def fake_aws_credentials() -> None:
    """boto3 signs every request, even to a canned server: set the fake credentials here, as the
    moto_server fixture does, rather than count on an earlier test in this worker having started it."""
    os.environ.update(FAKE_CREDENTIALS)


PROMQL = PrometheusQueries(
    system_metrics={"test_cpus": 'sum(clusterman_test_cpus{cluster="$cluster",pool="$pool"})'},
    app_metrics={
        SEAGULL_QUEUE: 'sum(clusterman_test_queue{app="$app"})',
        ALBATROSS_QUEUE: 'sum(clusterman_test_queue{app="$app"})',
    },
)


def unique_tables() -> DynamoDBMetricsConfig:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    return DynamoDBMetricsConfig(f"{prefix}_system", f"{prefix}_app", f"{prefix}_metadata")


def dynamodb_store(moto: MotoServer, tables: DynamoDBMetricsConfig, retention_days: int = 0) -> DynamoDBStore:
    """Small query pages, so a two-minute window already crosses several (pagination runs)."""
    settings = AwsSettings("us-west-2", moto.url)
    return DynamoDBStore(settings, tables, retention_days, page_size=7, max_attempts=2)


@dataclass
class Backend:
    """A store under test, and how to open a second handle on the same data (a new process would)."""

    name: str
    store: MetricsStore
    reopen: Callable[[], MetricsStore]
    now: int


WRITABLE = ["memory", "sqlite", "dynamodb"]


def make_writable(name: str, tmp_path: Path, moto: Callable[[], MotoServer]) -> Backend:
    now = int(time.time())
    if name == "memory":
        mem = InMemoryStore()
        return Backend(name, mem, lambda: mem, now)
    if name == "sqlite":
        path = tmp_path / "state" / "metrics.sqlite3"
        sqlite = SqliteStore(path)
        sqlite.create()
        return Backend(name, sqlite, lambda: SqliteStore(path), now)
    server, tables = moto(), unique_tables()
    store = dynamodb_store(server, tables)
    store.create()
    return Backend(name, store, lambda: dynamodb_store(server, tables), now)


def seed(store: MetricsStore, now: int) -> None:
    store.write(
        Point(metric_type, key, ts, value)
        for (metric_type, key), value in KNOWN.items()
        for ts in range(now - 120, now + 1)
    )


@pytest.fixture(params=WRITABLE)
def writable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend = make_writable(request.param, tmp_path, lambda: request.getfixturevalue("moto_server"))
    yield backend
    backend.store.close()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    exporter = Exporter().start()
    try:
        with PrometheusServer(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{exporter.port}"]) as server:
            server.wait_for_samples('sum(clusterman_test_cpus{pool="web"})', count=4)
            yield server
    finally:
        exporter.stop()


@pytest.fixture(params=[*WRITABLE, "prometheus"])
def readable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every backend, holding ``KNOWN`` (1 s apart over the last two minutes, or as scraped)."""
    if request.param == "prometheus":
        server: PrometheusServer = request.getfixturevalue("prometheus")

        def open_prometheus() -> PrometheusStore:
            return PrometheusStore(server.url, PROMQL, IDENTITY, step_seconds=1, timeout_seconds=5)

        backend = Backend("prometheus", open_prometheus(), open_prometheus, int(time.time()))
    else:
        backend = make_writable(request.param, tmp_path, lambda: request.getfixturevalue("moto_server"))
        seed(backend.store, backend.now)
    yield backend
    backend.store.close()

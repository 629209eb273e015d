"""Every backend turns every failure to reach or read its store into one clear MetricsError."""

from __future__ import annotations

import sqlite3
import time

import pytest

from clusterman.aws.session import AwsSettings
from clusterman.core.config import PrometheusQueries
from clusterman.datastore.dynamodb import DynamoDBStore
from clusterman.datastore.prometheus import PrometheusStore
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import Point
from clusterman.datastore.store import UnusableStore
from clusterman.local.moto_server import free_port
from clusterman_signals.wire import gc_paused
from itests.datastore.conftest import IDENTITY
from itests.datastore.conftest import PROMQL
from itests.datastore.conftest import SYS
from itests.datastore.conftest import WEB_CPUS
from itests.datastore.conftest import dynamodb_store
from itests.datastore.conftest import unique_tables
from itests.datastore.fake_http import CannedServer
from itests.datastore.fake_http import dynamodb_error
from itests.datastore.fake_http import dynamodb_unprocessed

POINT = Point(SYS, WEB_CPUS, 1_700_000_000, 1.0)

# -- SQLite ---------------------------------------------------------------------------------------


def test_sqlite_missing_file_is_one_clear_message(tmp_path):
    store = SqliteStore(tmp_path / "nowhere" / "metrics.sqlite3")
    for attempt in (lambda: store.read(SYS, WEB_CPUS, 0, 10), lambda: store.keys(SYS)):
        with pytest.raises(MetricsError, match=r"metrics\.sqlite3: no metrics database here .*sqlite_path"):
            attempt()
    assert not (tmp_path / "nowhere").exists(), "a read must not create the file"


def test_sqlite_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "metrics.sqlite3"
    path.write_bytes(b"certainly not SQLite " * 100)
    with pytest.raises(MetricsError, match="not a SQLite database: move it aside and the next write makes a new one"):
        SqliteStore(path).read(SYS, WEB_CPUS, 0, 10)
    path.rename(tmp_path / "metrics.sqlite3.damaged")
    SqliteStore(path).write([POINT])  # as the message says
    assert SqliteStore(path).read(SYS, WEB_CPUS, 0, 10**10)


def test_sqlite_database_of_something_else(tmp_path):
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.close()
    with pytest.raises(MetricsError, match="not a clusterman metrics database"):
        SqliteStore(path).write([POINT])


def test_sqlite_missing_table(tmp_path):
    path = tmp_path / "metrics.sqlite3"
    SqliteStore(path).write([POINT])
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE points")
    conn.close()
    with pytest.raises(MetricsError, match=r"a metrics table is missing.*no such table: points"):
        SqliteStore(path).read(SYS, WEB_CPUS, 0, 2**40)


def test_sqlite_locked_beyond_the_busy_timeout(tmp_path):
    path = tmp_path / "metrics.sqlite3"
    SqliteStore(path).create()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(MetricsError, match=r"held the database for more than 0.2 s") as busy:
            SqliteStore(path, busy_timeout_seconds=0.2).write([POINT])
        assert not isinstance(busy.value, UnusableStore)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    SqliteStore(path).write([POINT])  # and once released, writing works


def test_sqlite_directory_that_cannot_exist(tmp_path):
    """The configuration's fault, read or write: the bootstrap rolls a configuration that meets it back."""
    (tmp_path / "a-file").write_text("")
    store = SqliteStore(tmp_path / "a-file" / "metrics.sqlite3")
    for attempt in (lambda: store.write([POINT]), lambda: store.read(SYS, WEB_CPUS, 0, 10)):
        with pytest.raises(
            UnusableStore, match=rf"{tmp_path / 'a-file'} is not a directory: check metrics.sqlite_path"
        ):
            attempt()
    with pytest.raises(MetricsError, match="no metrics database here") as not_yet:  # the collector makes it
        SqliteStore(tmp_path / "metrics.sqlite3").read(SYS, WEB_CPUS, 0, 10)
    assert not isinstance(not_yet.value, UnusableStore)


# -- DynamoDB -------------------------------------------------------------------------------------


def test_dynamodb_missing_table(moto_server):
    tables = unique_tables()
    store = dynamodb_store(moto_server, tables)
    for attempt in (lambda: store.read(SYS, WEB_CPUS, 0, 10), lambda: store.write([POINT]), lambda: store.keys(SYS)):
        with pytest.raises(UnusableStore, match=rf"DynamoDB table {tables.system_metrics_table} not found at .*init"):
            attempt()


def test_dynamodb_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    store = DynamoDBStore(AwsSettings("us-west-2", url), unique_tables(), max_attempts=2, connect_timeout_seconds=1)
    for attempt in (lambda: store.read(SYS, WEB_CPUS, 0, 10), lambda: store.write([POINT])):
        with pytest.raises(MetricsError, match=rf"cannot reach DynamoDB at {url}"):
            attempt()


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_dynamodb_throttled_after_retries(code):
    with CannedServer(dynamodb_error(code)) as server:
        store = DynamoDBStore(AwsSettings("us-west-2", server.url), unique_tables(), max_attempts=2)
        with pytest.raises(MetricsError, match=rf"read throttled \({code}\) after 2 attempts"):
            store.read(SYS, WEB_CPUS, 0, 10)
    assert len(server.requests) == 2, "botocore retried before giving up"


def test_dynamodb_items_left_unprocessed():
    with CannedServer(dynamodb_unprocessed) as server:
        store = DynamoDBStore(AwsSettings("us-west-2", server.url), unique_tables(), max_attempts=3)
        with pytest.raises(MetricsError, match=r"1 of 1 points still unprocessed after 3 attempts"):
            store.write([POINT])
    assert len(server.requests) == 3


def test_dynamodb_other_service_errors():
    with CannedServer(dynamodb_error("InternalServerError", status=500)) as server:
        store = DynamoDBStore(AwsSettings("us-west-2", server.url), unique_tables(), max_attempts=2)
        with pytest.raises(MetricsError, match=r"read failed at http://127.0.0.1:\d+: InternalServerError"):
            store.read(SYS, WEB_CPUS, 0, 10)


def test_dynamodb_missing_key_file(tmp_path):
    settings = AwsSettings("us-west-2", "http://127.0.0.1:1", str(tmp_path / "absent.json"))
    with pytest.raises(MetricsError, match=r"absent.json: AWS key file not found"):
        DynamoDBStore(settings, unique_tables()).read(SYS, WEB_CPUS, 0, 10)


def test_dynamodb_mapping_entry_named_like_an_attribute(moto_server):
    store = dynamodb_store(moto_server, unique_tables())
    with pytest.raises(MetricsError, match=r"mapping entries named timestamp clash"):
        store.write([Point(SYS, WEB_CPUS, 1, {"timestamp": 3.0})])


# -- Prometheus -----------------------------------------------------------------------------------


def prometheus_store(url: str, queries: PrometheusQueries = PROMQL) -> PrometheusStore:
    return PrometheusStore(url, queries, IDENTITY, step_seconds=1, timeout_seconds=2)


def test_prometheus_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(MetricsError, match=rf"cannot reach Prometheus at {url}"):
        prometheus_store(url).read(SYS, WEB_CPUS, 0, 10)


def test_prometheus_refuses_a_bad_query(prometheus):
    store = prometheus_store(prometheus.url, PrometheusQueries(system_metrics={"test_cpus": "sum(rate(oops[5m]"}))
    with pytest.raises(MetricsError, match=r"refused 'sum\(rate\(oops\[5m\]': bad_data: .*parse error"):
        store.read(SYS, WEB_CPUS, 0, 10)


def test_prometheus_query_with_several_series(prometheus):
    queries = PrometheusQueries(system_metrics={"test_cpus": "clusterman_test_cpus"})
    store = prometheus_store(prometheus.url, queries)
    now = int(time.time())
    with pytest.raises(MetricsError, match=r"returned 2 series .* aggregate it, e.g. sum"):
        store.read(SYS, WEB_CPUS, now - 3, now)


def test_prometheus_unmapped_metric(prometheus):
    with pytest.raises(MetricsError, match=r"no PromQL for system_metrics 'mem_allocated'.*prometheus_queries"):
        prometheus_store(prometheus.url).read(SYS, "mem_allocated|cluster=c1,pool=web.kubernetes", 0, 10)


def test_prometheus_behind_a_failing_proxy():
    reply = (503, {"Content-Type": "text/html"}, b"<html>upstream unavailable</html>")
    with (
        CannedServer(lambda body, headers: reply) as server,
        pytest.raises(MetricsError, match=r"answered HTTP 503: '<html>upstream unavailable"),
    ):
        prometheus_store(server.url).read(SYS, WEB_CPUS, 0, 10)
    assert len(server.requests) == 2, "a server error is asked twice"


def test_prometheus_is_read_only():
    store = prometheus_store("http://127.0.0.1:1")
    with pytest.raises(MetricsError, match="read-only"):
        store.write([POINT])
    store.write([])  # nothing to write is not an error


def test_dynamodb_that_does_not_answer_fails_a_call_within_its_budget():
    """A stopped DynamoDB (a port that accepts and never answers) held each read for 5 attempts x
    10 s; with the autoscaler's call budget (a quarter of its run's) the read fails within it."""
    from itests.recorded_api import SilentServer

    budget = 1.5
    attempt = max(1.0, budget / 3)  # each attempt's timeout, as aws.session.budget_config documents it
    attempts = 1 + int(budget // attempt)  # none is sent past the budget, and each lasts its timeout
    before = healthy_read_seconds(budget)
    silent = SilentServer()
    try:
        store = DynamoDBStore(AwsSettings("us-west-2", silent.url), unique_tables(), call_budget_seconds=budget)
        with gc_paused(), pytest.raises(MetricsError, match=f"DynamoDB at {silent.url}"):
            started = time.monotonic()
            store.read(SYS, WEB_CPUS, 0, 100)
        took = time.monotonic() - started
    finally:
        silent.close()
    # What the call costs besides waiting (making the client, each attempt's work) is measured:
    # the same read from a new store against a server that answers at once, just before and after.
    healthy = max(before, healthy_read_seconds(budget))
    print(f"the read failed after {took:.1f} s, {silent.connections} attempt(s); answered, {healthy:.2f} s")
    assert 1 <= silent.connections <= attempts
    # The last attempt begins within the budget and lasts its timeout; each may cost a healthy
    # read's work. Without the budget one attempt alone waited 10 s.
    assert took < budget + attempt + attempts * healthy, (took, healthy)


def healthy_read_seconds(budget: float) -> float:
    """How long the same read takes from a new store against a DynamoDB that answers at once."""
    empty = (200, {"Content-Type": "application/x-amz-json-1.0"}, b'{"Items": [], "Count": 0}')
    with CannedServer(lambda body, headers: empty) as server:
        store = DynamoDBStore(AwsSettings("us-west-2", server.url), unique_tables(), call_budget_seconds=budget)
        with gc_paused():
            started = time.monotonic()
            assert store.read(SYS, WEB_CPUS, 0, 100) == []
            return time.monotonic() - started

"""A real Prometheus scrapes the autoscaler's /metrics; values are read back via its query API."""

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterman.core.config import EventsConfig
from clusterman.core.model import NodeState
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources
from clusterman.events.event import ChangeDetail
from clusterman.events.exporter import ErrorSource
from clusterman.events.exporter import NodeAction
from clusterman.events.service import EventService
from itests.prometheus_server import PrometheusServer

POOL = "web.kubernetes"
DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana-dashboard.json"


@pytest.fixture
def service():
    service = EventService(EventsConfig(port=0, ring_capacity=100, publish_queue_size=1000), "itest", POOL).start()
    yield service
    service.stop()


@pytest.fixture
def prometheus(service, tmp_path):
    server = PrometheusServer(tmp_path, [f"127.0.0.1:{service.server.port}"]).start()
    yield server
    server.stop()


def eventually(read: Callable[[], object], expected: object, timeout: float = 30.0) -> None:
    """Poll until Prometheus has scraped the value (scrape interval 1 s)."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = read()
        if got == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"expected {expected!r}, Prometheus still says {got!r}")


def value(prometheus: PrometheusServer, expr: str) -> float | None:
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_autoscaler_metrics(service, prometheus):
    rec = service.recorder
    rec.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=30), 0.04)
    rec.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=31), 0.3)
    rec.signal_failed("batch", "Other@v2", "timed out", 5.0, "previous request", {"cpus": 2})
    rec.decision(
        ChangeDetail.DECISION_UTILISATION,
        2,
        target=12,
        demand=ResourceRequest(cpus=31),
        capacity=Resources(cpus=40, mem=160000),
        utilisation={"cpus": 0.775},
        setpoint=0.7,
        explanation="cpus above setpoint",
    )
    rec.lock_taken(300, "after scale-up")
    service.metrics.observe_nodes({NodeState.READY: 10, NodeState.TAINTED: 1})
    service.metrics.observe_group("asg-web", target=12, fulfilled=10, minimum=2, maximum=40)
    assert service.publisher.flush(10)

    labels = f'cluster="itest",pool="{POOL}"'
    eventually(lambda: value(prometheus, 'up{job="clusterman"}'), 1.0)
    eventually(lambda: value(prometheus, f"clusterman_utilisation_ratio{{{labels},resource='cpus'}}"), 0.775)
    eventually(lambda: value(prometheus, f"clusterman_capacity{{{labels},resource='mem'}}"), 160000.0)
    eventually(lambda: value(prometheus, f"clusterman_scale_delta{{{labels}}}"), 2.0)
    eventually(lambda: value(prometheus, f"clusterman_nodes{{{labels},state='tainted'}}"), 1.0)
    eventually(lambda: value(prometheus, f"clusterman_group_target_capacity{{{labels},group='asg-web'}}"), 12.0)
    eventually(lambda: value(prometheus, f"clusterman_scale_lock{{{labels}}}"), 1.0)
    eventually(lambda: value(prometheus, f"clusterman_signal_latency_seconds_count{{{labels},app='web'}}"), 2.0)
    eventually(
        lambda: value(prometheus, f"clusterman_signal_latency_seconds_bucket{{{labels},app='web',le='0.05'}}"), 1.0
    )
    eventually(lambda: value(prometheus, f"clusterman_signal_failures_total{{{labels},app='batch'}}"), 1.0)
    eventually(lambda: value(prometheus, f"clusterman_events_stored{{{labels}}}"), 6.0)
    eventually(lambda: value(prometheus, f"clusterman_events_dropped_total{{{labels}}}"), 0.0)

    # Values change between scrapes and Prometheus follows: the lock is released, events pile up.
    rec.lock_released()
    for _ in range(200):
        rec.lock_released()
    assert service.publisher.flush(10)
    eventually(lambda: value(prometheus, f"clusterman_scale_lock{{{labels}}}"), 0.0)
    eventually(lambda: value(prometheus, f"clusterman_events_stored{{{labels}}}"), 100.0)
    eventually(lambda: value(prometheus, f"clusterman_events_published_total{{{labels}}}"), 207.0)


def test_every_dashboard_query_runs_on_prometheus_against_real_series(service, prometheus):
    rec = service.recorder
    rec.signal_evaluated("web", "Sig@v1", ResourceRequest(cpus=30, mem=1000), 0.04)
    rec.signal_failed("web", "Sig@v1", "timed out", 5.0, "previous request", {"cpus": 2})
    rec.decision(
        ChangeDetail.DECISION_UTILISATION,
        0,
        target=12,
        demand=ResourceRequest(cpus=31, mem=1000),
        capacity=Resources(cpus=40, mem=160000),
        utilisation={"cpus": 0.775, "mem": 0.01},
        setpoint=0.7,
        explanation="within margin",
    )
    rec.node(NodeAction.JOIN, "i-1", "asg-web", Resources(cpus=4), join_seconds=80)
    rec.lock_taken(300, "after scale-up")
    rec.breaker_closed("ok")
    rec.resumed("ok")
    rec.config_reloaded("clusterman.yaml")
    rec.error(ErrorSource.CLOUD, "asg-web", "Throttling")
    metrics = service.metrics
    metrics.observe_run(1.5)
    metrics.observe_tasks(running=10, pending=2)
    metrics.observe_nodes({NodeState.READY: 3})
    metrics.observe_group("asg-web", target=12, fulfilled=10, minimum=2, maximum=40)
    assert service.publisher.flush(10)
    eventually(lambda: value(prometheus, f'clusterman_tasks{{pool="{POOL}",state="pending"}}'), 2.0)

    scraped = {r["metric"]["__name__"] for r in prometheus.query('count by (__name__) ({__name__=~"clusterman_.+"})')}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert len(exprs) > 20
    for expr in exprs:
        named = set(re.findall(r"clusterman_[a-z_]+", expr))
        assert named <= scraped, f"{expr}: no such series {named - scraped}"
        concrete = expr.replace("$cluster", "itest").replace("$pool", POOL).replace("$__rate_interval", "1m")
        if concrete.startswith("label_values("):  # a Grafana function: check the selector inside
            concrete = concrete[len("label_values(") : concrete.rindex(",")]
        prometheus.query(concrete)  # raises on a PromQL error

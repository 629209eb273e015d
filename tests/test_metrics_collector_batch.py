"""The collector batch: every pool, every interval, and a failure never ends the loop."""

import dataclasses
import json
import logging
import threading
import time

import pytest

from clusterman.batch import metrics_collector
from clusterman.batch.metrics_collector import collect_once
from clusterman.batch.metrics_collector import load_pools
from clusterman.batch.metrics_collector import run_forever
from clusterman.cli.main import main as cli_main
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.simulated_scheduler import LiveSimulatedConnector
from clusterman.config import load_main_config
from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.model import PoolSnapshot
from clusterman.datastore.store import InMemoryStore
from clusterman.datastore.store import MetricsError

GOOD = PoolIdentity("c1", "good", Scheduler.SIMULATED)
DOWN = PoolIdentity("c1", "down", Scheduler.KUBERNETES)
BUGGY = PoolIdentity("c1", "buggy", Scheduler.MESOS)


class Scripted:
    """A connector whose snapshots follow a script: a snapshot, or an exception to raise."""

    def __init__(self, *script, on_call=None):
        self.script = list(script)
        self.calls = []
        self.on_call = on_call

    def snapshot(self, now):
        self.calls.append(now)
        if self.on_call:
            self.on_call(now)
        step = self.script[min(len(self.calls), len(self.script)) - 1]
        if isinstance(step, Exception):
            raise step
        return PoolSnapshot(now)

    def close(self):
        pass


def cpus_allocated(store, identity):
    key = f"cpus_allocated|cluster=c1,pool={identity.pool_with_scheduler}"
    return store.read(MetricType.SYSTEM_METRICS, key, 0, 2**31)


def test_one_pool_failing_does_not_stop_the_others(caplog):
    store = InMemoryStore()
    pools = [
        (DOWN, Scripted(ConnectorError("kubernetes API http://k: cannot reach it"))),
        (BUGGY, Scripted(ZeroDivisionError("bug"))),
        (GOOD, Scripted("ok")),
    ]
    with caplog.at_level(logging.INFO):
        assert collect_once(pools, store, clock=lambda: 1000.0) == 2
    assert cpus_allocated(store, GOOD) == [(1000, 0.0)]
    assert "c1/down.kubernetes: no metrics this run: kubernetes API http://k: cannot reach it" in caplog.text
    assert "c1/buggy.mesos: no metrics this run: unexpected error" in caplog.text
    assert "ZeroDivisionError" in caplog.text  # a bug keeps its traceback in the log


def test_a_view_that_may_be_old_writes_no_points(caplog):
    class Stale(Scripted):
        def snapshot(self, now):
            return dataclasses.replace(super().snapshot(now), stale="the watch of the pool's nodes has not heard")

    store = InMemoryStore()
    with caplog.at_level(logging.INFO):
        assert collect_once([(GOOD, Stale("ok"))], store, clock=lambda: 1000.0) == 1
    assert cpus_allocated(store, GOOD) == []  # old data would look fresh to the signals
    assert "no metrics this run: the watch of the pool's nodes has not heard" in caplog.text


def test_a_store_failure_is_a_failed_pool():
    class Broken(InMemoryStore):
        def write(self, points):
            raise MetricsError("sqlite /var/lib/clusterman/datastore.db: disk full")

    assert collect_once([(GOOD, Scripted("ok"))], Broken(), clock=lambda: 0.0) == 1


class FakeTime:
    """A clock that moves only when told to, and a stop event whose waits move it."""

    def __init__(self, runs):
        self.now = 1000.0
        self.waits = []
        self.stop = threading.Event()
        self.runs = runs

    def clock(self):
        return self.now

    def wait(self, timeout=None):
        self.waits.append(round(timeout, 6))
        self.now += timeout
        if len(self.waits) >= self.runs:
            self.stop.set()
        return self.stop.is_set()


def test_the_loop_keeps_a_fixed_grid_skips_missed_slots_and_survives_failures():
    fake = FakeTime(runs=4)
    durations = iter([1.0, 130.0, 1.0, 1.0])

    def run_takes(now):
        fake.now += next(durations)

    connector = Scripted("ok", ConnectorError("down"), "ok", on_call=run_takes)
    fake.stop.wait = fake.wait
    run_forever([(GOOD, connector)], InMemoryStore(), 60.0, fake.stop, clock=fake.clock, monotonic=fake.clock)
    # started at 1000: run, wait to 1060; a 130 s run (failing) overruns 1120, so the next slot is 1240
    assert connector.calls == [1000.0, 1060.0, 1240.0, 1300.0]
    assert fake.waits == [59.0, 50.0, 59.0, 59.0]


def test_the_loop_stops_when_asked():
    stop = threading.Event()
    connector = Scripted("ok", on_call=lambda now: stop.set())
    started = time.monotonic()
    run_forever([(GOOD, connector)], InMemoryStore(), 3600.0, stop)
    assert len(connector.calls) == 1 and time.monotonic() - started < 5


POOL_FILE = """
resource_groups:
  - simulated: {tag: sim-group}
scaling_limits: {min_capacity: 2, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}
simulation:
  join_delay_seconds: 0
  node_resources: {cpus: 4, mem: 16000}
  tasks:
    - {count: 3, cpus: 0.5, mem: 100}
"""


@pytest.fixture
def config_dir(tmp_path):
    (tmp_path / "clusterman.yaml").write_text(
        "clusters:\n  c1: {aws_region: us-west-2}\ncluster_config_directory: pools\n"
        "batches:\n  cluster_metrics: {run_interval_seconds: 60}\n"
    )
    pools = tmp_path / "pools" / "c1"
    pools.mkdir(parents=True)
    (pools / "good.simulated").write_text(POOL_FILE)
    (pools / "typo.simulated").write_text(POOL_FILE.replace("scaling_limits", "scaling_limit"))
    (pools / "kube.kubernetes").write_text(POOL_FILE)  # c1 names no kubeconfig_path
    (pools / "README").write_text("not a pool")
    return tmp_path


def test_pools_with_bad_config_are_left_out_and_named(config_dir, caplog):
    main = load_main_config(config_dir / "clusterman.yaml")
    with caplog.at_level(logging.ERROR):
        pools = load_pools(main, "c1", [])
    # c1 names no kubeconfig: its Kubernetes pool is read in-cluster (or with $KUBECONFIG) when run
    assert [(i.pool, type(c)) for i, c in pools] == [("good", LiveSimulatedConnector), ("kube", KubernetesConnector)]
    assert "typo.simulated: scaling_limit: unknown key" in caplog.text
    assert [i.pool for i, _ in load_pools(main, "c1", ["good.simulated"])] == ["good"]
    with pytest.raises(ConfigError, match="no pool file for nope"):
        load_pools(main, "c1", ["nope"])
    with pytest.raises(ConfigError, match="no pool to collect"):
        load_pools(main, "c1", ["typo"])


def test_a_scheduler_api_call_waits_at_most_one_run_interval(config_dir):
    # each attempt a third of run_interval_seconds (60): a silent API server holds a run, not the collector
    (config_dir / "clusterman.yaml").write_text(
        "clusters:\n  c1: {aws_region: us-west-2, kubeconfig_path: /etc/kube.conf}\n"
        "cluster_config_directory: pools\nbatches:\n  cluster_metrics: {run_interval_seconds: 60}\n"
    )
    main = load_main_config(config_dir / "clusterman.yaml")
    (kube,) = [c for i, c in load_pools(main, "c1", ["kube"])]
    assert isinstance(kube, KubernetesConnector) and kube.timeout_seconds == 20.0


def test_once_to_stdout_through_the_cli(config_dir, capsys):
    status = cli_main(
        [
            "--env-config-path",
            str(config_dir / "clusterman.yaml"),
            "collect-metrics",
            "--cluster",
            "c1",
            "--pool",
            "good",
            "--once",
            "--store",
            "stdout",
        ]
    )
    assert status == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    values = {p["key"].split("|")[0]: p["value"] for p in lines}
    assert values["cpus_allocated"] == 1.5 and values["cpus_total"] == 8.0 and values["target_capacity"] == 2.0
    assert values["fulfilled_capacity"] == {"<m5.large, us-west-2a>": 2.0}
    assert {p["key"].split("|")[1] for p in lines} == {"cluster=c1,pool=good.simulated"}


def test_user_errors_are_one_line(config_dir, capsys):
    args = ["--env-config-path", str(config_dir / "clusterman.yaml"), "--cluster", "c1", "--pool", "good", "--once"]
    assert metrics_collector.main([*args, "--store", "dynamo"]) == 1
    assert (
        capsys.readouterr().err.strip()
        == "metrics_collector: --store: dynamo: unknown metrics store (known: config, memory, stdout)"
    )
    assert metrics_collector.main(["--env-config-path", str(config_dir / "clusterman.yaml"), "--cluster", ""]) == 1
    assert "--cluster: required" in capsys.readouterr().err

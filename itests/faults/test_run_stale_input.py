"""Decisions on frozen demand: a real autoscaler process, a real signal runner, the real SQLite store.

The signal needs ``cpus_allocated`` for its 10-minute window. When that window holds no point (the
newest is older: the collector stopped) or the run could not write the pool's metrics itself
(``--collect-metrics`` with the database held by another writer), the run does not scale down,
and the line and the log say why. Before, the pool was shrunk on the frozen answer, silently.
"""

from __future__ import annotations

import sqlite3
import time
import uuid

from clusterman.core.config import MetricType
from clusterman.datastore.sqlite import SqliteStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import system_key
from itests.aws_world import REGION
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import start_runner
from itests.faults.autoscaler_procs import steady_signal
from itests.faults.autoscaler_procs import write_config


def setup_pool(tmp_path, moto_server, point_age):
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=6)
    namespace = f"ns{uuid.uuid4().hex[:10]}"
    database = tmp_path / "metrics.sqlite3"
    main = (
        f"aws: {{region: {REGION}, endpoint_url: '{moto_server.url}'}}\n"
        f"metrics: {{sqlite_path: '{database}'}}\n"
        f"autoscale_signal: {{name: Steady, namespace: {namespace}, branch_or_tag: v1, period_minutes: 1, "
        "required_metrics: [{name: cpus_allocated, type: system_metrics, minute_range: 10}]}\n"
    )
    pool_signal = "# scaled on the default signal\n"
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=1, extra_main=main, pool_signal=pool_signal)
    store = SqliteStore(database)
    store.create()
    key = system_key("cpus_allocated", world.cluster, f"{POOL}.simulated")
    store.write([Point(MetricType.SYSTEM_METRICS, key, int(time.time() - point_age), 1.0)])
    store.close()
    runner = start_runner(steady_signal(tmp_path, namespace), namespace, "__default__")
    return world, asg, config, database, runner


def run_once(config, world, *args):
    autoscaler = Autoscaler(config, world.cluster, "--once", *args)
    assert autoscaler.proc.wait(timeout=120) == 0, autoscaler.stderr()
    autoscaler.stop()
    return autoscaler


def test_signal_input_older_than_its_window_holds_scale_down(tmp_path, moto_server):
    world, asg, config, _, runner = setup_pool(tmp_path, moto_server, point_age=3600)
    try:
        done = run_once(config, world)
        [line] = done.lines()
        assert "no metric point in the signals' windows" in line and "no scale-down" in line, (line, done.stderr())
        assert "taint" not in line and world.desired(asg) == 6
        assert "input stale: no scale-down this run" in done.stderr()
    finally:
        runner.kill()
        runner.wait()


def test_metrics_that_cannot_be_written_hold_scale_down_and_say_so(tmp_path, moto_server):
    world, asg, config, database, runner = setup_pool(tmp_path, moto_server, point_age=30)
    writer = sqlite3.connect(database, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another writer holds the database: every write of the run fails
    try:
        done = run_once(config, world, "--collect-metrics")
        [line] = done.lines()
        assert "the pool's metrics could not be written (signals read older data): no scale-down" in line, line
        assert "taint" not in line and world.desired(asg) == 6
        assert "WARNING cannot write the pool's metrics" in done.stderr()
    finally:
        writer.close()
        runner.kill()
        runner.wait()

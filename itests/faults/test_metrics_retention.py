"""One bad point must never delete stored metrics (issue 11, item 8).

Retention used to be measured back from the newest *data* timestamp across every series, inside
each write: one point in milliseconds (or a file from years ago, then one current point) wiped
every series of every type. Now a write never deletes, points far in the future are refused, and
retention is measured from the wall clock by a separate pass. Real CLI and collector processes on
a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

DAY = 86400
CLUSTER_KEY = "cpus_allocated|cluster=c,pool=p.simulated"


def config(tmp_path: Path, retention_days: int = 1) -> str:
    (tmp_path / "pools" / "c").mkdir(parents=True, exist_ok=True)
    (tmp_path / "pools" / "c" / "p.simulated").write_text(
        "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}\n"
        "resource_groups: [{simulated: {tag: g1}}]\n"
        "simulation: {join_delay_seconds: 0, tasks: [{count: 2, cpus: 1, mem: 1000}]}\n"
    )
    path = tmp_path / "clusterman.yaml"
    path.write_text(
        f"clusters: {{c: {{}}}}\ncluster_config_directory: pools\nstate_directory: {tmp_path / 'state'}\n"
        f"metrics: {{backend: sqlite, retention_days: {retention_days}}}\n"
    )
    return str(path)


def cli(config_path: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "clusterman.cli.main", "--env-config-path", config_path, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def stored(tmp_path: Path) -> dict[str, int]:
    with sqlite3.connect(tmp_path / "state" / "metrics.sqlite3") as conn:
        rows = conn.execute("SELECT s.key, count(*) FROM points p JOIN series s ON s.id = p.series GROUP BY s.key")
        return dict(rows.fetchall())


def write(
    config_path: str, metric_type: str, key: str, timestamp: int, value: str = "1"
) -> subprocess.CompletedProcess[str]:
    return cli(config_path, "metrics", "write", "--type", metric_type, "--key", key, "--value", value,
               "--timestamp", str(timestamp))  # fmt: skip


def test_a_millisecond_timestamp_is_refused_and_deletes_nothing(tmp_path):
    conf = config(tmp_path)
    now = int(time.time())
    assert write(conf, "app_metrics", "batch,queue", now - 60).returncode == 0
    assert write(conf, "system_metrics", CLUSTER_KEY, now - 30).returncode == 0
    assert write(conf, "metadata", "target_capacity|cluster=c,pool=p.simulated", now).returncode == 0

    bad = write(conf, "app_metrics", "batch,queue", now * 1000)
    assert bad.returncode == 1
    assert "batch,queue: timestamp" in bad.stderr and "in milliseconds?" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
    later = write(conf, "app_metrics", "batch,queue", now + 3600)  # an hour ahead: a wrong clock
    assert later.returncode == 1 and "ahead of this host's clock" in later.stderr, later.stderr

    assert stored(tmp_path) == {"batch,queue": 1, CLUSTER_KEY: 1, "target_capacity|cluster=c,pool=p.simulated": 1}


def test_old_data_then_a_current_point_keeps_both(tmp_path):
    conf = config(tmp_path, retention_days=1)
    now = int(time.time())
    old = now - 400 * DAY  # a file dated more than a year ago, loaded for a look at history
    data = {"system_metrics": {CLUSTER_KEY: [[old + 60 * i, float(i)] for i in range(50)]}}
    (tmp_path / "old.json").write_text(json.dumps(data))
    loaded = cli(conf, "metrics", "load", "--input", str(tmp_path / "old.json"))
    assert loaded.returncode == 0, loaded.stderr

    assert write(conf, "app_metrics", "batch,queue", now).returncode == 0
    assert stored(tmp_path) == {CLUSTER_KEY: 50, "batch,queue": 1}, "a write never deletes"
    assert "50 points are older than the retention (1 days)" in loaded.stdout, loaded.stdout


def test_the_collectors_retention_pass_goes_by_the_wall_clock(tmp_path):
    conf = config(tmp_path, retention_days=1)
    now = int(time.time())
    old_key = "cpus_allocated|cluster=gone,pool=p.simulated"
    data = {
        "system_metrics": {old_key: [[now - 3 * DAY, 1.0], [now - DAY // 2, 2.0]], CLUSTER_KEY: [[now - 2 * DAY, 3.0]]}
    }
    (tmp_path / "mixed.json").write_text(json.dumps(data))
    assert cli(conf, "metrics", "load", "--input", str(tmp_path / "mixed.json")).returncode == 0

    collected = subprocess.run(
        [sys.executable, "-m", "clusterman.batch.metrics_collector", "--env-config-path", conf,
         "--cluster", "c", "--once"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    assert "retention: removed 2 points" in collected.stderr, collected.stderr
    after = stored(tmp_path)
    assert after[old_key] == 1, "the point younger than a day by the wall clock stays"
    assert after[CLUSTER_KEY] >= 1, "the collector's own point, written now, stays"
    read = cli(conf, "metrics", "read", "--type", "system_metrics", "--key", CLUSTER_KEY, "--minutes", "5", "--json")
    assert [p[1] for p in json.loads(read.stdout)["points"]] == [2.0], "two 1-cpu tasks, written just now"


def test_a_failed_retention_pass_loses_nothing_and_runs_again_later(tmp_path, caplog):
    from clusterman.core.config import MetricType
    from clusterman.datastore.sqlite import SqliteStore
    from clusterman.datastore.store import Point
    from clusterman.datastore.store import RetentionPass

    now = time.time()
    store = SqliteStore(tmp_path / "m.sqlite3", retention_days=1, busy_timeout_seconds=0.2)
    store.write([Point(MetricType.APP_METRICS, "a,b", int(now) - 2 * DAY, 1.0)])
    retention = RetentionPass(store, every_seconds=3600)
    other = subprocess.Popen(  # another process holds the database
        [sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
         " c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(600)", str(store.path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        assert retention(now) == 0
        assert "retention pass failed (tried again in 3600 s)" in caplog.text and "m.sqlite3" in caplog.text
    finally:
        other.kill()
        other.wait()
    store.write([Point(MetricType.APP_METRICS, "a,b", int(now), 2.0)])
    assert retention(now + 60) == 0, "not before the hour is up"
    assert retention(now + 3600) == 1
    assert store.read(MetricType.APP_METRICS, "a,b", 0, int(now) + 10) == [(int(now), 2.0)]
    store.close()

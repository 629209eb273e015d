"""The collector as a real process: from srv-configs to points, against a recorded Kubernetes API on
loopback and a simulated pool; a SIGTERM ends the loop cleanly."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.recorded_api import kubeconfig
from itests.recorded_api import load
from itests.recorded_api import recorded_api

POOL_LIMITS = "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 5, max_weight_to_remove: 5}\n"


def write_config(tmp_path, kubeconfig_path, interval=60):
    (tmp_path / "clusterman.yaml").write_text(
        f"clusters:\n  kube-prod: {{kubeconfig_path: {kubeconfig_path}}}\n  sim: {{}}\n"
        f"cluster_config_directory: pools\nbatches:\n  cluster_metrics: {{run_interval_seconds: {interval}}}\n"
    )
    (tmp_path / "pools" / "kube-prod").mkdir(parents=True)
    (tmp_path / "pools" / "kube-prod" / "default.kubernetes").write_text(POOL_LIMITS + "exclude_daemonset_pods: true\n")
    (tmp_path / "pools" / "sim").mkdir(parents=True)
    (tmp_path / "pools" / "sim" / "local.simulated").write_text(
        POOL_LIMITS + "resource_groups: [{simulated: {tag: g1}}]\n"
        "simulation: {join_delay_seconds: 0, tasks: [{count: 2, cpus: 1, mem: 1000}]}\n"
    )
    return str(tmp_path / "clusterman.yaml")


def collector(config, *args):
    return [sys.executable, "-m", "clusterman.batch.metrics_collector", "--env-config-path", config, *args]


def points(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_once_against_recorded_kubernetes(tmp_path):
    with recorded_api() as api:
        api.serve("/api/v1/nodes", load("kubernetes/nodes.json"), kubernetes_list=True)
        api.serve("/api/v1/pods", load("kubernetes/pods.json"), kubernetes_list=True)
        config = write_config(tmp_path, kubeconfig(tmp_path / "kubeconfig", api.url))
        done = subprocess.run(
            collector(config, "--cluster", "kube-prod", "--once", "--store", "stdout"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    got = {(p["type"], p["key"]): p["value"] for p in points(done.stdout)}
    key = "|cluster=kube-prod,pool=default.kubernetes"
    assert got[("system_metrics", "cpus_allocated" + key)] == pytest.approx(0.75 + 2 + 1.35 + 0.1 + 0.5 + 1 + 0.3)
    assert got[("system_metrics", "cpus_pending" + key)] == pytest.approx(3.5)
    assert got[("system_metrics", "unschedulable_pods" + key)] == 3
    assert got[("metadata", "tainted_nodes" + key)] == 2
    assert got[("metadata", "cpus_total" + key)] == pytest.approx(3.795 + 4 * 3.92)
    assert ("metadata", "target_capacity" + key) not in got  # no cloud adapter wired: no target to report


def test_failing_pool_exits_1_with_the_reason(tmp_path):
    with recorded_api() as gone:
        url = gone.url
    config = write_config(tmp_path, kubeconfig(tmp_path / "kubeconfig", url))
    done = subprocess.run(
        collector(config, "--cluster", "kube-prod", "--once", "--store", "stdout"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert (
        f"kube-prod/default.kubernetes: no metrics this run: kubernetes API {url}: listing nodes: cannot reach it"
        in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_the_loop_runs_every_interval_until_sigterm(tmp_path):
    config = write_config(tmp_path, "/nonexistent", interval=1)
    proc = subprocess.Popen(
        collector(config, "--cluster", "sim", "--store", "stdout"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline and len({p["timestamp"] for p in seen}) < 3:
            line = proc.stdout.readline()
            if line:
                seen.append(json.loads(line))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    stamps = sorted({p["timestamp"] for p in seen + points(out)})
    assert len(stamps) >= 3 and all(b - a >= 1 for a, b in pairwise(stamps))  # never faster
    allocated = [p["value"] for p in seen if p["key"].startswith("cpus_allocated|cluster=sim,pool=local.simulated")]
    assert allocated and allocated[-1] == 2.0


def test_a_wall_clock_stepped_back_does_not_stop_the_loop(tmp_path):
    """The interval is kept on the monotonic clock: a step back of an hour in the middle of a wait
    (``itests/faketime.py``) must not become an hour without metrics; the points carry the new time."""
    config = write_config(tmp_path, "/nonexistent", interval=2)
    offset = tmp_path / "faketime-offset"
    proc = subprocess.Popen(
        collector(config, "--cluster", "sim", "--store", "stdout"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **faked_clock(offset)},
    )
    try:
        first = json.loads(proc.stdout.readline())["timestamp"]
        time.sleep(1)  # into the wait for the next run
        step_clock(offset, -3600)
        stepped = time.monotonic()
        runs: dict[int, float] = {}  # the runs after the step: timestamp -> when its first point came
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
        while len(runs) < 2 and time.monotonic() < stepped + 10:
            try:
                point = json.loads(lines.get(timeout=0.5))
            except queue.Empty:
                continue
            if point["timestamp"] < first - 3000:
                runs.setdefault(point["timestamp"], time.monotonic() - stepped)
    finally:
        proc.kill()
        proc.wait()
    # the wait under way ends on time; the one after it is the one a wall-clock grid stretched
    assert len(runs) == 2 and max(runs.values()) < 5, f"runs after the step (seconds after it): {runs}"


def test_a_stopped_collector_fails_its_liveness_probe_and_passes_again_when_continued(tmp_path):
    """Nothing restarted a SIGSTOPped or hung collector: the autoscaler saw its metrics go stale and
    held every scale-down, for good. With ``--heartbeat-file`` a liveness probe (``--check-heartbeat``,
    the same program) fails once no run finished for 3 intervals, so the collector's supervisor (a
    Kubernetes liveness probe) restarts it."""
    config = write_config(tmp_path, "/nonexistent", interval=1)
    beat = tmp_path / "collector.heartbeat"
    proc = subprocess.Popen(
        collector(config, "--cluster", "sim", "--store", "memory", "--heartbeat-file", str(beat)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def probe():
        return subprocess.run(collector(config, "--check-heartbeat", str(beat)), capture_output=True, text=True)

    try:
        deadline = time.monotonic() + 30
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert probe().returncode == 0
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = last_pass = time.monotonic()
        while time.monotonic() < stopped + 30:
            started = time.monotonic()
            if (failed := probe()).returncode != 0:
                break
            last_pass = started
            time.sleep(0.2)
        noticed = time.monotonic() - stopped
        assert failed.returncode == 1
        assert "no run finished for" in failed.stderr and "(runs every 1 s): stopped or hung" in failed.stderr
        # 3 intervals from the last run, which was up to an interval before the stop. Judged by when
        # each probe started and ended, not by how long a probe took to start on a busy machine.
        assert noticed >= 2, f"the probe failed {noticed:.1f} s after SIGSTOP (interval 1 s, 3 intervals)"
        assert last_pass - stopped < 3, f"a probe started {last_pass - stopped:.1f} s after SIGSTOP still passed"
        os.kill(proc.pid, signal.SIGCONT)
        continued = time.monotonic()
        while probe().returncode != 0 and time.monotonic() < continued + 30:
            time.sleep(0.2)
        assert probe().returncode == 0
        print(f"probe failed {noticed:.1f} s after SIGSTOP, passed {time.monotonic() - continued:.1f} s after SIGCONT")
    finally:
        proc.kill()
        proc.wait()


def test_configured_sqlite_store_is_what_signals_read(tmp_path):
    """The default --store is srv-configs' metrics backend: the points land where signals read them."""
    with recorded_api() as api:
        api.serve("/api/v1/nodes", load("kubernetes/nodes.json"), kubernetes_list=True)
        api.serve("/api/v1/pods", load("kubernetes/pods.json"), kubernetes_list=True)
        config = write_config(tmp_path, kubeconfig(tmp_path / "kubeconfig", api.url))
        with open(config, "a") as f:
            f.write(f"state_directory: {tmp_path / 'state'}\n")
        done = subprocess.run(
            collector(config, "--cluster", "kube-prod", "--once"), capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    read = subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "--env-config-path", config, "metrics", "read", "--type",
         "system_metrics", "--key", "cpus_pending|cluster=kube-prod,pool=default.kubernetes", "--minutes",
         "60", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert "3.5" in read.stdout


def test_collects_the_shipped_local_dev_cluster_against_moto(tmp_path):
    """config/'s only cluster: a simulated scheduler whose nodes are an Auto Scaling group's
    instances, read with the autoscaler's own cloud adapter (moto's server as the AWS)."""
    from clusterman.local.moto_server import MotoServer
    from clusterman.local.stack import create_pool_group
    from clusterman.local.stack import prepare_configs

    def collect_once(config):
        return subprocess.run(
            [sys.executable, "-m", "clusterman.cli.main", "--env-config-path", str(config),
             "collect-metrics", "--cluster", "local-dev", "--once", "--store", "stdout"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    with MotoServer() as moto:
        config = prepare_configs(tmp_path, moto.url, 0, Path(__file__).resolve().parents[1] / "config")
        create_pool_group(moto.url)
        done = collect_once(config)
    assert done.returncode == 0, done.stderr
    gone = collect_once(config)  # the AWS stopped: its instances are the nodes, so nothing is written
    assert gone.returncode == 1 and gone.stdout == ""
    assert "local-dev/default.simulated: no metrics this run: cannot read its resource groups" in gone.stderr
    got = {(p["type"], p["key"]): p["value"] for p in points(done.stdout)}
    key = "|cluster=local-dev,pool=default.simulated"
    assert got[("metadata", "target_capacity" + key)] == 1
    assert got[("metadata", "fulfilled_capacity" + key)] == {"<m5.large, us-west-2a>": 1.0}
    assert got[("metadata", "ready_nodes" + key)] == 1
    assert got[("metadata", "cpus_total" + key)] == 2

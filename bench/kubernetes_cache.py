"""Reading a Kubernetes pool by watching against re-listing it, for 1,000 / 3,000 / 10,000 nodes × 30 pods.

A stand-in API server (``_kube_server``, a process of its own) serves realistic objects (about 9 KB
a pod with managedFields, sidecars, init containers, DaemonSet and mirror pods, 0.5% pending;
13 KB a node) over HTTP on loopback, paged and watched. A real API server runs on machines of its
own: this one encodes each object once, when the fixture is built, and a page costs it a copy of
bytes, so what is measured is the client (the server's CPU is reported beside it). Each
measurement runs in a process of its own, which reports its own wall time, CPU time and peak RSS:

- ``relist`` (the baseline): a run as it was before the cache, by the code of commit
  ``BASELINE_COMMIT`` itself, unmodified: its ``clusterman`` package is exported from git into a
  temporary directory put first on that process's ``sys.path``. Its connector lists every page
  (``json.loads``), builds the view, joins the cloud; then its ``decide``. It is skipped, and the
  row says so, when the machine has less memory available than it needs (about 1.9 GB per 1,000
  nodes); without that commit in the git history the bench stops with one line. It runs first,
  against a server of its own with the same objects as the cache's.
- ``cache``: the connector's first snapshot (the initial list into the cache): wall, CPU, peak RSS,
  bytes read, RSS per cached pod, and its decision (it must equal the re-list's); then steady runs,
  each after 1% of the pods changed (half updated, half replaced) and 20% of the nodes sent a status
  update (a minute of a real cluster: kubelets write every 5 minutes): bytes read for the run, the
  CPU the watches spent taking the changes in, and the run's wall and CPU from cache to decision
  (the snapshot with the cloud's join, and ``decide``), and RSS.

``python -m bench kubernetes_cache`` runs 1k, 3k and 10k; ``python -m bench.kubernetes_cache N ...``
the sizes given; ``--quick``: 1k. The figures are in docs/measured_speed.md; at 10,000 nodes and 300,000
pods on the 2-core machine, quiet (load 0.6-1.3 with the bench's own processes): initial sync 20.6 s
wall (19.7 s CPU), 199 MB peak; a steady run 0.17-0.39 s wall, 214 MB, 68 MB read; 449 B of RSS per
cached pod; the re-list before the cache 206 s wall (205 s CPU), 18.9 GB peak, 2.9 GB read; the
same decision. Ratios to the re-list: steady run 0.0008, bytes 0.024, sync 0.10 (wall) and 0.011
(peak RSS).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._memory import peak_rss_mb
from bench._memory import rss_mb

PODS_PER_NODE = 30
NOW = 1_790_000_000.0
RUNS = 3  # steady runs, each after a minute's churn
# The last commit before the cache: its connector re-listed the cluster every run.
BASELINE_COMMIT = "ccf154d"
# What that re-list needs, with room to spare: its peak RSS here is 2.0 GB at 1,000 nodes, 18.9 GB at 10,000.
RELIST_MB = 500
RELIST_MB_PER_NODE = 1.9


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/bench/stats") as answer:
        result: dict[str, Any] = json.load(answer)
        return result


def kubeconfig(url: str) -> str:
    path = Path(tempfile.mkdtemp()) / "kubeconfig"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
    }  # fmt: skip
    path.write_text(json.dumps(config))
    return str(path)


def cloud(nodes: int) -> Any:
    from clusterman.core.cloud_view import CloudInstance
    from clusterman.core.cloud_view import CloudView
    from clusterman.core.model import ResourceGroup

    instances = tuple(
        CloudInstance(f"i-{i:017x}", "asg-1", 1.0, NOW - 86400, "m5.4xlarge", "us-west-2a") for i in range(nodes)
    )
    view = CloudView((ResourceGroup("asg-1", nodes, nodes, 0, 10**6, kind="asg"),), instances)

    class Cloud:
        def cloud_view(self, now: float) -> CloudView:
            return view

    return Cloud()


def decide_on(snapshot: Any) -> Any:
    from clusterman.decision import AutoscalerState
    from clusterman.decision import ScalingPolicy
    from clusterman.decision import decide
    from clusterman.decision import demand_from_snapshot
    from clusterman.decision.exact import exact

    policy = ScalingPolicy(
        min_capacity=exact(0), max_capacity=exact(10**6), max_weight_to_add=exact(10**6),
        max_weight_to_remove=exact(10**6),
    )  # fmt: skip
    return decide(snapshot, {"__default__": demand_from_snapshot(snapshot)}, policy, AutoscalerState(), NOW)


# --- the measurements, each in its own process ------------------------------------------------


def outcome(decision: Any) -> dict[str, Any]:
    """What a decision decided, comparable across the two trees' Decision classes."""
    return {
        "action": decision.action.value,
        "target_capacity": str(decision.target_capacity),
        "taint": len(decision.taint),
        "terminate": len(decision.terminate),
    }


def measure_cache(url: str, nodes: int) -> dict[str, Any]:
    from clusterman.cluster.kubernetes import KubernetesConnector
    from clusterman.cluster.kubernetes import KubernetesPool

    source = cloud(nodes)
    connector = KubernetesConnector(KubernetesPool("default"), kubeconfig(url), cloud=source, timeout_seconds=120)
    cache = connector.cache()
    gc.collect()
    before, server = rss_mb(), stats(url)
    started, cpu = time.perf_counter(), time.process_time()
    connector.scheduler_view(NOW)
    sync, sync_cpu = time.perf_counter() - started, time.process_time() - cpu
    synced = stats(url)
    gc.collect()
    after = rss_mb()
    pods = len(cache.pods)
    result: dict[str, Any] = {
        "initial_sync_seconds": round(sync, 2),
        "initial_sync_cpu_seconds": round(sync_cpu, 2),
        "initial_sync_server_cpu_seconds": round(synced["cpu"] - server["cpu"], 2),
        "initial_sync_peak_rss_mb": round(peak_rss_mb()),
        "initial_sync_mb_read": round((synced["bytes"] - server["bytes"]) / 1e6, 1),
        "cached_pods": pods,
        "rss_growth_per_cached_pod_bytes": round((after - before) * 2**20 / pods),
    }
    first = time.perf_counter()
    result["first_run"] = outcome(decide_on(connector.snapshot(NOW)))
    result["first_run_seconds"] = round(time.perf_counter() - first, 3)
    runs = []
    for i in range(RUNS):
        server = stats(url)
        cpu = time.process_time()
        request = urllib.request.Request(
            f"{url}/bench/churn?pods={pods // 100}&nodes={nodes // 5}", method="POST", data=b""
        )
        urllib.request.urlopen(request).read()
        version = str(stats(url)["version"])
        deadline = time.monotonic() + 120
        while {cache.node_reflector.version, cache.pod_reflector.version} != {version}:
            if time.monotonic() > deadline:
                raise RuntimeError("the cache did not catch up in 120 s")
            time.sleep(0.01)
        events_cpu = time.process_time() - cpu
        read = stats(url)["bytes"] - server["bytes"]
        started, cpu = time.perf_counter(), time.process_time()
        decision = decide_on(connector.snapshot(NOW + 60 * (i + 1)))
        runs.append(
            {
                "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "mb_read": read / 1e6,
                "events_cpu": events_cpu, "action": decision.action.value,
            }
        )  # fmt: skip
    result["steady_run_seconds"] = round(min(r["seconds"] for r in runs), 3)
    result["steady_run_seconds_max"] = round(max(r["seconds"] for r in runs), 3)
    result["steady_run_cpu_seconds"] = round(min(r["cpu"] for r in runs), 3)
    result["steady_run_cpu_seconds_max"] = round(max(r["cpu"] for r in runs), 3)
    result["steady_events_cpu_seconds"] = round(sum(r["events_cpu"] for r in runs) / len(runs), 3)
    result["steady_mb_read_per_run"] = round(sum(r["mb_read"] for r in runs) / len(runs), 2)
    result["steady_rss_mb"] = round(rss_mb())
    result["peak_rss_mb"] = round(peak_rss_mb())
    result["action"] = runs[-1]["action"]
    connector.close()
    return result


def measure_relist(url: str, nodes: int, tree: str) -> dict[str, Any]:
    """A run as it was before the cache: the connector of BASELINE_COMMIT, unmodified (``tree`` is
    first on sys.path), lists both resources, then the join and that tree's ``decide``."""
    import clusterman

    if not str(clusterman.__file__).startswith(tree):
        raise RuntimeError(f"the baseline imported clusterman from {clusterman.__file__}, not {tree}")
    from clusterman.cluster.kubernetes import KubernetesConnector
    from clusterman.cluster.kubernetes import KubernetesPool

    connector = KubernetesConnector(KubernetesPool("default"), kubeconfig(url), cloud=cloud(nodes), timeout_seconds=120)
    server = stats(url)
    started, cpu = time.perf_counter(), time.process_time()
    decision = decide_on(connector.snapshot(NOW))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    done = stats(url)
    return {
        "relist_run_seconds": round(seconds, 2),
        "relist_run_cpu_seconds": round(cpu, 2),
        "relist_server_cpu_seconds": round(done["cpu"] - server["cpu"], 2),
        "relist_peak_rss_mb": round(peak_rss_mb()),
        "relist_mb_read_per_run": round((done["bytes"] - server["bytes"]) / 1e6, 1),
        "relist_run": outcome(decision),
    }


# --- the orchestration --------------------------------------------------------------------------


def baseline_tree(commit: str = BASELINE_COMMIT, bench: str = "kubernetes_cache") -> str:
    """``commit``'s ``clusterman`` package in a temporary directory; one line and exit 1 when this
    checkout's git history does not have it."""
    root = Path(__file__).resolve().parent.parent
    tree = tempfile.mkdtemp(prefix=f"clusterman-{commit}-")
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit, "clusterman"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        said = (archive.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise SystemExit(
            f"bench.{bench}: the baseline is the connector of commit {commit}, "
            f"and the git history of {root} does not have it ({said})"
        )
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    return tree


def memory_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _in_process(mode: str, url: str, nodes: int, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.kubernetes_cache", "--measure", mode, "--url", url, str(nodes), *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} at {nodes} nodes failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def serving(nodes: int, pools: int = 1) -> Iterator[str]:
    """A stand-in API server with the fixture for ``nodes`` in ``pools`` pools (the same objects each
    time), and its URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench._kube_server", str(nodes), str(PODS_PER_NODE), str(pools)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()


def measure(nodes: int, tree: str) -> dict[str, Any]:
    row: dict[str, Any] = {"nodes": nodes, "pods": nodes * PODS_PER_NODE, "load_1min": os.getloadavg()[0]}
    need, available = RELIST_MB + RELIST_MB_PER_NODE * nodes, memory_available_mb()
    relist: dict[str, Any] | None = None
    if available >= need:
        with serving(nodes) as url:
            relist = _in_process("relist", url, nodes, "--tree", tree)
    else:
        row["baseline"] = f"not run: the re-list needs about {need:,.0f} MB and {available:,.0f} MB is available"
    # a server of its own: the re-list's memory pushed the first one's encoded objects out of the page
    # cache, and a real API server does not read them from disk
    with serving(nodes) as url:
        row.update(_in_process("cache", url, nodes))
    if relist is not None:
        row.update(relist)
        row["same_decision_as_relist"] = relist["relist_run"] == row["first_run"]
        for name, ours, theirs in (
            ("steady_run", "steady_run_seconds", "relist_run_seconds"),
            ("steady_run_cpu", "steady_run_cpu_seconds", "relist_run_cpu_seconds"),
            ("bytes_per_run", "steady_mb_read_per_run", "relist_mb_read_per_run"),
            ("sync", "initial_sync_seconds", "relist_run_seconds"),
            ("sync_cpu", "initial_sync_cpu_seconds", "relist_run_cpu_seconds"),
            ("sync_peak_rss", "initial_sync_peak_rss_mb", "relist_peak_rss_mb"),
            ("steady_rss", "steady_rss_mb", "relist_peak_rss_mb"),
        ):
            row[f"{name}_ratio_to_relist"] = round(row[ours] / row[theirs], 4)
    row["load_1min_after"] = os.getloadavg()[0]
    return row


def run(quick: bool, sizes: list[int] | None = None) -> dict[str, Any]:
    sizes = sizes or ([1000] if quick else [1000, 3000, 10000])
    tree = baseline_tree()
    try:
        rows = [measure(n, tree) for n in sizes]
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return {"pods_per_node": PODS_PER_NODE, "baseline_commit": BASELINE_COMMIT, "sizes": rows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kubernetes_cache")
    parser.add_argument("nodes", type=int, nargs="*", default=[1000])
    parser.add_argument("--measure", choices=["cache", "relist"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure == "cache":
        print(json.dumps(measure_cache(args.url, args.nodes[0])))
    elif args.measure == "relist":
        sys.path.insert(0, args.tree)  # before anything imports clusterman
        print(json.dumps(measure_relist(args.url, args.nodes[0], args.tree)))
    else:
        print(json.dumps(run(False, args.nodes), indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

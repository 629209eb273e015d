"""The Kubernetes cache under a busy cluster's churn: a run's cost, memory, and what a small pool pays.

The stand-in API server (``_kube_server``, a process of its own) serves N nodes × 30 pods of
realistic objects (9 KB pods, 13.6 KB nodes), cut into 10 pools, and makes them change as a busy
cluster does (``POST /bench/flow``): at 300,000 pods, 100 pods created and 100 deleted a second
(each creation three events: added, bound, running; each deletion two: terminating, deleted) and
a status update from every node every 5 minutes, about 550 events a second (the rates scale with
the pods). Each measurement runs in a process of its own, by this tree's code and, in the same
run, by the code of commit ``BASELINE_COMMIT`` (the tree before this bench: its ``clusterman``
exported from git), each against a server of its own with the same objects:

- ``whole``: one pool of the whole cluster. The first snapshot's list, then the flow of changes
  and a run (snapshot with the cloud's join, and ``decide``) every ``PERIOD`` seconds, as the
  autoscaler runs; the CPU the process spends between runs following the changes; RSS. Then three
  410s (the server drops its watch history): the peak RSS during each re-list and RSS after it.
  Then the flow stops, and the cache's view must equal a fresh list's; the fresh list and its run
  (a connector that does not watch) are the same-run baseline for the run.
- ``pool``: one pool of a tenth of the nodes in the same cluster: RSS, and the CPU it spends a
  second following the whole cluster's changes.
- ``connectors`` (at the smallest size): a connector of the whole cluster created, synced and
  closed ten times: RSS and the objects the collector tracks, before and after.

``python -m bench kubernetes_churn`` runs 1,000 and 10,000 nodes; ``python -m bench.kubernetes_churn
N ...`` the sizes given; ``--quick``: 1,000 nodes with runs 20 s apart. At 10,000 nodes the server
holds a 2.8 GB file in the page cache and each client up to 500 MB: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import shutil
import sys
import time
import urllib.request
from typing import Any

from bench._kube_objects import CLUSTER_LABEL
from bench._kube_objects import WHOLE
from bench._memory import peak_rss_mb
from bench._memory import reset_peak
from bench._memory import rss_mb
from bench.kubernetes_cache import PODS_PER_NODE
from bench.kubernetes_cache import baseline_tree
from bench.kubernetes_cache import cloud
from bench.kubernetes_cache import decide_on
from bench.kubernetes_cache import kubeconfig
from bench.kubernetes_cache import serving
from bench.kubernetes_cache import stats

NOW = 1_790_000_000.0
POOLS = 10
PERIOD = 60.0  # seconds between runs, the autoscaler's default
RUNS = 3
GONE = 3  # 410s in a row
# The tree before this bench's fixes: its cache kept every bound pod of the cluster (a reader a pool),
# froze it from the garbage collector, re-listed into a second copy, and rebuilt each changed node
# at the run.
BASELINE_COMMIT = "b147a9c"
CREATIONS_PER_POD = 100 / 300_000  # a second: 100 creations and 100 deletions at 300,000 pods
HEARTBEAT_SECONDS = 300.0


def post(url: str, path: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{url}{path}", method="POST", data=b"")).read()


def flow(url: str, pods: int, on: bool = True) -> None:
    rate = CREATIONS_PER_POD * pods if on else 0
    post(url, f"/bench/flow?creations={rate}&deletions={rate}&heartbeat_seconds={HEARTBEAT_SECONDS if on else 0}")


def connector_of(url: str, nodes: int, pool: str, watch: bool = True) -> Any:
    """``pool``: ``WHOLE``, or ``pool-0`` (the first tenth of the nodes, and their instances)."""
    from clusterman.cluster.kubernetes import KubernetesConnector
    from clusterman.cluster.kubernetes import KubernetesPool

    settings = KubernetesPool(WHOLE, CLUSTER_LABEL, CLUSTER_LABEL) if pool == WHOLE else KubernetesPool(pool)
    instances = cloud(nodes if pool == WHOLE else nodes // POOLS)
    return KubernetesConnector(settings, kubeconfig(url), cloud=instances, timeout_seconds=120, watch=watch)


def timed_run(connector: Any, now: float) -> tuple[float, float, Any]:
    started, cpu = time.perf_counter(), time.process_time()
    decision = decide_on(connector.snapshot(now))
    return time.perf_counter() - started, time.process_time() - cpu, decision


class FullCollections:
    """Each full collection of the garbage collector while it is on: when, and how long all
    threads waited (a collection holds the interpreter)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []  # (start, seconds) on the perf_counter clock
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((self._started, time.perf_counter() - self._started))

    def within(self, start: float, end: float) -> float:
        return sum(s for at, s in self.pauses if start <= at < end)


def full_gc() -> float:
    started = time.perf_counter()
    gc.collect()
    return round(time.perf_counter() - started, 3)


def measure_whole(url: str, nodes: int, period: float) -> dict[str, Any]:
    pods = nodes * PODS_PER_NODE
    connector = connector_of(url, nodes, WHOLE)
    started, cpu = time.perf_counter(), time.process_time()
    connector.scheduler_view(NOW)
    out: dict[str, Any] = {
        "sync_seconds": round(time.perf_counter() - started, 2),
        "sync_cpu_seconds": round(time.process_time() - cpu, 2),
        "sync_peak_rss_mb": round(peak_rss_mb()),
        "synced_rss_mb": round(rss_mb()),
    }
    seconds, _, _ = timed_run(connector, NOW)  # the first run joins every node to the cloud once
    out["first_run_seconds"] = round(seconds, 3)
    # Between runs, each tree does what its autoscaler's loop does (the baseline's made no pass).
    loop = importlib.import_module("clusterman.batch.autoscaler")
    between_runs = getattr(loop, "collect_between_runs", lambda: None)
    flow(url, pods)
    events, collections = stats(url)["events"], FullCollections()
    gc.callbacks.append(collections)
    runs: list[tuple[float, float]] = []
    in_runs = []
    following: list[float] = []
    mark, mark_cpu = time.monotonic(), time.process_time()
    for i in range(RUNS):
        time.sleep(max(0.0, mark + period - time.monotonic()))
        following.append((time.process_time() - mark_cpu) / (time.monotonic() - mark))
        started = time.perf_counter()
        seconds, cpu, _ = timed_run(connector, NOW + period * (i + 1))
        runs.append((seconds, cpu))
        in_runs.append(round(collections.within(started, started + seconds), 3))
        between_runs()
        mark, mark_cpu = time.monotonic(), time.process_time()
    gc.callbacks.remove(collections)
    out["events_per_second"] = round((stats(url)["events"] - events) / (period * RUNS))
    out["full_gc_pauses_seconds"] = [round(s, 3) for _, s in collections.pauses]
    out["full_gc_seconds_within_each_run"] = in_runs
    out["run_seconds"] = [round(s, 3) for s, _ in runs]
    out["run_cpu_seconds"] = [round(c, 3) for _, c in runs]
    out["following_cpu_seconds_per_second"] = round(max(following), 4)
    out["steady_rss_mb"] = round(rss_mb())
    out["gc_tracked_objects"] = len(gc.get_objects())
    out["full_gc_seconds"] = full_gc()  # what a collection costs the thread it falls on (all of them wait)
    gc.freeze()
    out["full_gc_seconds_all_frozen"] = full_gc()  # what freezing everything alive would save
    gc.unfreeze()
    peaks, after = [], []
    for _ in range(GONE):
        listed = stats(url)["lists"]["pods"]
        reset_peak()
        post(url, "/bench/expire")
        deadline = time.monotonic() + 600
        while stats(url)["lists"]["pods"] == listed:
            if time.monotonic() > deadline:
                raise RuntimeError("no pod list in 600 s after a 410")
            time.sleep(0.1)
        time.sleep(5)  # the node list, the watches again
        peaks.append(round(peak_rss_mb()))
        after.append(round(rss_mb()))
    out["relist_peak_rss_mb"] = peaks
    out["rss_after_each_relist_mb"] = after
    out["relist_peak_ratio_to_steady"] = round(max(peaks) / out["steady_rss_mb"], 3)
    flow(url, pods, on=False)
    time.sleep(3)  # bookmarks each second bring the watches up to the last change
    cached = connector.scheduler_view(NOW)
    fresh = connector_of(url, nodes, WHOLE, watch=False)
    seconds, cpu, _ = timed_run(fresh, NOW)
    out["fresh_list_run_seconds"] = round(seconds, 2)
    out["fresh_list_run_cpu_seconds"] = round(cpu, 2)
    out["same_view_as_fresh_list"] = cached == fresh.scheduler_view(NOW)
    out["run_ratio_to_fresh_list"] = round(max(s for s, _ in runs) / seconds, 4)
    fresh.close()
    connector.close()
    return out


def measure_pool(url: str, nodes: int, period: float) -> dict[str, Any]:
    connector = connector_of(url, nodes, "pool-0")
    started = time.perf_counter()
    view = connector.scheduler_view(NOW)
    out: dict[str, Any] = {
        "pool_nodes": len(view.nodes),
        "sync_seconds": round(time.perf_counter() - started, 2),
        "synced_rss_mb": round(rss_mb()),
    }
    timed_run(connector, NOW)
    flow(url, nodes * PODS_PER_NODE)
    mark, cpu = time.monotonic(), time.process_time()
    time.sleep(period)
    out["following_cpu_seconds_per_second"] = round((time.process_time() - cpu) / (time.monotonic() - mark), 4)
    out["cached_pods"] = len(connector.cache().pods)
    seconds, _, _ = timed_run(connector, NOW + period)
    out["run_seconds"] = round(seconds, 3)
    out["steady_rss_mb"] = round(rss_mb())
    flow(url, nodes * PODS_PER_NODE, on=False)
    connector.close()
    return out


def measure_connectors(url: str, nodes: int) -> dict[str, Any]:
    def once() -> None:
        connector = connector_of(url, nodes, WHOLE)
        connector.scheduler_view(NOW)
        connector.close()

    once()  # the kubernetes client's modules, the caches of parsed quantities
    gc.collect()
    before, tracked = rss_mb(), len(gc.get_objects())
    after = []
    for _ in range(10):
        once()
        after.append(round(rss_mb()))
    gc.collect()
    return {
        "rss_before_mb": round(before),
        "rss_after_each_mb": after,
        "rss_growth_mb": round(rss_mb() - before, 1),
        "tracked_objects_growth": len(gc.get_objects()) - tracked,
    }


# --- the orchestration --------------------------------------------------------------------------


def _in_process(mode: str, url: str, nodes: int, period: float, tree: str = "") -> dict[str, Any]:
    import subprocess

    command = [sys.executable, "-m", "bench.kubernetes_churn", "--measure", mode, "--url", url, str(nodes)]
    command += ["--period", str(period), *(["--tree", tree] if tree else [])]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} at {nodes} nodes failed: {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def measure(nodes: int, period: float, tree: str, modes: list[str]) -> dict[str, Any]:
    """Each mode by the baseline's code, then by this tree's, one process each, against one server
    (its changes stopped between measurements)."""
    row: dict[str, Any] = {"nodes": nodes, "pods": nodes * PODS_PER_NODE, "load_1min": os.getloadavg()[0]}
    with serving(nodes, POOLS) as url:
        for mode in modes:
            for label, path in (("before", tree), ("after", "")):
                row[f"{mode}_{label}"] = _in_process(mode, url, nodes, period, path)
    row["load_1min_after"] = os.getloadavg()[0]
    return row


def run(quick: bool, sizes: list[int] | None = None, period: float | None = None) -> dict[str, Any]:
    sizes = sizes or ([1000] if quick else [1000, 10000])
    period = period or (20.0 if quick else PERIOD)
    tree = baseline_tree(BASELINE_COMMIT, "kubernetes_churn")
    try:
        modes = {n: ["whole", "pool", *(["connectors"] if n == min(sizes) else [])] for n in sizes}
        rows = [measure(n, period, tree, modes[n]) for n in sizes]
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return {"pods_per_node": PODS_PER_NODE, "period_seconds": period, "baseline_commit": BASELINE_COMMIT, "sizes": rows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kubernetes_churn")
    parser.add_argument("nodes", type=int, nargs="*", default=[1000])
    parser.add_argument("--period", type=float, default=None, help="seconds between runs (default 60)")
    parser.add_argument("--measure", choices=["whole", "pool", "connectors"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        if args.tree:
            sys.path.insert(0, args.tree)  # before anything imports clusterman
        nodes, period = args.nodes[0], args.period or PERIOD
        if args.measure == "whole":
            print(json.dumps(measure_whole(args.url, nodes, period)))
        elif args.measure == "pool":
            print(json.dumps(measure_pool(args.url, nodes, period)))
        else:
            print(json.dumps(measure_connectors(args.url, nodes)))
    else:
        print(json.dumps(run(False, args.nodes, args.period), indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

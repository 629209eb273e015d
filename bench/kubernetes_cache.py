"""Reading a Kubernetes pool by watching against re-listing it, for 1,000 / 3,000 / 10,000 nodes × 30 pods.

A stand-in API server (``_kube_server``, a process of its own) serves realistic objects (about 9 KB
a pod with managedFields, sidecars, init containers, DaemonSet and mirror pods, 0.5% pending;
13 KB a node) over HTTP on loopback, paged and watched. Each measurement runs in a process of its
own, which reports its own peak RSS:

- ``cache``: the connector's first snapshot (the initial list into the cache): seconds, peak RSS,
  bytes read, RSS per cached pod; then steady runs, each after 1% of the pods changed (half updated,
  half replaced) and 20% of the nodes sent a status update (a minute of a real cluster: kubelets
  write every 5 minutes): bytes read for the run, and the run's seconds from cache to decision (the
  snapshot with the cloud's join, and ``decide``), and RSS;
- ``relist`` (the baseline, in the same run): what a run cost before the cache: every page
  ``json.loads``-ed, then ``build_view`` over the decoded objects, the join and ``decide``.

``python -m bench kubernetes_cache`` runs 1k and 3k with their baselines and 10k without its
baseline (it passed 19 GB of RSS unfinished); ``python -m bench.kubernetes_cache 10000 --baseline``
runs it on a machine with the memory. ``--quick``: 1k. The figures are in docs/cluster.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

PODS_PER_NODE = 30
NOW = 1_790_000_000.0
BASELINE_MAX_NODES = 3000


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/bench/stats") as answer:
        result: dict[str, int] = json.load(answer)
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


def measure_cache(url: str, nodes: int) -> dict[str, Any]:
    from clusterman.cluster.kubernetes import KubernetesConnector
    from clusterman.cluster.kubernetes import KubernetesPool

    source = cloud(nodes)
    connector = KubernetesConnector(KubernetesPool("default"), kubeconfig(url), cloud=source, timeout_seconds=120)
    cache = connector.cache()
    gc.collect()
    before, sent = rss_mb(), stats(url)["bytes"]
    started, cpu = time.perf_counter(), time.process_time()
    connector.scheduler_view(NOW)
    sync, sync_cpu = time.perf_counter() - started, time.process_time() - cpu
    synced_bytes = stats(url)["bytes"] - sent
    gc.collect()
    after = rss_mb()
    pods = len(cache.pods)
    result: dict[str, Any] = {
        "initial_sync_seconds": round(sync, 2),
        "initial_sync_cpu_seconds": round(sync_cpu, 2),  # this process's own share: the server's is not in it
        "initial_sync_peak_rss_mb": round(peak_rss_mb()),
        "initial_sync_mb_read": round(synced_bytes / 1e6, 1),
        "cached_pods": pods,
        "rss_growth_per_cached_pod_bytes": round((after - before) * 2**20 / pods),
    }
    first = time.perf_counter()
    decide_on(connector.snapshot(NOW))
    result["first_run_seconds"] = round(time.perf_counter() - first, 3)
    runs = []
    for i in range(3):
        sent = stats(url)["bytes"]
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
        read = stats(url)["bytes"] - sent
        started, cpu = time.perf_counter(), time.process_time()
        decision = decide_on(connector.snapshot(NOW + 60 * (i + 1)))
        runs.append(
            {
                "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu, "mb_read": read / 1e6,
                "action": decision.action.value,
            }
        )  # fmt: skip
    result["steady_run_seconds"] = round(min(r["seconds"] for r in runs), 3)
    result["steady_run_seconds_max"] = round(max(r["seconds"] for r in runs), 3)
    result["steady_run_cpu_seconds"] = round(min(r["cpu"] for r in runs), 3)
    result["steady_mb_read_per_run"] = round(sum(r["mb_read"] for r in runs) / len(runs), 2)
    result["steady_rss_mb"] = round(rss_mb())
    result["peak_rss_mb"] = round(peak_rss_mb())
    result["action"] = runs[-1]["action"]
    connector.close()
    return result


def measure_relist(url: str, nodes: int) -> dict[str, Any]:
    """The re-list every run did before the cache: json.loads of each page, build_view over the dicts."""
    import kubernetes.client

    from clusterman.cluster.connector import ClusterConnector
    from clusterman.cluster.connector import SchedulerView
    from clusterman.cluster.kubernetes import KubernetesPool
    from clusterman.cluster.kubernetes import api_client
    from clusterman.cluster.kubernetes import build_view
    from clusterman.cluster.kubernetes import request_timeout

    class Relist(ClusterConnector):
        def scheduler_view(self, now: float) -> SchedulerView:
            api = kubernetes.client.CoreV1Api(api_client(kubeconfig(url)))

            def everything(method: Any, **selectors: str) -> list[dict[str, Any]]:
                items: list[dict[str, Any]] = []
                token = None
                while True:
                    response = method(
                        limit=500, _continue=token, _preload_content=False, _request_timeout=request_timeout(300),
                        **selectors,
                    )  # fmt: skip
                    body = json.loads(response.data)
                    items.extend(body["items"])
                    token = body["metadata"].get("continue")
                    if not token:
                        return items

            found = everything(api.list_node, label_selector="clusterman.com/pool=default")
            pods = everything(
                api.list_pod_for_all_namespaces, field_selector="status.phase!=Succeeded,status.phase!=Failed"
            )
            return build_view(found, pods, KubernetesPool("default"), now)

    sent = stats(url)["bytes"]
    started, cpu = time.perf_counter(), time.process_time()
    decision = decide_on(Relist(cloud(nodes)).snapshot(NOW))
    return {
        "relist_run_seconds": round(time.perf_counter() - started, 2),
        "relist_run_cpu_seconds": round(time.process_time() - cpu, 2),
        "relist_peak_rss_mb": round(peak_rss_mb()),
        "relist_mb_read_per_run": round((stats(url)["bytes"] - sent) / 1e6, 1),
        "action": decision.action.value,
    }


# --- the orchestration --------------------------------------------------------------------------


def _in_process(mode: str, url: str, nodes: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.kubernetes_cache", "--measure", mode, "--url", url, str(nodes)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} at {nodes} nodes failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def measure(nodes: int, baseline: bool) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, "-m", "bench._kube_server", str(nodes), str(PODS_PER_NODE)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        row: dict[str, Any] = {"nodes": nodes, "pods": nodes * PODS_PER_NODE}
        row.update(_in_process("cache", url, nodes))
        if baseline:
            relist = _in_process("relist", url, nodes)
            same = relist.pop("action") == row["action"]
            row.update(relist)
            row["same_action_as_relist"] = same
            row["steady_run_ratio_to_relist"] = round(row["steady_run_seconds"] / row["relist_run_seconds"], 4)
            row["steady_run_cpu_ratio_to_relist"] = round(
                row["steady_run_cpu_seconds"] / row["relist_run_cpu_seconds"], 4
            )
            row["bytes_per_run_ratio_to_relist"] = round(
                row["steady_mb_read_per_run"] / row["relist_mb_read_per_run"], 4
            )
            row["sync_ratio_to_relist"] = round(row["initial_sync_seconds"] / row["relist_run_seconds"], 3)
            row["sync_cpu_ratio_to_relist"] = round(row["initial_sync_cpu_seconds"] / row["relist_run_cpu_seconds"], 3)
            row["sync_peak_rss_ratio_to_relist"] = round(row["initial_sync_peak_rss_mb"] / row["relist_peak_rss_mb"], 3)
        else:
            row["baseline"] = f"not run above {BASELINE_MAX_NODES} nodes (it passed 19 GB): --baseline runs it"
        return row
    finally:
        server.kill()
        server.wait()


def run(quick: bool) -> dict[str, Any]:
    sizes = [1000] if quick else [1000, 3000, 10000]
    return {"pods_per_node": PODS_PER_NODE, "sizes": [measure(n, n <= BASELINE_MAX_NODES) for n in sizes]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kubernetes_cache")
    parser.add_argument("nodes", type=int, nargs="*", default=[1000])
    parser.add_argument("--baseline", action="store_true", help="measure the re-list at every size")
    parser.add_argument("--measure", choices=["cache", "relist"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        done = (measure_cache if args.measure == "cache" else measure_relist)(args.url, args.nodes[0])
        print(json.dumps(done))
        return
    rows = [measure(n, args.baseline or n <= BASELINE_MAX_NODES) for n in args.nodes]
    print(json.dumps({"pods_per_node": PODS_PER_NODE, "sizes": rows}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()

"""Turning Kubernetes list JSON into a snapshot, for pools of 100 / 1,000 (/ 3,000) nodes × 30 pods.

Measured: ``kubernetes.build_view`` over already-decoded node and pod lists (quantities, effective
requests, daemon pods, pending pods, node states), next to ``json.loads`` of the same lists in the
same run: the baseline any connector pays for reading the API's answer at all.
"""

from __future__ import annotations

import json
from typing import Any

from bench._timing import best_of
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes import build_view

PODS_PER_NODE = 30
READY = [{"type": "Ready", "status": "True"}]


def node(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"node-{i}",
            "labels": {"clusterman.com/pool": "default"},
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {"providerID": f"aws:///us-west-2a/i-{i:017x}"},
        "status": {
            "allocatable": {"cpu": "15890m", "memory": "63350592Ki", "ephemeral-storage": "95551679124", "pods": "234"},
            "conditions": READY,
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i >> 8 & 255}.{i & 255}"}],
        },
    }


def pod(i: int, j: int) -> dict[str, Any]:
    daemon = j == 0
    containers = [{"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]
    if j % 3 == 0:
        containers.append({"name": "proxy", "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}})
    return {
        "metadata": {
            "name": f"pod-{i}-{j}",
            "namespace": "default",
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "DaemonSet" if daemon else "ReplicaSet", "name": "x"}],
        },
        "spec": {"nodeName": f"node-{i}", "containers": containers},
        "status": {"phase": "Running"},
    }


def measure(nodes: int) -> dict[str, Any]:
    node_list = [node(i) for i in range(nodes)]
    pod_list = [pod(i, j) for i in range(nodes) for j in range(PODS_PER_NODE)]
    text = json.dumps({"items": node_list}), json.dumps({"items": pod_list})
    pool = KubernetesPool("default")
    repeat = 3 if nodes <= 1000 else 1
    decode = best_of(lambda: [json.loads(t) for t in text], repeat)
    build = best_of(lambda: build_view(node_list, pod_list, pool, 0.0), repeat)
    return {
        "nodes": nodes,
        "pods": len(pod_list),
        "json_mb": round(sum(map(len, text)) / 1e6, 1),
        "build_view_seconds": round(build, 3),
        "json_loads_seconds": round(decode, 3),
        "ratio_to_json_loads": round(build / decode, 2),
    }


def run(quick: bool) -> dict[str, Any]:
    sizes = [100, 1000] if quick else [100, 1000, 3000]
    return {"sizes": [measure(n) for n in sizes]}

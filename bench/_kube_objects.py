"""Realistic Kubernetes nodes and pods as JSON text, rendered from templates.

Pods average about 9 KB (managedFields near 44% of it, sidecars, init containers, DaemonSet and
mirror pods, 0.5% pending) and nodes about 13 KB (images, conditions, managedFields), the sizes of
a production cluster's objects. A template is rendered with ``%`` formatting, so a server can hold
300,000 pods as a few fields each and render a page in milliseconds.
"""

from __future__ import annotations

import json
import re
from typing import Any

POOL_LABEL = "clusterman.com/pool"
POOL = "default"
# Every node also carries this label (value ``WHOLE``), and every pod asks for it: a pool selected
# by it is the whole cluster, beside the pools of ``POOL_LABEL``.
CLUSTER_LABEL = "bench.clusterman.com/cluster"
WHOLE = "whole"


def _managed(manager: str, fields: int) -> dict[str, Any]:
    """One managedFields entry: the server-side-apply bookkeeping that makes up much of a real object."""
    tree: dict[str, Any] = {}
    for i in range(fields):
        tree[f"f:field{i:03d}"] = {"f:value": {}, ".": {}}
    return {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-20T08:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": tree},
    }


def _container(name: str, cpu: str | None, memory: str | None, image: str) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {
        "name": name,
        "image": f"registry.example.com/{image}:v1.2.3",
        "args": ["--config=/etc/app/config.yaml", "--log-level=info", "--port=8080"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": f"ENV_{i}", "value": f"value-{i}-of-a-longer-setting"} for i in range(4)],
        "resources": {"requests": requests, "limits": dict(requests)},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        ],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _status_of(container: str) -> dict[str, Any]:
    return {
        "name": container,
        "state": {"running": {"startedAt": "2026-11-20T08:00:10Z"}},
        "ready": True,
        "restartCount": 0,
        "image": f"registry.example.com/{container}:v1.2.3",
        "imageID": "registry.example.com/app@sha256:" + "ab" * 32,
        "containerID": "containerd://" + "cd" * 32,
        "started": True,
    }


KINDS = ("web", "job", "daemon", "mirror", "pending", "besteffort")


def pod_template(kind: str) -> Template:
    """A pod of ``kind`` with ``%(name)s``, ``%(namespace)s``, ``%(node)s``, ``%(rv)s``, ``%(uid)s``,
    ``%(pool)s`` (the pool its node selector asks for)."""
    owner = {"web": "ReplicaSet", "job": "Job", "daemon": "DaemonSet", "mirror": "Node", "pending": "ReplicaSet"}
    containers = [_container("app", "250m", "512Mi", "app")]
    init: list[dict[str, Any]] = []
    if kind == "web":
        containers.append(_container("proxy", "50m", "64Mi", "envoy"))
        init.append({**_container("log-shipper", "20m", "32Mi", "fluent-bit"), "restartPolicy": "Always"})
    elif kind == "job":
        init.append(_container("migrate", "1", "256Mi", "migrate"))
    elif kind == "daemon":
        containers = [_container("agent", "25m", "64Mi", "node-agent")]
    elif kind == "mirror":
        containers = [_container("kube-proxy", "100m", None, "kube-proxy")]
    elif kind == "besteffort":
        containers = [_container("app", None, None, "app")]
    annotations = {"kubectl.kubernetes.io/restartedAt": "2026-11-20T08:00:00Z", "prometheus.io/scrape": "true"}
    if kind == "mirror":
        annotations["kubernetes.io/config.mirror"] = "0123456789abcdef"
    if kind == "job":
        annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] = "false"
    spec: dict[str, Any] = {
        "volumes": [
            {"name": "config", "configMap": {"name": "app-config", "defaultMode": 420}},
            {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        ],
        "containers": containers,
        "initContainers": init,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "nodeSelector": {POOL_LABEL: "%(pool)s", CLUSTER_LABEL: WHOLE},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if kind != "pending":
        spec["nodeName"] = "%(node)s"
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-11-20T08:00:10Z"}
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "10.0.1.10",
        "podIP": "100.96.3.1",
        "startTime": "2026-11-20T08:00:01Z",
        "containerStatuses": [_status_of(c["name"]) for c in containers],
        "initContainerStatuses": [_status_of(c["name"]) for c in init],
        "qosClass": "Burstable",
    }
    if kind == "pending":
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/10000 nodes are available: 10000 Insufficient cpu.",
                    "lastTransitionTime": "2026-11-20T08:00:01Z",
                }
            ],
            "qosClass": "Burstable",
        }
    pod = {
        "metadata": {
            "name": "%(name)s",
            "generateName": "app-7d9f8c6b5-",
            "namespace": "%(namespace)s",
            "uid": "%(uid)s",
            "resourceVersion": "%(rv)s",
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5", "team": "platform"},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner.get(kind, "ReplicaSet"),
                    "name": "app-7d9f8c6b5",
                    "uid": "b1c2d3e4-0000-4000-8000-598233671219",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [_managed("kube-controller-manager", 55), _managed("kubelet", 40)],
        },
        "spec": spec,
        "status": status,
    }
    return Template(json.dumps(pod, separators=(",", ":")))


def node_template() -> Template:
    """A node with ``%(name)s``, ``%(rv)s``, ``%(instance)s``, ``%(ip)s``, ``%(ready)s``, ``%(pool)s``."""
    conditions = [
        {
            "type": t,
            "status": "%(ready)s" if t == "Ready" else "False",
            "lastHeartbeatTime": "2026-11-20T08:59:41Z",
            "lastTransitionTime": "2026-11-20T08:00:00Z",
            "reason": f"Kubelet{t}",
            "message": f"kubelet reports {t}",
        }
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    ]
    node = {
        "metadata": {
            "name": "%(name)s",
            "uid": "%(uid)s",
            "resourceVersion": "%(rv)s",
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {
                POOL_LABEL: "%(pool)s",
                CLUSTER_LABEL: WHOLE,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": "%(name)s",
                "node.kubernetes.io/instance-type": "m5.4xlarge",
                "topology.kubernetes.io/region": "us-west-2",
                "topology.kubernetes.io/zone": "us-west-2a",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "csi.volume.kubernetes.io/nodeid": "{}"},
            "managedFields": [_managed("kubelet", 90), _managed("kube-controller-manager", 50)],
        },
        "spec": {"providerID": "aws:///us-west-2a/%(instance)s", "podCIDR": "100.96.3.0/24"},
        "status": {
            "capacity": {"cpu": "16", "ephemeral-storage": "104845292Ki", "memory": "64468296Ki", "pods": "234"},
            "allocatable": {"cpu": "15890m", "ephemeral-storage": "95551679124", "memory": "63350592Ki", "pods": "234"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "%(ip)s"}, {"type": "Hostname", "address": "%(name)s"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kernelVersion": "6.1.0", "osImage": "Amazon Linux 2023", "kubeletVersion": "v1.31.2"},
            "images": [
                {
                    "names": [
                        f"registry.example.com/image-{i}@sha256:" + "ef" * 32,
                        f"registry.example.com/image-{i}:v1",
                    ],
                    "sizeBytes": 123456789 + i,
                }
                for i in range(36)
            ],
        },
    }
    return Template(json.dumps(node, separators=(",", ":")))


class Template:
    """JSON text with ``%(field)s`` holes, rendered by joining its parts (a few µs for 9 KB)."""

    HOLE = re.compile(r"%\((\w+)\)s")

    def __init__(self, text: str) -> None:
        pieces = self.HOLE.split(text)
        self.parts = [p.encode() for p in pieces[0::2]]
        self.fields = pieces[1::2]

    def render(self, values: dict[str, bytes]) -> bytes:
        out = [self.parts[0]]
        for field, part in zip(self.fields, self.parts[1:], strict=True):
            out.append(values[field])
            out.append(part)
        return b"".join(out)


def kind_of(node: int, slot: int, pods_per_node: int) -> str:
    """The mix: one DaemonSet pod and one mirror pod a node, jobs, BestEffort pods, 0.5% pending."""
    if slot == 0:
        return "daemon"
    if slot == 1:
        return "mirror"
    if (node * pods_per_node + slot) % 200 == 7:
        return "pending"
    if slot % 9 == 4:
        return "job"
    if slot % 13 == 5:
        return "besteffort"
    return "web"

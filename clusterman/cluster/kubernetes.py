"""The Kubernetes connector: a pool's nodes and pods, read with the official ``kubernetes`` client.

Read only. Two list calls per snapshot, paginated: the pool's nodes (by the pool's node label)
and every pod that is not finished (one cluster-wide call, filtered here: the API cannot select
"pods on these nodes"). List responses are parsed from the raw JSON (``_preload_content=False``):
the client's model objects cost far more than the request for tens of thousands of pods, and the
raw API field names are the ones documented by Kubernetes and recorded in the tests' fixtures.

The rules (docs/cluster.md has them with reasons):
  node state   tainted by a scale-down taint > NotReady (unknown) > cordoned > ready
  pod request  Kubernetes' effective request: max(sum of containers + sidecars, each init step)
               + overhead; a resource no container asks for counts with ``default_request``
  not demand   DaemonSet and mirror pods: their requests are taken out of the node's allocatable
  pending      unschedulable pods aimed at the pool: node selector or required node affinity on
               the pool's node label, or the pool label on the pod itself (Clusterman's rule)
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING
from typing import Any

import urllib3

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.connector import SchedulerView
from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.config import DEFAULT_POD_REQUEST
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.core.timestamps import parse_time
from clusterman.errors import Unworkable

if TYPE_CHECKING:  # the kubernetes extra (kubernetes, msgspec): imported where a Kubernetes pool needs it
    import kubernetes.client
    from kubernetes.client.exceptions import ApiException

    from clusterman.cluster import kubernetes_objects as objects
    from clusterman.cluster.kubernetes_cache import PodReader
    from clusterman.cluster.kubernetes_cache import PoolCache

log = logging.getLogger(__name__)

# The taint the autoscaler puts on a node it is removing; the value is the Unix time it did so.
SCALE_DOWN_TAINT_KEY = "clusterman.com/scale-down"
# Taints that mean "being removed by an autoscaler": ours, Escalator's (value: Unix seconds), and
# Yelp Clusterman's drain taint (value: Unix seconds), so pools taken over from either keep going.
SCALE_DOWN_TAINT_KEYS = (SCALE_DOWN_TAINT_KEY, "atlassian.com/escalator", "clusterman.yelp.com/terminating")
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# Karpenter's: a pod annotated "true" is never disrupted on purpose (its node is not removed)
DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
# attempts per API call, each bounded by the caller's timeout: the first and two retries (urllib3's
# default is four in all), so a call to an API server that does not answer ends within 3 timeouts
ATTEMPTS = 3
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"  # set by the kubelet in every pod
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
FALSE_WORDS = frozenset({"false", "f", "no", "n", "off", "0"})


class KubeconfigError(ConnectorError, Unworkable):
    """No client can be made: the kubeconfig cannot be read or used, or there is none to use."""


@dataclass(frozen=True)
class KubernetesPool:
    """How one pool is recognised in a cluster, and what a pod with no requests counts for."""

    pool: str
    node_label_key: str = "clusterman.com/pool"
    pool_label_key: str = "clusterman.com/pool"
    default_request: Resources = DEFAULT_POD_REQUEST
    safe_to_evict_keys: tuple[str, ...] = (SAFE_TO_EVICT_ANNOTATION,)

    @property
    def node_selector(self) -> str:
        return f"{self.node_label_key}={self.pool}"


# --- quantities and requests -----------------------------------------------------------------
# A snapshot parses tens of thousands of pods whose quantities repeat ("250m", "512Mi"): parsed
# numbers are cached, amounts are summed as plain lists of four floats, and an error's location is
# only spelled out when there is an error.

Amounts = list[float]  # cpus, mem, disk, gpus in clusterman's units (resources.py)
RESOURCE_INDEX = {"cpu": 0, "memory": 1, "ephemeral-storage": 2, **dict.fromkeys(GPU_RESOURCES, 3)}
DIVISOR = (1.0, 1e6, 1e6, 1.0)  # cores; bytes -> MB; bytes -> MB; devices


class BadQuantity(Exception):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(f"{name}: {value!r} is not a Kubernetes quantity >= 0")


@functools.lru_cache(maxsize=4096)
def _number(value: str | int | float) -> float:
    from kubernetes.utils import parse_quantity  # the kubernetes extra: only Kubernetes pools get here

    number = parse_quantity(value)  # ValueError when it is not a quantity
    if not number.is_finite() or number < 0:
        raise ValueError(value)
    return float(number)


def amounts(resource_list: Mapping[str, Any] | objects.ResourceList | None) -> Amounts:
    """A resource list (``cpu``, ``memory``, ``ephemeral-storage``, GPUs) in clusterman's units."""
    out = [0.0, 0.0, 0.0, 0.0]
    for name, value in (resource_list or {}).items():
        k = RESOURCE_INDEX.get(name)
        if k is None:
            continue
        try:
            out[k] += _number(value) / DIVISOR[k]
        except (ValueError, TypeError, ArithmeticError):
            raise BadQuantity(name, value) from None
    return out


def resources_from(resource_list: Mapping[str, Any] | objects.ResourceList | None, where: str) -> Resources:
    """``amounts`` as Resources; a bad quantity is a ConnectorError naming ``where``."""
    try:
        return Resources(*amounts(resource_list))
    except BadQuantity as e:
        raise ConnectorError(f"{where}.{e}") from None


def pod_request(
    pod: Mapping[str, Any] | objects.Pod, default: Resources = DEFAULT_POD_REQUEST
) -> tuple[Resources, bool]:
    """Kubernetes' effective request of a pod, and whether a default was used for cpu or memory.

    Regular containers and sidecars (init containers with ``restartPolicy: Always``) run together;
    each regular init container runs alone beside the sidecars started before it. The pod needs
    the largest of those moments, plus its overhead (``spec.overhead``). A resource with a limit and
    no request requests its limit (the API server's defaulting rule; recorded objects already show
    it, objects written by hand may not).
    """
    return _pod_request(as_pod(pod), default)


def _pod_request(pod: objects.Pod, default: Resources) -> tuple[Resources, bool]:
    try:
        return _request(_shape(pod.spec), default.cpus, default.mem)
    except _BadAt as e:
        raise ConnectorError(f"pod {pod_key(pod)}: {e.where}.{e.problem}") from None


class _BadAt(Exception):
    def __init__(self, where: str, problem: BadQuantity) -> None:
        super().__init__(where)
        self.where, self.problem = where, problem


def _shape(spec: objects.PodSpec) -> tuple[Any, ...]:
    """What a pod's request depends on, hashable as decoded (the structs are frozen): the pods of one
    deployment share it."""
    return (spec.overhead, tuple(spec.containers or ()), tuple(spec.init_containers or ()))


@functools.lru_cache(maxsize=8192)
def _request(shape: tuple[Any, ...], default_cpus: float, default_mem: float) -> tuple[Resources, bool]:
    """The request of a pod of ``shape``; the default's two floats, not its Resources, are the key:
    Python hashes a dataclass in Python code, once a pod."""
    overhead_list, containers, init_containers = shape
    named: set[str] = set()
    where = "spec.overhead"
    try:
        overhead = amounts(overhead_list)
        running = [0.0, 0.0, 0.0, 0.0]
        for i, container in enumerate(containers):
            where = f"spec.containers[{i}].resources"
            _add(running, _container(container, named))
        sidecars = [0.0, 0.0, 0.0, 0.0]
        peak = [0.0, 0.0, 0.0, 0.0]
        for i, container in enumerate(init_containers):
            where = f"spec.initContainers[{i}].resources"
            request = _container(container, named)
            if container.restart_policy == "Always":
                _add(sidecars, request)
                step = sidecars
            else:
                step = [a + b for a, b in zip(sidecars, request, strict=True)]
            peak = [max(a, b) for a, b in zip(peak, step, strict=True)]
    except BadQuantity as e:
        raise _BadAt(where, e) from None
    _add(running, sidecars)
    effective = [max(r, p) + o for r, p, o in zip(running, peak, overhead, strict=True)]
    defaulted = False
    if "cpu" not in named and default_cpus:
        effective[0] += default_cpus
        defaulted = True
    if "memory" not in named and default_mem:
        effective[1] += default_mem
        defaulted = True
    return _shared(Resources(*effective)), defaulted


def _container(container: objects.Container, named: set[str]) -> Amounts:
    spec = container.resources
    requests = dict(spec.requests.items()) if spec and spec.requests else {}
    if spec and spec.limits:
        requests = {**dict(spec.limits.items()), **requests}
    if "cpu" in requests:
        named.add("cpu")
    if "memory" in requests:
        named.add("memory")
    return amounts(requests)


def _add(total: Amounts, more: Amounts) -> None:
    for k in range(4):
        total[k] += more[k]


# --- pods ---------------------------------------------------------------------------------------


def as_pod(pod: Mapping[str, Any] | objects.Pod) -> objects.Pod:
    """A pod as its struct; a dict that is not a pod's shape is a ConnectorError."""
    return _as(pod, "Pod")


def _as(obj: Any, kind: str) -> Any:
    structs = _structs()
    try:
        return structs.convert(obj, getattr(structs, kind))
    except structs.DecodeError as e:
        raise ConnectorError(f"a {kind.lower()} is not a Kubernetes {kind} object: {e}") from None


@functools.cache
def _structs() -> Any:
    """The structs module, imported once: msgspec is the kubernetes extra's."""
    from clusterman.cluster import kubernetes_objects

    return kubernetes_objects


def pod_name(pod: Mapping[str, Any] | objects.Pod) -> str:
    return pod_key(as_pod(pod))


def pod_key(pod: objects.Pod) -> str:
    """A decoded pod's namespace/name: how the cache and a fresh list order and find it."""
    meta = pod.metadata
    return f"{meta.namespace or 'default'}/{meta.name or '?'}"


def owner_kinds(pod: objects.Pod) -> set[str]:
    return {ref.kind for ref in pod.metadata.owner_references or ()}


def is_daemon(pod: Mapping[str, Any] | objects.Pod, owners: set[str] | None = None) -> bool:
    """DaemonSet pods and mirror pods (static pods the kubelet runs) belong to the node, not the load."""
    pod = as_pod(pod)
    return _daemon(pod, owner_kinds(pod) if owners is None else owners)


def _daemon(pod: objects.Pod, owners: set[str]) -> bool:
    return MIRROR_POD_ANNOTATION in (pod.metadata.annotations or {}) or "DaemonSet" in owners or "Node" in owners


def is_unschedulable(pod: Mapping[str, Any] | objects.Pod) -> bool:
    """Pending, on no node, and the scheduler said it found none that fits."""
    return _unschedulable(as_pod(pod))


def _unschedulable(pod: objects.Pod) -> bool:
    if pod.status.phase != "Pending" or pod.spec.node_name:
        return False
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or ()
    )


def targets_pool(pod: Mapping[str, Any] | objects.Pod, pool: KubernetesPool) -> bool:
    """Does this pod ask for the pool's nodes? Pods that accept any node are no pool's demand."""
    return _targets(as_pod(pod), pool)


def _targets(pod: objects.Pod, pool: KubernetesPool) -> bool:
    spec = pod.spec
    if (spec.node_selector or {}).get(pool.node_label_key) == pool.pool:
        return True
    if (pod.metadata.labels or {}).get(pool.pool_label_key) == pool.pool:
        return True
    node_affinity = spec.affinity.node_affinity if spec.affinity else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    for term in (required.node_selector_terms if required else None) or ():
        for expression in term.match_expressions or ():
            if (
                expression.key == pool.node_label_key
                and expression.operator == "In"
                and pool.pool in (expression.values or ())
            ):
                return True
    return False


def has_controller(pod: objects.Pod) -> bool:
    """An owner that makes a new pod when this one is evicted (a ReplicaSet, a Job, ...)."""
    return any(ref.controller is True for ref in pod.metadata.owner_references or ())


def has_local_storage(pod: objects.Pod) -> bool:
    """An ``emptyDir`` on disk or a ``hostPath`` volume: what the pod wrote there stays behind when it
    moves (cluster-autoscaler's rule; an emptyDir in memory is lost either way)."""
    for volume in pod.spec.volumes or ():
        if volume.host_path is not None:
            return True
        if volume.empty_dir is not None and volume.empty_dir.medium != "Memory":
            return True
    return False


def task_from(pod: objects.Pod, request: Resources, pool: KubernetesPool, owners: set[str]) -> Task:
    meta = pod.metadata
    annotations = meta.annotations or {}
    labels = meta.labels or {}
    said = {str(annotations.get(k, "")).strip().lower() for k in pool.safe_to_evict_keys}
    movable = "true" in said  # cluster-autoscaler's "true": moves without a controller, or with local storage
    return Task(
        id=pod_key(pod),
        requests=request,
        daemon=_daemon(pod, owners),
        safe_to_evict=not (said & FALSE_WORDS),
        batch="Job" in owners,
        app=sys.intern(str(labels.get("app.kubernetes.io/name") or labels.get("app") or "")),
        do_not_disrupt=str(annotations.get(DO_NOT_DISRUPT_ANNOTATION, "")).strip().lower() == "true",
        controller=movable or has_controller(pod),
        local_storage=not movable and has_local_storage(pod),
    )


@functools.lru_cache(maxsize=4096)
def _shared(request: Resources) -> Resources:
    """One object per distinct request: pods of a deployment ask alike, and a cache holds 300,000."""
    return request


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What a pod is to the pool, decoded once: its task, where it runs, and whether it took the default."""

    node: str  # spec.nodeName; "" for a pending pod aimed at the pool
    task: Task
    defaulted: bool  # counts with the default request for cpu or memory
    error: str = ""  # why the pod cannot be read: a snapshot that needs it fails with this


def pod_record(pod: Mapping[str, Any] | objects.Pod, pool: KubernetesPool) -> PodRecord | None:
    """The record of a pod that may matter to the pool: bound to a node (any node: the node may be, or
    become, one of the pool's), or unschedulable and aimed at the pool. None for any other pod."""
    pod = as_pod(pod)
    if pod.status.phase in FINISHED_PHASES:
        return None
    node_name = pod.spec.node_name or ""
    if not node_name and (not _unschedulable(pod) or not _targets(pod, pool)):
        return None
    owners = owner_kinds(pod)
    daemon = _daemon(pod, owners)
    if not node_name and daemon:
        return None
    try:
        request, used_default = _pod_request(pod, Resources() if daemon else pool.default_request)
    except ConnectorError as e:  # kept: it fails the snapshots that need it (the pool's), not the others
        return PodRecord(sys.intern(node_name), Task(pod_key(pod), Resources()), False, str(e))
    return PodRecord(sys.intern(node_name), task_from(pod, request, pool, owners), used_default)


# --- nodes --------------------------------------------------------------------------------------


def unix_time(text: Any, where: str) -> float:
    try:
        return parse_time(text if isinstance(text, datetime) else str(text))
    except ValueError:
        raise ConnectorError(f"{where}: {text!r} is not an RFC 3339 time") from None


def taint_time(taint: objects.Taint, node: str) -> float | None:
    """When the node was tainted: the taint's value (Unix seconds), else ``timeAdded``; None when neither."""
    try:
        value = parse_time("" if taint.value is None else taint.value)
        if value > 0:
            return value
    except ValueError:
        pass
    if taint.time_added:
        return unix_time(taint.time_added, f"node {node}: taint {taint.key}.timeAdded")
    return None


def _state(obj: objects.Node) -> tuple[NodeState, float | None, str]:
    """The node's state, its taint time (None: the taint carries none) and the scale-down taint's key."""
    name = obj.metadata.name or "?"
    for taint in obj.spec.taints or ():
        if taint.key in SCALE_DOWN_TAINT_KEYS:
            return NodeState.TAINTED, taint_time(taint, name), taint.key
    if not any(c.type == "Ready" and c.status == "True" for c in obj.status.conditions or ()):
        return NodeState.UNKNOWN, NO_TIME, ""
    if obj.spec.unschedulable:
        return NodeState.CORDONED, NO_TIME, ""
    return NodeState.READY, NO_TIME, ""


def node_state(obj: Mapping[str, Any] | objects.Node, now: float) -> tuple[NodeState, float]:
    """The node's state and taint time. A scale-down taint wins (the node is on its way out, Ready
    or not); then not Ready is unknown; then cordoned (``spec.unschedulable``); else ready.

    A scale-down taint with no time counts from ``now``: a grace period never ends early on a guess.
    """
    node = as_node(obj)
    state, tainted_at, key = _state(node)
    if tainted_at is None:
        _untimed(node.metadata.name or "?", key)
        return state, now
    return state, tainted_at


def _untimed(node: str, key: str) -> None:
    log.warning("node %s: taint %s carries no time; counting it from now", node, key)


def as_node(obj: Mapping[str, Any] | objects.Node) -> objects.Node:
    return _as(obj, "Node")


def provider_instance(provider_id: str) -> tuple[str, str]:
    """``aws:///us-west-2a/i-0abc`` -> (``i-0abc``, ``us-west-2a``); other providers: last segment."""
    if not provider_id:
        return "", ""
    parts = [p for p in provider_id.split("://", 1)[-1].split("/") if p]
    if not parts:
        return "", ""
    zone = parts[-2] if provider_id.startswith("aws://") and len(parts) >= 2 else ""
    return parts[-1], zone


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """The scheduler's view of one node, without its pods; ``untimed``: the key of a scale-down taint
    that carries no time (the node's taint time is then the snapshot's ``now``), else ""."""

    node: Node
    untimed: str = ""

    def at(self, now: float) -> Node:
        if not self.untimed:
            return self.node
        _untimed(self.node.id, self.untimed)
        return replace(self.node, tainted_at=now)


def node_record(obj: Mapping[str, Any] | objects.Node) -> NodeRecord:
    """The scheduler's view of one node (tasks and daemon overhead are added by ``assemble``)."""
    obj = as_node(obj)
    meta = obj.metadata
    name = meta.name
    if not name:
        raise ConnectorError("a node in the list has no metadata.name")
    labels = meta.labels or {}
    status = obj.status
    state, tainted_at, key = _state(obj)
    instance_id, zone = provider_instance(str(obj.spec.provider_id or ""))
    ip = next((a.address for a in status.addresses or () if a.type == "InternalIP"), "")
    created = meta.creation_timestamp
    node = Node(
        id=sys.intern(name),
        state=state,
        allocatable=resources_from(status.allocatable, f"node {name}: status.allocatable"),
        instance_id=instance_id,
        launched_at=unix_time(created, f"node {name}: metadata.creationTimestamp") if created else NO_TIME,
        tainted_at=NO_TIME if tainted_at is None else tainted_at,
        instance_type=_label(labels, "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"),
        market=_label(labels, "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone") or zone,
        ip=ip,
        # shared by most nodes of a pool: one string each, not one per node
        kernel=sys.intern(info.kernel_version) if (info := status.node_info) else "",
        os_image=sys.intern(info.os_image) if info else "",
    )
    return NodeRecord(node, key if tainted_at is None else "")


def node_from(obj: Mapping[str, Any] | objects.Node, now: float) -> Node:
    return node_record(obj).at(now)


def _label(labels: Mapping[str, Any], *keys: str) -> str:
    """The first of ``keys`` present: the current label name, then its deprecated beta spelling."""
    return next((str(labels[k]) for k in keys if labels.get(k)), "")


def assemble(node: Node, tasks: tuple[Task, ...]) -> Node:
    """A node with its pods' tasks: daemon pods' requests come out of its allocatable."""
    allocatable = (node.allocatable - Resources.total([t.requests for t in tasks if t.daemon])).clip_negative()
    return replace(node, allocatable=allocatable, tasks=tasks)


def warn_defaulted(count: int, first: Sequence[str], pool: KubernetesPool) -> None:
    """One warning per snapshot: how many pods took the default request, and the first few."""
    if count:
        log.warning(
            "%d pod(s) request no cpu or memory; each counts as %s: %s",
            count,
            ", ".join(f"{k}={v:g}" for k, v in pool.default_request.items() if v),
            ", ".join(first[:5]) + (" ..." if count > 5 else ""),
        )


def build_view(
    node_objs: Iterable[Mapping[str, Any] | objects.Node],
    pod_objs: Iterable[Mapping[str, Any] | objects.Pod],
    pool: KubernetesPool,
    now: float,
) -> SchedulerView:
    """Nodes with their pods, and the pool's unschedulable pods, from API objects in list order."""
    records = {r.node.id: r for r in map(node_record, node_objs)}
    return view_of(records, [r for r in (pod_record(p, pool) for p in pod_objs) if r is not None], pool, now)


def view_of(
    nodes: Mapping[str, NodeRecord], pods: Iterable[PodRecord], pool: KubernetesPool, now: float
) -> SchedulerView:
    """The view from records: each pool node with the pods bound to it, and the pending pods."""
    on: dict[str, list[PodRecord]] = {name: [] for name in nodes}
    pending_records: list[PodRecord] = []
    used: list[PodRecord] = []
    for record in pods:
        mine = on.get(record.node) if record.node else pending_records
        if mine is None:
            continue
        if record.error:
            raise ConnectorError(record.error)
        mine.append(record)
        used.append(record)
    defaulted = [r.task.id for r in used if r.defaulted]
    warn_defaulted(len(defaulted), defaulted, pool)
    built = tuple(assemble(record.at(now), tuple(r.task for r in on[name])) for name, record in nodes.items())
    return SchedulerView(built, tuple(r.task for r in pending_records))


# --- the connector ------------------------------------------------------------------------------


class PodReaders:
    """One reader of a cluster's pods for the Kubernetes pools of one process: the metrics collector
    reads every pool of a cluster, and one list and one watch of the cluster's pods serve them all
    (``kubernetes_cache.PodReader``). Held weakly: a reader lives while a pool reads through it."""

    def __init__(self) -> None:
        self._readers: weakref.WeakValueDictionary[Hashable, PodReader] = weakref.WeakValueDictionary()
        self._connectors: weakref.WeakSet[KubernetesConnector] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, connector: KubernetesConnector) -> None:
        """A connector that will read through this registry (nothing is read yet)."""
        self._connectors.add(connector)

    def get(self, key: Hashable, make: Callable[[], PodReader]) -> PodReader:
        with self._lock:
            reader = self._readers.get(key)
            if reader is None or reader.stopped:
                reader = self._readers[key] = make()
                reader.gather = functools.partial(self._caches, key)
            return reader

    def _caches(self, key: Hashable) -> None:
        """Before the first list: every connector of the reader makes its cache, so that the one
        list serves them all (a connector that cannot says why at its own first snapshot)."""
        for connector in list(self._connectors):
            if connector.reader_key == key:
                with contextlib.suppress(Exception):
                    connector.cache()


def read_pods_together(connectors: Iterable[ClusterConnector]) -> None:
    """The Kubernetes connectors among these (the pools of one process) read each cluster's pods
    through one reader: one list and one watch serve them all. Before their first snapshot."""
    readers = PodReaders()
    for connector in connectors:
        if isinstance(connector, KubernetesConnector):
            connector.read_with(readers)


class KubernetesConnector(ClusterConnector):
    """The pool read through a watch-fed cache (``kubernetes_cache.py``): the first snapshot lists
    the pool's nodes and the pods in the caller's thread (the API's errors are this snapshot's),
    then threads watch for changes and each snapshot reads the cache. ``watch=False`` lists afresh
    for every snapshot instead (a command that reads the pool once). ``readers``: the pods are read
    through the reader these connectors share for the cluster, not one of this connector's own."""

    def __init__(
        self,
        pool: KubernetesPool,
        kubeconfig_path: str | None,
        *,
        cloud: CloudViewSource | None = None,
        page_size: int = 500,
        timeout_seconds: float = 30.0,
        watch: bool = True,
        stale_after_seconds: float | None = None,
        watch_seconds: int | None = None,
        readers: PodReaders | None = None,
    ) -> None:
        super().__init__(cloud)
        self.pool = pool
        self.kubeconfig_path = kubeconfig_path
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self.watch = watch
        self.stale_after_seconds = stale_after_seconds
        self.watch_seconds = watch_seconds
        self.readers: PodReaders | None = None
        self._client: kubernetes.client.ApiClient | None = None
        self._cache: PoolCache | None = None
        if readers is not None:
            self.read_with(readers)

    def read_with(self, readers: PodReaders) -> None:
        """Read the pods through the reader these share (before the first snapshot)."""
        self.readers = readers
        readers.add(self)

    def scheduler_view(self, now: float) -> SchedulerView:
        cache = self.cache()
        if not self.watch:
            cache.sync(again=True)
            return cache.view(now)
        if cache.synced:  # by this connector's first snapshot, or by another pool's (a shared reader)
            cache.nudge()
            cache.catch_up()
        else:
            cache.sync()
        cache.start()
        return cache.view(now)

    def cache(self) -> PoolCache:
        """The pool's cache (not synced until the first snapshot)."""
        client = self._connect()  # first: it names the missing kubernetes extra
        if self._cache is None:
            import kubernetes.client

            from clusterman.cluster import kubernetes_cache
            from clusterman.cluster import kubernetes_objects as structs

            api = kubernetes.client.CoreV1Api(client)
            nodes = kubernetes_cache.KubernetesSource(
                api.list_node, structs.Node, "nodes", client.configuration.host,
                selectors={"label_selector": self.pool.node_selector}, **self._call_settings(),
            )  # fmt: skip
            readers = self.readers
            reader = readers.get(self.reader_key, self._pod_reader) if readers is not None else self._pod_reader(client)
            self._cache = kubernetes_cache.PoolCache(
                self.pool, nodes, reader, stale_after_seconds=self.stale_after_seconds
            )
        return self._cache

    @property
    def reader_key(self) -> Hashable:
        """What a shared reader of the pods must have in common with this connector's own."""
        return (self.kubeconfig_path, *self._call_settings().values())

    def _call_settings(self) -> dict[str, Any]:
        return {
            "page_size": self.page_size,
            "timeout_seconds": self.timeout_seconds,
            "watch_seconds": self.watch_seconds,
        }

    def _pod_reader(self, client: kubernetes.client.ApiClient | None = None) -> PodReader:
        """A reader of the cluster's pods. Shared (no ``client``), it has a client of its own: it may
        outlive this connector; this connector's own reader uses its client."""
        import kubernetes.client

        from clusterman.cluster import kubernetes_cache
        from clusterman.cluster import kubernetes_objects as structs

        owned = client is None
        client = client or api_client(self.kubeconfig_path)
        pods = kubernetes_cache.KubernetesSource(
            kubernetes.client.CoreV1Api(client).list_pod_for_all_namespaces, structs.Pod, "pods",
            client.configuration.host, selectors={"field_selector": "status.phase!=Succeeded,status.phase!=Failed"},
            **self._call_settings(),
        )  # fmt: skip
        return kubernetes_cache.PodReader(pods, on_stop=client.close if owned else lambda: None)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connect(self) -> kubernetes.client.ApiClient:
        if self._client is None:
            self._client = api_client(self.kubeconfig_path)
        return self._client


def request_timeout(seconds: float) -> tuple[float, float]:
    """``_request_timeout`` for the client: (connect, read). The client silently ignores a float
    (it takes an int or a pair), and 30.0 had meant no timeout at all."""
    return (seconds, seconds)


def api_client(kubeconfig_path: str | None, retry_reads: bool = True) -> kubernetes.client.ApiClient:
    """A client for the pool's cluster: the kubeconfig the main file names, else ``$KUBECONFIG`` (an
    operator's machine), else the pod's ServiceAccount, as every controller does (its token is read
    again as the kubelet rotates it). KubeconfigError naming what was tried when none is usable.

    Without ``retry_reads`` a request the server took and did not answer is not sent again: it
    costs one timeout, not ``ATTEMPTS`` (connections that fail are still tried again)."""
    try:
        import kubernetes.config
    except ImportError as e:
        raise KubeconfigError(
            f"Kubernetes pools need clusterman's kubernetes extra: pip install 'clusterman[kubernetes]' ({e})"
        ) from e
    import kubernetes.client

    configuration = kubernetes.client.Configuration()
    configuration.retries = ATTEMPTS - 1 if retry_reads else urllib3.Retry(total=ATTEMPTS - 1, read=0)
    path = kubeconfig_path or os.environ.get("KUBECONFIG")
    if path:
        try:
            return kubernetes.config.new_client_from_config(
                config_file=path, persist_config=False, client_configuration=configuration
            )
        except (kubernetes.config.ConfigException, OSError, ValueError) as e:
            raise KubeconfigError(f"kubeconfig {path}: {e}") from e
    if not os.environ.get(IN_CLUSTER_HOST_ENV):
        raise KubeconfigError(
            "no kubeconfig: set the cluster's kubeconfig_path in the main file or $KUBECONFIG, "
            f"or run in a pod (${IN_CLUSTER_HOST_ENV} is not set)"
        )
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except (kubernetes.config.ConfigException, OSError) as e:
        raise KubeconfigError(f"in-cluster configuration (the pod's ServiceAccount): {e}") from e
    return kubernetes.client.ApiClient(configuration)


def api_error(e: ApiException) -> str:
    """``403 Forbidden: nodes is forbidden: ...`` from the Status object the API server returns."""
    message = ""
    try:
        message = json.loads(e.body or b"{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{e.status} {e.reason}" + (f": {message}" if message else "")

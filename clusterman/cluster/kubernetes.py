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

import functools
import json
import logging
import os
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
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

if TYPE_CHECKING:  # the kubernetes package is an extra: imported where a Kubernetes pool needs it
    import kubernetes.client
    from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

# The taint our pool manager puts on a node it is removing; the value is the Unix time it did so.
SCALE_DOWN_TAINT_KEY = "clusterman.com/scale-down"
# Taints that mean "being removed by an autoscaler": ours, Escalator's (value: Unix seconds), and
# Yelp Clusterman's drain taint (value: Unix seconds), so pools taken over from either keep going.
SCALE_DOWN_TAINT_KEYS = (SCALE_DOWN_TAINT_KEY, "atlassian.com/escalator", "clusterman.yelp.com/terminating")
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# attempts per API call, each bounded by the caller's timeout: the first and two retries (urllib3's
# default is four in all), so a call to an API server that does not answer ends within 3 timeouts
ATTEMPTS = 3
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"  # set by the kubelet in every pod
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
FALSE_WORDS = frozenset({"false", "f", "no", "n", "off", "0"})


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


def amounts(resource_list: Mapping[str, Any] | None) -> Amounts:
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


def resources_from(resource_list: Mapping[str, Any] | None, where: str) -> Resources:
    """``amounts`` as Resources; a bad quantity is a ConnectorError naming ``where``."""
    try:
        return Resources(*amounts(resource_list))
    except BadQuantity as e:
        raise ConnectorError(f"{where}.{e}") from None


def pod_request(pod: Mapping[str, Any], default: Resources = DEFAULT_POD_REQUEST) -> tuple[Resources, bool]:
    """Kubernetes' effective request of a pod, and whether a default was used for cpu or memory.

    Regular containers and sidecars (init containers with ``restartPolicy: Always``) run together;
    each regular init container runs alone beside the sidecars started before it. The pod needs
    the largest of those moments, plus its overhead (``spec.overhead``). A resource with a limit and
    no request requests its limit (the API server's defaulting rule; recorded objects already show
    it, objects written by hand may not).
    """
    spec = pod.get("spec") or {}
    named: set[str] = set()
    where = "spec.overhead"
    try:
        overhead = amounts(spec.get("overhead"))
        running = [0.0, 0.0, 0.0, 0.0]
        for i, container in enumerate(spec.get("containers") or ()):
            where = f"spec.containers[{i}].resources"
            _add(running, _container(container, named))
        sidecars = [0.0, 0.0, 0.0, 0.0]
        peak = [0.0, 0.0, 0.0, 0.0]
        for i, container in enumerate(spec.get("initContainers") or ()):
            where = f"spec.initContainers[{i}].resources"
            request = _container(container, named)
            if container.get("restartPolicy") == "Always":
                _add(sidecars, request)
                step = sidecars
            else:
                step = [a + b for a, b in zip(sidecars, request, strict=True)]
            peak = [max(a, b) for a, b in zip(peak, step, strict=True)]
    except BadQuantity as e:
        raise ConnectorError(f"pod {pod_name(pod)}: {where}.{e}") from None
    _add(running, sidecars)
    effective = [max(r, p) + o for r, p, o in zip(running, peak, overhead, strict=True)]
    defaulted = False
    if "cpu" not in named and default.cpus:
        effective[0] += default.cpus
        defaulted = True
    if "memory" not in named and default.mem:
        effective[1] += default.mem
        defaulted = True
    return Resources(*effective), defaulted


def _container(container: Mapping[str, Any], named: set[str]) -> Amounts:
    spec = container.get("resources") or {}
    requests = spec.get("requests") or {}
    limits = spec.get("limits")
    if limits:
        requests = {**limits, **requests}
    if "cpu" in requests:
        named.add("cpu")
    if "memory" in requests:
        named.add("memory")
    return amounts(requests)


def _add(total: Amounts, more: Amounts) -> None:
    for k in range(4):
        total[k] += more[k]


# --- pods ---------------------------------------------------------------------------------------


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def owner_kinds(pod: Mapping[str, Any]) -> set[str]:
    return {ref.get("kind", "") for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()}


def is_daemon(pod: Mapping[str, Any], owners: set[str] | None = None) -> bool:
    """DaemonSet pods and mirror pods (static pods the kubelet runs) belong to the node, not the load."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    owners = owner_kinds(pod) if owners is None else owners
    return MIRROR_POD_ANNOTATION in annotations or "DaemonSet" in owners or "Node" in owners


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending, on no node, and the scheduler said it found none that fits."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or ()
    )


def targets_pool(pod: Mapping[str, Any], pool: KubernetesPool) -> bool:
    """Does this pod ask for the pool's nodes? Pods that accept any node are no pool's demand."""
    spec = pod.get("spec") or {}
    if (spec.get("nodeSelector") or {}).get(pool.node_label_key) == pool.pool:
        return True
    if ((pod.get("metadata") or {}).get("labels") or {}).get(pool.pool_label_key) == pool.pool:
        return True
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or ():
        for expression in term.get("matchExpressions") or ():
            if (
                expression.get("key") == pool.node_label_key
                and expression.get("operator") == "In"
                and pool.pool in (expression.get("values") or ())
            ):
                return True
    return False


def task_from(pod: Mapping[str, Any], request: Resources, pool: KubernetesPool, owners: set[str]) -> Task:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    pinned = any(str(annotations.get(k, "")).strip().lower() in FALSE_WORDS for k in pool.safe_to_evict_keys)
    return Task(
        id=pod_name(pod),
        requests=request,
        daemon=is_daemon(pod, owners),
        safe_to_evict=not pinned,
        batch="Job" in owners,
        app=str(labels.get("app.kubernetes.io/name") or labels.get("app") or ""),
    )


# --- nodes --------------------------------------------------------------------------------------


def unix_time(text: Any, where: str) -> float:
    try:
        return parse_time(text if isinstance(text, datetime) else str(text))
    except ValueError:
        raise ConnectorError(f"{where}: {text!r} is not an RFC 3339 time") from None


def taint_time(taint: Mapping[str, Any], node: str, now: float) -> float:
    """When the node was tainted: the taint's value (Unix seconds), else ``timeAdded``.

    With neither, the taint counts from ``now``: a grace period never ends early on a guess.
    """
    try:
        value = parse_time(taint.get("value", ""))
        if value > 0:
            return value
    except ValueError:
        pass
    if taint.get("timeAdded"):
        return unix_time(taint["timeAdded"], f"node {node}: taint {taint.get('key')}.timeAdded")
    log.warning("node %s: taint %s carries no time; counting it from now", node, taint.get("key"))
    return now


def node_state(obj: Mapping[str, Any], now: float) -> tuple[NodeState, float]:
    """The node's state and taint time. A scale-down taint wins (the node is on its way out, Ready
    or not); then not Ready is unknown; then cordoned (``spec.unschedulable``); else ready."""
    name = (obj.get("metadata") or {}).get("name", "?")
    spec = obj.get("spec") or {}
    for taint in spec.get("taints") or ():
        if taint.get("key") in SCALE_DOWN_TAINT_KEYS:
            return NodeState.TAINTED, taint_time(taint, name, now)
    conditions = (obj.get("status") or {}).get("conditions") or ()
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return NodeState.UNKNOWN, NO_TIME
    if spec.get("unschedulable"):
        return NodeState.CORDONED, NO_TIME
    return NodeState.READY, NO_TIME


def provider_instance(provider_id: str) -> tuple[str, str]:
    """``aws:///us-west-2a/i-0abc`` -> (``i-0abc``, ``us-west-2a``); other providers: last segment."""
    if not provider_id:
        return "", ""
    parts = [p for p in provider_id.split("://", 1)[-1].split("/") if p]
    if not parts:
        return "", ""
    zone = parts[-2] if provider_id.startswith("aws://") and len(parts) >= 2 else ""
    return parts[-1], zone


def node_from(obj: Mapping[str, Any], now: float) -> Node:
    """The scheduler's view of one node (tasks and daemon overhead are added by ``build_view``)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ConnectorError("a node in the list has no metadata.name")
    labels = meta.get("labels") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    state, tainted_at = node_state(obj, now)
    instance_id, zone = provider_instance(str(spec.get("providerID") or ""))
    ip = next((a.get("address", "") for a in status.get("addresses") or () if a.get("type") == "InternalIP"), "")
    created = meta.get("creationTimestamp")
    return Node(
        id=name,
        state=state,
        allocatable=resources_from(status.get("allocatable"), f"node {name}: status.allocatable"),
        instance_id=instance_id,
        launched_at=unix_time(created, f"node {name}: metadata.creationTimestamp") if created else NO_TIME,
        tainted_at=tainted_at,
        instance_type=_label(labels, "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type"),
        market=_label(labels, "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone") or zone,
        ip=ip,
    )


def _label(labels: Mapping[str, str], *keys: str) -> str:
    """The first of ``keys`` present: the current label name, then its deprecated beta spelling."""
    return next((str(labels[k]) for k in keys if labels.get(k)), "")


def build_view(
    node_objs: Iterable[Mapping[str, Any]], pod_objs: Iterable[Mapping[str, Any]], pool: KubernetesPool, now: float
) -> SchedulerView:
    """Nodes with their pods, and the pool's unschedulable pods, from raw API objects."""
    nodes = {n.id: n for n in (node_from(obj, now) for obj in node_objs)}
    tasks: dict[str, list[Task]] = {name: [] for name in nodes}
    overhead: dict[str, list[Resources]] = {name: [] for name in nodes}
    pending: list[Task] = []
    defaulted: list[str] = []
    for pod in pod_objs:
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        on_pool_node = node_name in nodes
        if not on_pool_node and (node_name or not is_unschedulable(pod) or not targets_pool(pod, pool)):
            continue
        owners = owner_kinds(pod)
        daemon = is_daemon(pod, owners)
        request, used_default = pod_request(pod, Resources() if daemon else pool.default_request)
        task = task_from(pod, request, pool, owners)
        if used_default:
            defaulted.append(task.id)
        if on_pool_node:
            tasks[node_name].append(task)
            if daemon:
                overhead[node_name].append(request)
        elif not daemon:
            pending.append(task)
    if defaulted:
        log.warning(
            "%d pod(s) request no cpu or memory; each counts as %s: %s",
            len(defaulted),
            ", ".join(f"{k}={v:g}" for k, v in pool.default_request.items() if v),
            ", ".join(defaulted[:5]) + (" ..." if len(defaulted) > 5 else ""),
        )
    built = []
    for name, node in nodes.items():
        allocatable = (node.allocatable - Resources.total(overhead[name])).clip_negative()
        built.append(replace(node, allocatable=allocatable, tasks=tuple(tasks[name])))
    return SchedulerView(tuple(built), tuple(pending))


# --- the connector ------------------------------------------------------------------------------


class KubernetesConnector(ClusterConnector):
    def __init__(
        self,
        pool: KubernetesPool,
        kubeconfig_path: str | None,
        *,
        cloud: CloudViewSource | None = None,
        page_size: int = 500,
        timeout_seconds: float = 30.0,
    ) -> None:
        super().__init__(cloud)
        self.pool = pool
        self.kubeconfig_path = kubeconfig_path
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self._client: kubernetes.client.ApiClient | None = None

    def scheduler_view(self, now: float) -> SchedulerView:
        client = self._connect()  # first: it names the missing kubernetes extra
        import kubernetes.client

        api = kubernetes.client.CoreV1Api(client)
        nodes = self._list_all(api.list_node, "nodes", label_selector=self.pool.node_selector)
        pods = self._list_all(
            api.list_pod_for_all_namespaces, "pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"
        )
        return build_view(nodes, pods, self.pool, now)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connect(self) -> kubernetes.client.ApiClient:
        if self._client is None:
            self._client = api_client(self.kubeconfig_path)
        return self._client

    @property
    def _host(self) -> str:
        if self._client is not None:
            return str(self._client.configuration.host)
        return self.kubeconfig_path or "(in-cluster)"

    def _list_all(self, method: Callable[..., Any], what: str, **selectors: str) -> list[dict[str, Any]]:
        """Every item of a list call, following ``metadata.continue`` page by page."""
        from kubernetes.client.exceptions import ApiException

        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                response = method(
                    limit=self.page_size,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=request_timeout(self.timeout_seconds),
                    **selectors,
                )
                body = json.loads(response.data)
            except ApiException as e:
                raise ConnectorError(f"kubernetes API {self._host}: listing {what}: {api_error(e)}") from e
            except urllib3.exceptions.HTTPError as e:
                raise ConnectorError(f"kubernetes API {self._host}: listing {what}: cannot reach it: {e}") from e
            except ValueError as e:
                raise ConnectorError(f"kubernetes API {self._host}: listing {what}: the answer is not JSON: {e}") from e
            if not isinstance(body, dict) or not isinstance(body.get("items"), list):
                raise ConnectorError(f"kubernetes API {self._host}: listing {what}: the answer has no items list")
            items.extend(body["items"])
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items


def request_timeout(seconds: float) -> tuple[float, float]:
    """``_request_timeout`` for the client: (connect, read). The client silently ignores a float
    (it takes an int or a pair), and 30.0 had meant no timeout at all."""
    return (seconds, seconds)


def api_client(kubeconfig_path: str | None) -> kubernetes.client.ApiClient:
    """A client for the pool's cluster: the kubeconfig the main file names, else ``$KUBECONFIG`` (an
    operator's machine), else the pod's ServiceAccount, as every controller does (its token is read
    again as the kubelet rotates it). ConnectorError naming what was tried when none is usable."""
    try:
        import kubernetes.config
    except ImportError as e:
        raise ConnectorError(
            f"Kubernetes pools need clusterman's kubernetes extra: pip install 'clusterman[kubernetes]' ({e})"
        ) from e
    import kubernetes.client

    configuration = kubernetes.client.Configuration()
    configuration.retries = ATTEMPTS - 1
    path = kubeconfig_path or os.environ.get("KUBECONFIG")
    if path:
        try:
            return kubernetes.config.new_client_from_config(
                config_file=path, persist_config=False, client_configuration=configuration
            )
        except (kubernetes.config.ConfigException, OSError, ValueError) as e:
            raise ConnectorError(f"kubeconfig {path}: {e}") from e
    if not os.environ.get(IN_CLUSTER_HOST_ENV):
        raise ConnectorError(
            "no kubeconfig: set the cluster's kubeconfig_path in the main file or $KUBECONFIG, "
            f"or run in a pod (${IN_CLUSTER_HOST_ENV} is not set)"
        )
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except (kubernetes.config.ConfigException, OSError) as e:
        raise ConnectorError(f"in-cluster configuration (the pod's ServiceAccount): {e}") from e
    return kubernetes.client.ApiClient(configuration)


def api_error(e: ApiException) -> str:
    """``403 Forbidden: nodes is forbidden: ...`` from the Status object the API server returns."""
    message = ""
    try:
        message = json.loads(e.body or b"{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{e.status} {e.reason}" + (f": {message}" if message else "")

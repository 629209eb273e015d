"""Node lifecycle on Kubernetes, with the official ``kubernetes`` client.

  taint    add the ``NoSchedule`` taint ``clusterman.com/scale-down=<unix seconds>``; other taints stay;
           a node that already carries a scale-down taint (ours, Escalator's, Yelp's) keeps it and its time
  untaint  remove every scale-down taint the read side recognises (ours, Escalator's, Yelp's)
  drain    evict every pod on the node that is not a DaemonSet or mirror pod, through the Eviction API,
           each only while the run may still act (its inputs within the budget, its lease held);
           a disruption budget's refusal (429) is "not now", as the server's rate limit (429 too, said
           apart by its message); a pod already gone (404) is fine; a pod
           annotated safe-to-evict=false is never evicted (it keeps the drain from being DONE)
  running  the pods a drain would still have to move (not DaemonSet or mirror pods), listed from
           the API server itself (not the watch cache) right before termination
  cordons  ``spec.unschedulable`` is an operator's: never written here. A node is only drained when
           it carries a scale-down taint, so a cordoned node is drained only if the decision tainted it

Taints are written with a patch that carries the ``resourceVersion`` read just before. When
someone else changed the node meanwhile (a kubelet, an operator's own taint), the API server
refuses it with 409 Conflict and the edit is redone on the fresh node, so no other writer's taint
is lost. Responses are read as raw JSON (``_preload_content=False``), as the connector reads them.

Nodes are handled one after another, so a silent API server must not cost a timeout per node.
A call that goes unanswered is not sent again (it costs one timeout, so a drain stays within the
run's budget: each attempt is a third of it), and the calls that follow within ``ATTEMPTS``
timeouts fail at once, saying so; the run a period later tries again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

import urllib3

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import ATTEMPTS
from clusterman.cluster.kubernetes import DO_NOT_DISRUPT_ANNOTATION
from clusterman.cluster.kubernetes import FALSE_WORDS
from clusterman.cluster.kubernetes import SAFE_TO_EVICT_ANNOTATION
from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEY
from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEYS
from clusterman.cluster.kubernetes import api_client
from clusterman.cluster.kubernetes import api_error
from clusterman.cluster.kubernetes import is_daemon
from clusterman.cluster.kubernetes import pod_name
from clusterman.cluster.kubernetes import pod_request
from clusterman.cluster.kubernetes import request_timeout
from clusterman.cluster.lifecycle import UNKNOWN_COUNT
from clusterman.cluster.lifecycle import DrainResult
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import GoingOn
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import NodeResult
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.lifecycle import Results
from clusterman.core.timestamps import parse_time

if TYPE_CHECKING:  # the kubernetes package is an extra: imported where a Kubernetes pool needs it
    import kubernetes.client

log = logging.getLogger(__name__)

Taint = dict[str, Any]
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


# --- taint lists (pure) -------------------------------------------------------------------------


def scale_down_taint(taints: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first taint that marks the node for removal by an autoscaler, if any."""
    return next((t for t in taints if t.get("key") in SCALE_DOWN_TAINT_KEYS), None)


def with_scale_down_taint(taints: Iterable[Taint], now: float) -> list[Taint] | None:
    """The taints plus ours at ``now``; None when the node is already marked (its time is kept)."""
    taints = list(taints)
    if scale_down_taint(taints) is not None:
        return None
    return [*taints, {"key": SCALE_DOWN_TAINT_KEY, "value": str(int(now)), "effect": "NoSchedule"}]


def without_scale_down_taints(taints: Iterable[Taint]) -> list[Taint] | None:
    """The taints without any scale-down taint; None when there is none to remove."""
    taints = list(taints)
    kept = [t for t in taints if t.get("key") not in SCALE_DOWN_TAINT_KEYS]
    return kept if len(kept) != len(taints) else None


def blocking_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that must leave before the node goes: not DaemonSet or mirror pods (they die with it)."""
    return [p for p in pods if not is_daemon(p)]


def is_pinned(pod: Mapping[str, Any], keys: Iterable[str]) -> bool:
    """Annotated not safe to evict (``false`` under one of ``keys``) or not to be disrupted
    (Karpenter's ``karpenter.sh/do-not-disrupt: "true"``): the owner asked us never to evict it."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(DO_NOT_DISRUPT_ANNOTATION, "")).strip().lower() == "true":
        return True
    return any(str(annotations.get(k, "")).strip().lower() in FALSE_WORDS for k in keys)


def start_seconds(pod: Mapping[str, Any]) -> float:
    """How long the pod took to start where it runs: from ``status.startTime`` (the kubelet took it)
    to its ``Ready`` condition's last transition (0 when not known: not ready, never measured).
    What it took here is the best guess of what it takes elsewhere: image pulls, init containers,
    warm-up before the readiness probe passes."""
    status = pod.get("status") or {}
    started = status.get("startTime")
    ready = next(
        (c for c in status.get("conditions") or () if c.get("type") == "Ready" and c.get("status") == "True"), None
    )
    if not started or ready is None or not ready.get("lastTransitionTime"):
        return 0.0
    try:
        return max(0.0, parse_time(ready["lastTransitionTime"]) - parse_time(started))
    except ValueError:
        return 0.0


def eviction_order(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that take longest to start elsewhere first (``start_seconds``), then the largest CPU
    request (hardest to place), then by name: when a node has two minutes left, what is slow to
    come back must leave first."""

    def cpus(pod: Mapping[str, Any]) -> float:
        try:
            return pod_request(pod)[0].cpus
        except ConnectorError:
            return 0.0

    return sorted(pods, key=lambda p: (-start_seconds(p), -cpus(p), pod_name(p)))


# --- the adapter --------------------------------------------------------------------------------


class ApiFailure(Exception):
    """An API call failed; the message is one line (status, reason, the server's message)."""

    def __init__(self, message: str, status: int = 0, unanswered: bool = False) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, 0 when there was no answer
        self.unanswered = unanswered  # sent, and no answer came back: it may have been carried out

    @property
    def outcome_unknown(self) -> bool:
        """Whether the call may have been carried out all the same: no answer, an answer that is
        not JSON, or a server error (the API server's own timeout is a 500 or a 504 after it may
        have written to etcd). A 4xx is a clear refusal: nothing was changed."""
        return self.unanswered or self.status >= 500


class KubernetesLifecycle(NodeLifecycle):
    def __init__(
        self,
        kubeconfig_path: str | None,
        *,
        dry_run: bool = False,
        timeout_seconds: float = 30.0,
        conflict_retries: int = 5,
        page_size: int = 500,
        safe_to_evict_keys: tuple[str, ...] = (SAFE_TO_EVICT_ANNOTATION,),
    ) -> None:
        self.kubeconfig_path = kubeconfig_path
        self.safe_to_evict_keys = safe_to_evict_keys
        self.dry_run = dry_run
        self.timeout_seconds = timeout_seconds
        self.conflict_retries = conflict_retries
        self.page_size = page_size
        self._client: kubernetes.client.ApiClient | None = None
        # After a call the API did not answer: until when (monotonic) the other calls are not
        # tried, and why. Each would wait as long again, node after node, past the run's budget.
        self._silent_until = 0.0
        self._silence = ""

    def taint(self, node_ids: Iterable[str], now: float) -> Results:
        def edit(taints: list[Taint]) -> list[Taint] | None:
            return with_scale_down_taint(taints, now)

        done = f"tainted {SCALE_DOWN_TAINT_KEY}={int(now)}:NoSchedule"
        return self.each(node_ids, lambda n: self._edit_taints(n, edit, done, "already tainted"), "taint")

    def untaint(self, node_ids: Iterable[str]) -> Results:
        return self.each(
            node_ids,
            lambda n: self._edit_taints(n, without_scale_down_taints, "untainted", "not tainted"),
            "untaint",
        )

    def drain(self, node_id: str, now: float, going_on: GoingOn = lambda: "") -> DrainResult:
        try:
            return self._drain(node_id, going_on)
        except ApiFailure as e:
            return DrainResult(node_id, DrainStatus.FAILED, detail=str(e), dry_run=self.dry_run)
        except Exception as e:  # one node's surprise must not stop the loop's other nodes; logged in full
            log.exception("drain %s failed", node_id)
            return DrainResult(node_id, DrainStatus.FAILED, detail=f"{type(e).__name__}: {e}", dry_run=self.dry_run)

    def running(self, node_ids: Iterable[str]) -> dict[str, int]:
        """Each node's pods that are not DaemonSet or mirror pods, listed from the API server (not
        the watch cache); ``UNKNOWN_COUNT`` when the list fails (logged)."""
        counts: dict[str, int] = {}
        for node_id in dict.fromkeys(node_ids):
            try:
                counts[node_id] = len(blocking_pods(self._pods_on(node_id)))
            except ApiFailure as e:
                log.warning("cannot read the pods on %s before terminating it: %s", node_id, e)
                counts[node_id] = UNKNOWN_COUNT
        return counts

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # taints ------------------------------------------------------------------------------------

    def _edit_taints(
        self, node_id: str, edit: Callable[[list[Taint]], list[Taint] | None], done: str, already: str
    ) -> NodeResult:
        """Read the node, edit its taints, write them back guarded by its resourceVersion; on 409 redo."""
        try:
            for _ in range(self.conflict_retries + 1):
                node = self._read_node(node_id)
                if node is None:
                    return self.result(node_id, Outcome.FAILED, "no such node")
                new = edit(list((node.get("spec") or {}).get("taints") or ()))
                if new is None:
                    return self.result(node_id, Outcome.UNCHANGED, already)
                if self.dry_run:
                    return self.result(node_id, Outcome.CHANGED, self.would(done))
                version = (node.get("metadata") or {}).get("resourceVersion")
                body = {"metadata": {"resourceVersion": version}, "spec": {"taints": new}}
                try:
                    self._call(f"patching node {node_id}", self._api().patch_node, node_id, body)
                except ApiFailure as e:
                    if e.status == 409:
                        log.info("node %s changed while we edited its taints; reading it again", node_id)
                        continue
                    return self.result(node_id, Outcome.FAILED, str(e), unknown=e.outcome_unknown)
                return self.result(node_id, Outcome.CHANGED, done)
        except ApiFailure as e:
            return self.result(node_id, Outcome.FAILED, str(e))
        return self.result(
            node_id, Outcome.FAILED, f"409 Conflict {self.conflict_retries + 1} times: the node kept changing"
        )

    # drain -------------------------------------------------------------------------------------

    def _drain(self, node_id: str, going_on: GoingOn) -> DrainResult:
        node = self._read_node(node_id)
        if node is None:
            return self._drained(node_id, DrainStatus.DONE, 0, 0, "no such node: nothing runs there")
        taint = scale_down_taint((node.get("spec") or {}).get("taints") or ())
        if taint is None:
            cordoned = " (cordoned by an operator)" if (node.get("spec") or {}).get("unschedulable") else ""
            return self._drained(
                node_id, DrainStatus.FAILED, detail=f"not tainted for scale-down{cordoned}: never drained"
            )
        pods = blocking_pods(self._pods_on(node_id))
        if not pods:
            return self._drained(node_id, DrainStatus.DONE, 0, 0, "no pods left to evict")
        leaving = [p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp")]
        pinned = [pod_name(p) for p in pods if p not in leaving and is_pinned(p, self.safe_to_evict_keys)]
        to_evict = eviction_order(p for p in pods if p not in leaving and pod_name(p) not in pinned)
        kept = [f"{len(leaving)} already terminating"] if leaving else []
        if pinned:
            kept.append(f"{len(pinned)} not safe to evict (left for the hard grace period): {', '.join(pinned)}")
        if self.dry_run:
            detail = "; ".join([self.would(f"evicted {len(to_evict)} pod(s)"), *kept])
            return self._drained(node_id, DrainStatus.NOT_NOW, len(pods), len(to_evict), detail)
        evicted, refused, throttled, failed = 0, [], [], []
        stop = ""
        for k, pod in enumerate(to_evict):
            stop = going_on()  # a process stopped or stuck since it listed the pods acts no further
            if stop:
                kept.append(f"{len(to_evict) - k} not asked: {stop}")
                break
            try:
                self._evict(pod)
                evicted += 1
            except ApiFailure as e:
                if e.status == 404:
                    continue  # gone already
                if e.status == 429 and "disruption budget" in str(e):  # the API server's words for a PDB
                    refused.append(pod_name(pod))
                elif e.status == 429:  # its rate limit: not now either, but no budget is to blame
                    throttled.append(f"{pod_name(pod)} ({str(e).partition(': ')[2]})")
                else:
                    failed.append(str(e))
        remaining = len(pods) - evicted if stop else len(blocking_pods(self._pods_on(node_id)))
        parts = [f"evicted {evicted} pod(s)", *kept]
        if refused:
            parts.append(f"{len(refused)} refused for now by a disruption budget: {', '.join(refused)}")
        if throttled:
            parts.append(f"{len(throttled)} refused for now by the API server: {', '.join(throttled)}")
        if failed:
            parts.append(f"{len(failed)} failed: {'; '.join(failed)}")
        parts.append(f"{remaining} pod(s) remain")
        status = DrainStatus.FAILED if failed else DrainStatus.DONE if remaining == 0 else DrainStatus.NOT_NOW
        return self._drained(node_id, status, remaining, evicted, "; ".join(parts))

    def _drained(
        self, node_id: str, status: DrainStatus, remaining: int = UNKNOWN_COUNT, evicted: int = 0, detail: str = ""
    ) -> DrainResult:
        return DrainResult(node_id, status, remaining, evicted, detail, self.dry_run)

    def _evict(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "default")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        self._call(
            f"evicting pod {namespace}/{name}", self._api().create_namespaced_pod_eviction, name, namespace, body
        )

    # API calls ---------------------------------------------------------------------------------

    def _read_node(self, node_id: str) -> dict[str, Any] | None:
        try:
            node: dict[str, Any] = self._call(f"reading node {node_id}", self._api().read_node, node_id)
        except ApiFailure as e:
            if e.status == 404:
                return None
            raise
        return node

    def _pods_on(self, node_id: str) -> list[dict[str, Any]]:
        """Every unfinished pod on the node, page by page."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            body = self._call(
                f"listing pods on {node_id}",
                self._api().list_pod_for_all_namespaces,
                field_selector=f"spec.nodeName={node_id},{NOT_FINISHED}",
                limit=self.page_size,
                _continue=token,
            )
            items.extend(body.get("items") or ())
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the API; the raw JSON answer, or ApiFailure (caused by the ApiException, if any)."""
        from kubernetes.client.exceptions import ApiException

        if time.monotonic() < self._silent_until:
            raise ApiFailure(f"{what}: not tried: {self._silence}")
        try:
            timeout = request_timeout(self.timeout_seconds)
            response = method(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            data = response.data
            return json.loads(data) if data else {}
        except ApiException as e:
            raise ApiFailure(f"{what}: {api_error(e)}", e.status or 0) from e
        except urllib3.exceptions.HTTPError as e:
            # the calls of the next ATTEMPTS timeouts (the rest of this run) fail at once; a run a
            # period later tries again
            self._silent_until = time.monotonic() + ATTEMPTS * self.timeout_seconds
            self._silence = f"the kubernetes API did not answer {what} just before"
            raise ApiFailure(f"{what}: cannot reach the kubernetes API: {e}", unanswered=True) from e
        except ValueError as e:
            raise ApiFailure(f"{what}: the answer is not JSON: {e}", unanswered=True) from e

    def _api(self) -> kubernetes.client.CoreV1Api:
        if self._client is None:
            try:
                self._client = api_client(self.kubeconfig_path, retry_reads=False)
            except ConnectorError as e:
                raise ApiFailure(str(e)) from e
        import kubernetes.client

        return kubernetes.client.CoreV1Api(self._client)

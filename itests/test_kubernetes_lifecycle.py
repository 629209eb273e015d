"""The Kubernetes node lifecycle against a stateful fake API server on loopback, driven by the real
``kubernetes`` client configured from a kubeconfig file (nothing in the client is patched)."""

import time

import pytest

from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEY
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import Outcome
from clusterman.core.model import NodeState
from clusterman.local.moto_server import free_port
from itests.recorded_api import kubeconfig
from itests.recorded_api import load
from itests.recorded_api import silent_api
from itests.stateful_api import FakeKubernetes
from itests.stateful_api import serving
from itests.stateful_api import status

N = "ip-10-0-1-{}.us-west-2.compute.internal"
NOW = 1714650000.0
WEB = "default/web-7d9f8c6b5-abcde"


@pytest.fixture
def api():
    fake = FakeKubernetes(load("kubernetes/nodes.json")["items"], load("kubernetes/pods.json")["items"])
    with serving(fake) as server:
        yield server


@pytest.fixture
def config(api, tmp_path):
    return kubeconfig(tmp_path / "kubeconfig", api.url)


@pytest.fixture
def lifecycle(config):
    life = KubernetesLifecycle(config)
    yield life
    life.close()


def taints(api, n):
    return [(t["key"], t.get("value"), t["effect"]) for t in api.nodes[N.format(n)]["spec"].get("taints") or ()]


def patches(api):
    return [r for r in api.requests if r.method == "PATCH"]


def test_taint_adds_ours_keeps_other_taints_and_is_read_back(api, lifecycle, config):
    before_12 = taints(api, 12)
    results = lifecycle.taint([N.format(10), N.format(12), N.format(11), N.format(14), "ip-gone"], NOW)

    assert {n: r.outcome for n, r in results.items()} == {
        N.format(10): Outcome.CHANGED,
        N.format(12): Outcome.CHANGED,  # cordoned: the decision chose it; the cordon stays
        N.format(11): Outcome.UNCHANGED,  # ours already, with its own time
        N.format(14): Outcome.UNCHANGED,  # Escalator's taint: already marked, its time kept
        "ip-gone": Outcome.FAILED,
    }
    assert list(results) == [N.format(i) for i in (10, 12, 11, 14)] + ["ip-gone"]
    assert results["ip-gone"].detail == "no such node"
    assert taints(api, 10) == [(SCALE_DOWN_TAINT_KEY, "1714650000", "NoSchedule")]
    assert taints(api, 12) == [*before_12, (SCALE_DOWN_TAINT_KEY, "1714650000", "NoSchedule")]
    assert api.nodes[N.format(12)]["spec"]["unschedulable"] is True
    assert taints(api, 11) == [(SCALE_DOWN_TAINT_KEY, "1714640000", "NoSchedule")]
    assert taints(api, 14) == [("atlassian.com/escalator", "1714640300", "NoSchedule")]

    # each write is a strategic-merge patch guarded by the resourceVersion just read
    sent = patches(api)
    assert len(sent) == 2
    assert {r.headers["content-type"] for r in sent} == {"application/strategic-merge-patch+json"}
    assert {r.json()["metadata"]["resourceVersion"] for r in sent} == {"48213377"}

    # the read side sees what was written: tainted, at the taint's time
    connector = KubernetesConnector(KubernetesPool("default"), config)
    snap = connector.snapshot(NOW + 60)
    connector.close()
    assert (snap.node(N.format(10)).state, snap.node(N.format(10)).tainted_at) == (NodeState.TAINTED, NOW)

    again = lifecycle.taint([N.format(10)], NOW + 600)  # idempotent: no write, the first time stays
    assert again[N.format(10)].outcome is Outcome.UNCHANGED
    assert len(patches(api)) == 2 and taints(api, 10) == [(SCALE_DOWN_TAINT_KEY, "1714650000", "NoSchedule")]


def test_a_conflict_is_retried_on_the_fresh_node_and_keeps_the_other_writers_taint(api, lifecycle):
    api.races[N.format(10)] = 1  # someone else taints the node between our read and our write
    result = lifecycle.taint([N.format(10)], NOW)[N.format(10)]
    assert result.outcome is Outcome.CHANGED
    assert [p.path for p in patches(api)] == [f"/api/v1/nodes/{N.format(10)}"] * 2  # 409, then accepted
    assert taints(api, 10) == [
        ("example.com/other-writer-0", None, "PreferNoSchedule"),
        (SCALE_DOWN_TAINT_KEY, "1714650000", "NoSchedule"),
    ]

    api.races[N.format(13)] = 100  # a node that never stops changing: give up, with the reason
    stuck = KubernetesLifecycle(lifecycle.kubeconfig_path, conflict_retries=2)
    result = stuck.taint([N.format(13)], NOW)[N.format(13)]
    stuck.close()
    assert result.outcome is Outcome.FAILED
    assert result.detail == "409 Conflict 3 times: the node kept changing"
    assert not any(t[0] == SCALE_DOWN_TAINT_KEY for t in taints(api, 13))


def test_untaint_removes_every_scale_down_taint_and_never_uncordons(api, lifecycle):
    lifecycle.taint([N.format(12)], NOW)
    results = lifecycle.untaint([N.format(11), N.format(14), N.format(12), N.format(10)])
    assert {n: r.outcome for n, r in results.items()} == {
        N.format(11): Outcome.CHANGED,
        N.format(14): Outcome.CHANGED,  # Escalator's: the read side counts it as tainted, so it goes too
        N.format(12): Outcome.CHANGED,
        N.format(10): Outcome.UNCHANGED,
    }
    assert taints(api, 11) == [] and taints(api, 14) == []
    # the operator's cordon and its unschedulable taint stay
    assert api.nodes[N.format(12)]["spec"]["unschedulable"] is True
    assert [t[0] for t in taints(api, 12)] == ["node.kubernetes.io/unschedulable"]
    # unreachable taints of node 13 were never touched
    assert [t[0] for t in taints(api, 13)] == ["node.kubernetes.io/unreachable"] * 2


def test_drain_evicts_through_the_eviction_api_and_a_budget_refusal_means_not_now(api, lifecycle):
    lifecycle.taint([N.format(10)], NOW)
    api.budget_refuses.add(WEB)

    first = lifecycle.drain(N.format(10), NOW + 60)
    assert first.status is DrainStatus.NOT_NOW
    assert (first.evicted, first.remaining) == (4, 1)
    assert "1 refused for now by a disruption budget: default/web-7d9f8c6b5-abcde" in first.detail
    evictions = [r for r in api.requests if r.method == "POST"]
    assert {r.path.split("/")[-2] for r in evictions} == {
        "web-7d9f8c6b5-abcde",
        "migrate-5b6c7d8e9-fghij",
        "sidecar-6c7d8e9f0-klmno",
        "besteffort-7e8f9a0b1-pqrst",
        "web-7d9f8c6b5-uvwxy",  # scheduled and still starting: it must leave too
    }
    assert {r.json()["apiVersion"] for r in evictions} == {"policy/v1"}
    # DaemonSet and mirror pods stay (they go with the node); the finished Job pod is not asked
    assert api.pod("kube-system", "aws-node-8x2kq") and api.pod("kube-system", f"kube-proxy-{N.format(10)}")
    assert api.pod("default", "report-28573920-z9x8w")

    api.budget_refuses.clear()  # the budget allows it now
    second = lifecycle.drain(N.format(10), NOW + 120)
    assert (second.status, second.evicted, second.remaining) == (DrainStatus.DONE, 1, 0)
    assert api.pod("default", "web-7d9f8c6b5-abcde") is None

    third = lifecycle.drain(N.format(10), NOW + 180)
    assert (third.status, third.evicted, third.remaining) == (DrainStatus.DONE, 0, 0)


def test_drain_failures_are_per_pod_and_a_gone_pod_is_no_failure(api, lifecycle):
    lifecycle.taint([N.format(10)], NOW)
    api.eviction_errors[WEB] = status(500, "InternalError", "This pod has more than one PodDisruptionBudget")
    api.eviction_errors["default/migrate-5b6c7d8e9-fghij"] = status(404, "NotFound", "gone")
    result = lifecycle.drain(N.format(10), NOW)
    assert result.status is DrainStatus.FAILED
    assert result.evicted == 3  # the others went on
    assert result.remaining == 2
    assert f"1 failed: evicting pod {WEB}: 500 Internal Server Error: This pod has more than one" in result.detail


def test_drain_never_evicts_a_pinned_pod_nor_one_already_terminating(api, config):
    pinned_key = "clusterman.com/safe_to_evict"
    api.pod("default", "sidecar-6c7d8e9f0-klmno")["metadata"]["annotations"] = {pinned_key: "false"}
    api.pod("default", "besteffort-7e8f9a0b1-pqrst")["metadata"]["deletionTimestamp"] = "2024-05-02T11:00:00Z"
    life = KubernetesLifecycle(
        config, safe_to_evict_keys=("cluster-autoscaler.kubernetes.io/safe-to-evict", pinned_key)
    )
    life.taint([N.format(10)], NOW)
    result = life.drain(N.format(10), NOW)
    life.close()
    assert (result.status, result.evicted, result.remaining) == (DrainStatus.NOT_NOW, 3, 2)
    assert result.detail == (
        "evicted 3 pod(s); 1 already terminating; "
        "1 not safe to evict (left for the hard grace period): default/sidecar-6c7d8e9f0-klmno; 2 pod(s) remain"
    )
    evicted = {r.path.split("/")[-2] for r in api.requests if r.method == "POST"}
    assert "sidecar-6c7d8e9f0-klmno" not in evicted and "besteffort-7e8f9a0b1-pqrst" not in evicted


def test_drain_only_follows_a_scale_down_taint(api, lifecycle):
    cordoned = lifecycle.drain(N.format(12), NOW)  # an operator's cordon, not a decision
    assert cordoned.status is DrainStatus.FAILED
    assert cordoned.detail == "not tainted for scale-down (cordoned by an operator): never drained"
    assert lifecycle.drain(N.format(10), NOW).status is DrainStatus.FAILED
    assert api.writes == []

    gone = lifecycle.drain("ip-gone", NOW)  # no node: nothing can run there
    assert (gone.status, gone.remaining) == (DrainStatus.DONE, 0)

    escalated = lifecycle.drain(N.format(14), NOW)  # Escalator's taint counts, as on the read side
    assert (escalated.status, escalated.evicted) == (DrainStatus.DONE, 1)
    assert api.pod("default", "cache-0") is None


def test_dry_run_reads_and_writes_nothing(api, config):
    dry = KubernetesLifecycle(config, dry_run=True)
    tainted = dry.taint([N.format(10), N.format(11)], NOW)
    untainted = dry.untaint([N.format(11), N.format(10)])
    drained = dry.drain(N.format(14), NOW)
    pinned = dry.drain(N.format(11), NOW)
    dry.close()

    assert api.writes == []
    assert api.requests  # it did read
    assert (tainted[N.format(10)].outcome, tainted[N.format(10)].dry_run) == (Outcome.CHANGED, True)
    assert tainted[N.format(10)].detail.startswith("dry run: would have tainted")
    assert tainted[N.format(11)].outcome is Outcome.UNCHANGED
    assert (untainted[N.format(11)].outcome, untainted[N.format(10)].outcome) == (Outcome.CHANGED, Outcome.UNCHANGED)
    assert (drained.status, drained.evicted, drained.remaining) == (DrainStatus.NOT_NOW, 1, 1)
    assert drained.detail == "dry run: would have evicted 1 pod(s)"
    assert (pinned.status, pinned.evicted, pinned.remaining) == (DrainStatus.NOT_NOW, 0, 1)
    assert pinned.detail == (
        "dry run: would have evicted 0 pod(s); "
        "1 not safe to evict (left for the hard grace period): batch/train-8f9a0b1c2-d3e4f"
    )


def test_unreachable_api_or_bad_kubeconfig_fail_each_node_without_raising(tmp_path):
    broken = KubernetesLifecycle(str(tmp_path / "missing-kubeconfig"))
    results = broken.taint(["a", "b"], NOW)
    assert [r.outcome for r in results.values()] == [Outcome.FAILED] * 2
    assert "missing-kubeconfig" in results["a"].detail

    nobody = KubernetesLifecycle(kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}"), timeout_seconds=2)
    drained = nobody.drain("a", NOW)
    assert drained.status is DrainStatus.FAILED and "cannot reach the kubernetes API" in drained.detail
    assert nobody.untaint(["a"])["a"].outcome is Outcome.FAILED


def test_an_api_server_that_does_not_answer_holds_a_batch_for_one_call_not_one_per_node(tmp_path):
    with silent_api() as silent:
        lifecycle = KubernetesLifecycle(kubeconfig(tmp_path / "kc", silent.url), timeout_seconds=0.5)
        started = time.monotonic()
        results = lifecycle.taint(["a", "b", "c", "d", "e"], NOW)
        took = time.monotonic() - started
        assert [r.outcome for r in results.values()] == [Outcome.FAILED] * 5
        assert "cannot reach the kubernetes API" in results["a"].detail
        assert all("not tried: the kubernetes API did not answer reading node a" in results[n].detail for n in "bcde")
        assert silent.connections == 1  # the first node's call, not sent again, and nothing after
        assert took < 0.5 + 1.0  # before: 5 nodes x 4 attempts x the timeout
        drained = lifecycle.drain("f", NOW)  # the same run: not tried either
        assert drained.status is DrainStatus.FAILED and "not tried" in drained.detail
        time.sleep(3 * 0.5)  # a run later it is tried again
        assert lifecycle.untaint(["a"])["a"].outcome is Outcome.FAILED
        assert silent.connections == 2


def test_a_429_from_the_servers_rate_limit_is_not_called_a_disruption_budget(api, lifecycle):
    """Both are 429 and both mean "not now"; the operator must be told which one held the drain."""
    lifecycle.taint([N.format(10)], NOW)
    api.eviction_errors[WEB] = status(429, "TooManyRequests", "Too many requests, please try again later.")
    result = lifecycle.drain(N.format(10), NOW)
    assert result.status is DrainStatus.NOT_NOW and result.remaining == 1
    assert f"1 refused for now by the API server: {WEB} (429 Too Many Requests: Too many requests" in result.detail
    assert "disruption budget" not in result.detail


def test_a_taint_not_answered_is_unknown_and_a_refused_one_is_not(api, config):
    """A taint the server applied but answered after the client's timeout, or a server error (an
    etcd timeout) may be done all the same: its result says so, for the next run to settle. A 4xx
    is a clear refusal, and a call not tried (the API silent just before) changed nothing."""
    lifecycle = KubernetesLifecycle(config, timeout_seconds=0.5)
    late, refused, erred, after_it = N.format(10), N.format(13), N.format(12), "ip-10-0-2-20.us-west-2.compute.internal"
    answered_late = set()

    def after(request, answer):
        if request.method == "PATCH" and request.path == f"/api/v1/nodes/{late}" and not answered_late:
            answered_late.add(late)
            time.sleep(1.5)  # applied, answered after the client gave up

    api.after_answer = after
    api.patch_errors[refused] = [status(403, "Forbidden", 'nodes "x" is forbidden: the webhook said no')]
    api.patch_errors[erred] = [status(500, "InternalError", "Timeout: request did not complete within 34s")]
    try:
        first = lifecycle.taint([refused, erred], NOW)
        assert [(r.outcome, r.unknown) for r in first.values()] == [(Outcome.FAILED, False), (Outcome.FAILED, True)]
        assert "403" in first[refused].detail and "500" in first[erred].detail
        assert all(key != SCALE_DOWN_TAINT_KEY for key, _, _ in taints(api, 13))
        results = lifecycle.taint([late, after_it], NOW)
    finally:
        lifecycle.close()
    assert results[late].outcome is Outcome.FAILED and results[late].unknown, results[late]
    assert "cannot reach the kubernetes API" in results[late].detail
    assert (SCALE_DOWN_TAINT_KEY, str(int(NOW)), "NoSchedule") in taints(api, 10)  # it landed
    assert results[after_it].outcome is Outcome.FAILED and not results[after_it].unknown
    assert "not tried" in results[after_it].detail

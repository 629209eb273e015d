"""The watch-fed cache against the stateful fake API server, on loopback, through the real client.

The property: whatever happens to the cluster (pods and nodes added, changed, moved in and out of
the pool, finished, deleted; watches that expire with 410 Gone or whose connections drop), once the
cache has caught up, the view it gives equals the view of a fresh list of the same state.
"""

from __future__ import annotations

import gc
import subprocess
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.cluster import kubernetes_cache
from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes import PodReaders
from clusterman.cluster.kubernetes import assemble
from itests.recorded_api import kubeconfig
from itests.stateful_api import FakeKubernetes
from itests.stateful_api import serving
from itests.stateful_api import status
from itests.test_metrics_collector_process import POOL_LIMITS
from itests.test_metrics_collector_process import collector
from itests.test_metrics_collector_process import points
from itests.test_metrics_collector_process import write_config

POOL = KubernetesPool("default")
NOW = 1714650000.0
NODES = [f"node-{i}" for i in range(4)]


def node(name: str, pool: str = "default", ready: str = "True", taint: bool = False, cpu: str = "4") -> dict[str, Any]:
    taints = [{"key": "clusterman.com/scale-down", "value": "1714640000", "effect": "NoSchedule"}] if taint else []
    return {
        "metadata": {
            "name": name,
            "labels": {"clusterman.com/pool": pool},
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {"providerID": f"aws:///us-west-2a/i-{name}", "taints": taints},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi"}, "conditions": [{"type": "Ready", "status": ready}]},
    }


def pod(name: str, where: str, cpu: str = "500m", daemon: bool = False, phase: str = "Running") -> dict[str, Any]:
    """``where``: a node name, "pending" (unschedulable, aimed at the pool) or "elsewhere" (aimed at none)."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    status: dict[str, Any] = {"phase": phase}
    if where in ("pending", "elsewhere"):
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
        if where == "pending":
            spec["nodeSelector"] = {"clusterman.com/pool": "default"}
    else:
        spec["nodeName"] = where
    owner = [{"kind": "DaemonSet" if daemon else "ReplicaSet", "name": "x"}]
    meta = {"name": name, "namespace": "ns", "ownerReferences": owner, "labels": {"app": "a"}}
    return {"metadata": meta, "spec": spec, "status": status}


pod_names = st.sampled_from([f"p{i}" for i in range(8)])
places = st.sampled_from([*NODES, "pending", "elsewhere"])
ops = st.one_of(
    st.tuples(
        st.just("pod"), pod_names, places, st.sampled_from(["100m", "500m", "2"]), st.booleans(),
        st.sampled_from(["Running", "Running", "Succeeded"]),
    ),
    st.tuples(st.just("delete pod"), pod_names),
    st.tuples(
        st.just("node"), st.sampled_from(NODES), st.sampled_from(["default", "other"]),
        st.sampled_from(["True", "False"]), st.booleans(), st.sampled_from(["4", "8"]),
    ),
    st.tuples(st.just("delete node"), st.sampled_from(NODES)),
    st.tuples(st.just("410")),
    st.tuples(st.just("drop")),
)  # fmt: skip


def apply(fake: FakeKubernetes, op: tuple[Any, ...]) -> None:
    if op[0] == "pod":
        _, name, where, cpu, daemon, phase = op
        fake.put("pods", pod(name, where, cpu, daemon, phase))
    elif op[0] == "delete pod":
        fake.delete("pods", op[1], "ns")
    elif op[0] == "node":
        _, name, pool, ready, taint, cpu = op
        fake.put("nodes", node(name, pool, ready, taint, cpu))
    elif op[0] == "delete node":
        fake.delete("nodes", op[1])
    elif op[0] == "410":
        fake.expire_watches()
    else:
        fake.drop_watches()


@pytest.fixture
def world(tmp_path) -> Iterator[tuple[FakeKubernetes, str]]:
    nodes = [node(n) for n in NODES[:3]]
    pods = [pod("p0", NODES[0]), pod("p1", NODES[1], daemon=True), pod("p2", "pending")]
    with serving(FakeKubernetes(nodes, pods)) as fake:
        fake.bookmark_seconds = 0.05
        yield fake, kubeconfig(tmp_path / "kubeconfig", fake.url)


def watching(config: str) -> KubernetesConnector:
    connector = KubernetesConnector(POOL, config, page_size=2, timeout_seconds=5, watch_seconds=2)
    cache = connector.cache()
    for reflector in (cache.node_reflector, cache.pod_reflector):
        reflector.backoff.initial = 0.02  # the test's 410s and drops relist at once, not in 0.8 s
    return connector


def caught_up(connector: KubernetesConnector, fake: FakeKubernetes, seconds: float = 15.0) -> None:
    """Both watches have seen the server's latest version (bookmarks carry it)."""
    cache = connector.cache()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with fake.changed:
            version = str(fake.version)
        if all(r.version == version for r in (cache.node_reflector, cache.pod_reflector)):
            return
        time.sleep(0.02)
    raise AssertionError(f"the cache did not catch up with version {fake.version} in {seconds} s")


def fresh(config: str) -> Any:
    connector = KubernetesConnector(POOL, config, page_size=3, watch=False)
    try:
        return connector.scheduler_view(NOW)
    finally:
        connector.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(ops, min_size=1, max_size=6), min_size=1, max_size=3))
def test_the_cache_gives_what_a_fresh_list_gives(world, steps):
    fake, config = world
    connector = watching(config)
    try:
        connector.scheduler_view(NOW)
        for batch in steps:
            for op in batch:
                apply(fake, op)
            caught_up(connector, fake)
            assert connector.scheduler_view(NOW) == fresh(config)
    finally:
        connector.close()
    # leave the fake as the next example expects it
    for name in list(fake.pods):
        fake.delete("pods", name[1], name[0])
    for name in list(fake.nodes):
        fake.delete("nodes", name)
    for obj in (node(n) for n in NODES[:3]):
        fake.put("nodes", obj)
    for obj in (pod("p0", NODES[0]), pod("p1", NODES[1], daemon=True), pod("p2", "pending")):
        fake.put("pods", obj)


def test_a_410_lists_again_and_a_dropped_stream_resumes_without_one(world):
    fake, config = world
    connector = watching(config)
    try:
        connector.scheduler_view(NOW)
        cache = connector.cache()
        fake.drop_watches()
        fake.put("pods", pod("p5", NODES[2]))
        caught_up(connector, fake)
        assert (cache.node_reflector.lists, cache.pod_reflector.lists) == (1, 1)  # resumed from its version
        assert [t.id for t in connector.scheduler_view(NOW).nodes[2].tasks] == ["ns/p5"]
        fake.expire_watches()
        fake.put("pods", pod("p6", NODES[2]))
        caught_up(connector, fake)
        assert (cache.node_reflector.lists, cache.pod_reflector.lists) == (2, 2)  # the history was gone
        assert [t.id for t in connector.scheduler_view(NOW).nodes[2].tasks] == ["ns/p5", "ns/p6"]
    finally:
        connector.close()


def test_a_pod_update_the_pool_does_not_read_leaves_its_node_as_it_was(world):
    # most pod events are status changes: they must not make the next run rebuild the node
    fake, config = world
    connector = watching(config)
    try:
        before = connector.scheduler_view(NOW).nodes[0]
        ready = pod("p0", NODES[0])
        ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        fake.put("pods", ready)
        caught_up(connector, fake)
        assert connector.scheduler_view(NOW).nodes[0] is before
        fake.put("pods", pod("p0", NODES[0], cpu="2"))
        caught_up(connector, fake)
        assert connector.scheduler_view(NOW).nodes[0].tasks[0].requests.cpus == 2
    finally:
        connector.close()


class Compacting(FakeKubernetes):
    """etcd compacts while the pods are listed: every continue token is too old when it is used."""

    compacting = True

    def _list(self, resource: str, request: Any) -> Any:
        answer = super()._list(resource, request)
        if resource == "pods" and self.compacting:
            self._snapshots.clear()
        return answer


def test_a_list_whose_continue_token_expired_fails_that_snapshot_and_the_next_lists_again(tmp_path):
    pods = [pod(f"p{i}", NODES[i % 3]) for i in range(5)]
    with serving(Compacting([node(n) for n in NODES[:3]], pods)) as fake:
        connector = watching(kubeconfig(tmp_path / "kubeconfig", fake.url))
        try:
            with pytest.raises(ConnectorError, match="listing pods: 410 Gone: The provided continue parameter"):
                connector.scheduler_view(NOW)
            fake.compacting = False
            assert sum(len(n.tasks) for n in connector.scheduler_view(NOW).nodes) == 5
        finally:
            connector.close()


def test_a_bad_object_fails_the_snapshots_that_need_it_until_it_is_fixed(world):
    fake, config = world
    connector = watching(config)
    try:
        connector.scheduler_view(NOW)
        fake.put("pods", pod("p7", "elsewhere-node", cpu="lots"))  # not on the pool's nodes: no matter
        caught_up(connector, fake)
        connector.scheduler_view(NOW)
        fake.put("pods", pod("p7", NODES[0], cpu="lots"))
        caught_up(connector, fake)
        with pytest.raises(ConnectorError, match=r"pod ns/p7: spec.containers\[0\].resources.cpu: 'lots'"):
            connector.scheduler_view(NOW)
        with pytest.raises(ConnectorError, match=r"pod ns/p7"):
            fresh(config)  # as a fresh list does
        fake.put("pods", pod("p7", NODES[0], cpu="1"))
        caught_up(connector, fake)
        assert connector.scheduler_view(NOW) == fresh(config)
    finally:
        connector.close()


@pytest.mark.parametrize("quiet", ["silent", "streams", "ended", "down"])
def test_an_api_server_that_stops_answering_makes_the_view_stale_and_says_why(world, quiet):
    """A silent server holds every request, watches too; one whose streams are stuck answers each
    watch and then says nothing; one whose streams end answers each watch and ends it at once,
    empty; a server that is down refuses them. Neither a watch sent again, nor one answered, nor one
    ended is word from the server: retries well inside the 1.5 s keep the view stale."""
    fake, config = world
    connector = KubernetesConnector(POOL, config, timeout_seconds=0.5, watch_seconds=1, stale_after_seconds=1.5)
    cache = connector.cache()
    for reflector in (cache.node_reflector, cache.pod_reflector):
        reflector.backoff.initial, reflector.backoff.cap = 0.05, 0.1
    try:
        assert connector.scheduler_view(NOW).stale == ""
        fake.go_down() if quiet == "down" else fake.hang({"silent": "all"}.get(quiet, quiet))
        time.sleep(3.5)
        stale = connector.scheduler_view(NOW).stale  # the run does not wait for the API
        assert "has not heard from the API server for" in stale and "(> 1.5 s;" in stale
        if quiet in ("down", "ended"):  # refused, or ended, at once: sent again and again
            assert min(r.watches for r in (cache.node_reflector, cache.pod_reflector)) >= 3
        fake.come_back() if quiet == "down" else fake.answer_again()
        deadline = time.monotonic() + 15
        while connector.scheduler_view(NOW).stale and time.monotonic() < deadline:
            time.sleep(0.05)
        assert connector.scheduler_view(NOW).stale == ""  # heard again: fresh
    finally:
        connector.close()


def test_after_a_storm_of_410s_the_next_runs_see_new_pods(world):
    """Every watch answered 410 Gone: each list is followed by a longer wait (the backoff doubles).
    Once the storm ends, a run ends the wait in progress, so a new pod is in the view of the next
    run, not after whatever the backoff grew to (a wait of 1.6-3.2 s here)."""
    fake, config = world
    connector = watching(config)
    pods = connector.cache().pod_reflector
    pods.backoff.initial = 0.2
    try:
        connector.scheduler_view(NOW)
        fake.gone_storm = True
        deadline = time.monotonic() + 15
        while not (pods.lists == 4 and "after 410 Gone" in pods.freshness().state):
            assert time.monotonic() < deadline, pods.freshness()
            time.sleep(0.01)
        fake.gone_storm = False
        fake.put("pods", pod("p5", NODES[2]))
        seen = []
        for _ in range(2):  # runs 0.25 s apart: the first ends the wait, the second sees the pod
            time.sleep(0.25)
            seen = [t.id for t in connector.scheduler_view(NOW).nodes[2].tasks]
        assert seen == ["ns/p5"], pods.freshness()
    finally:
        connector.close()


def test_a_closed_or_dropped_connector_is_freed_at_once_and_nothing_is_frozen(world):
    """Ten connectors made and synced, half of them closed, the others only dropped: each cache is
    freed by reference counting as soon as its connector is (no reference cycle holds it), the
    watch threads end, and the garbage collector froze nothing (a frozen cycle would never go)."""
    _, config = world
    caches, readers = [], []
    for i in range(10):
        connector = watching(config)
        connector.scheduler_view(NOW)
        caches.append(weakref.ref(connector.cache()))
        readers.append(weakref.ref(connector.cache().pod_reflector))
        if i % 2:
            connector.close()
        del connector
    assert gc.get_freeze_count() == 0
    assert [r() for r in caches] == [None] * 10
    deadline = time.monotonic() + 5
    while any(t.name.startswith("watch ") for t in threading.enumerate()):
        assert time.monotonic() < deadline, [t.name for t in threading.enumerate()]
        time.sleep(0.02)
    assert [r() for r in readers] == [None] * 10  # their threads ended: nothing holds them


def two_pools() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node("node-0"), node("node-1"), node("node-2", pool="other"), node("node-3", pool="other")]
    pods = [pod(f"p{i}", f"node-{i}") for i in range(4)] + [pod("wait-default", "pending")]
    waiting = pod("wait-other", "pending")
    waiting["spec"]["nodeSelector"] = {"clusterman.com/pool": "other"}
    return nodes, [*pods, waiting]


def test_a_pool_keeps_the_pods_on_its_own_nodes_and_reads_a_joining_nodes_pods(tmp_path):
    """The other pool's pods are not kept. A node labelled into the pool later, whose pods were bound
    long before, has its pods read then, by node; one whose read fails fails the view, naming it,
    until a later run reads it."""
    nodes, pods = two_pools()
    with serving(FakeKubernetes(nodes, pods)) as fake:
        fake.bookmark_seconds = 0.05
        connector = watching(kubeconfig(tmp_path / "kubeconfig", fake.url))
        try:
            connector.scheduler_view(NOW)
            cache = connector.cache()
            assert sorted(cache.pods) == ["ns/p0", "ns/p1", "ns/wait-default"]
            fake.put("nodes", node("node-2"))  # into the pool: its pod was bound before
            caught_up(connector, fake)
            assert [t.id for t in connector.scheduler_view(NOW).nodes[2].tasks] == ["ns/p2"]
            read = [r.query for r in fake.requests if "spec.nodeName" in r.query.get("fieldSelector", "")]
            assert [q["fieldSelector"].split(",")[0] for q in read] == ["spec.nodeName=node-2"]
            fake.node_read_errors["node-3"] = status(503, "ServiceUnavailable", "etcd is away")
            fake.put("nodes", node("node-3"))
            caught_up(connector, fake)
            with pytest.raises(ConnectorError, match=r"the pods on node node-3 could not be read: .*503"):
                connector.scheduler_view(NOW)
            del fake.node_read_errors["node-3"]
            assert [t.id for t in connector.scheduler_view(NOW).nodes[3].tasks] == ["ns/p3"]
            assert connector.scheduler_view(NOW) == fresh(kubeconfig(tmp_path / "kubeconfig", fake.url))
        finally:
            connector.close()


def test_the_metrics_collector_reads_a_clusters_pods_once_for_all_its_pools(tmp_path):
    """Two Kubernetes pools of one cluster in the collector's one process: one list of the cluster's
    pods serves both (each pool's nodes are listed first), and each pool counts only its own."""
    nodes, pods = two_pools()
    with serving(FakeKubernetes(nodes, pods)) as fake:
        config = write_config(tmp_path, kubeconfig(tmp_path / "kubeconfig", fake.url))
        (tmp_path / "pools" / "kube-prod" / "other.kubernetes").write_text(POOL_LIMITS)
        done = subprocess.run(
            collector(config, "--cluster", "kube-prod", "--once", "--store", "stdout"),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        listed = [r for r in fake.requests if r.path == "/api/v1/pods" and not set(r.query) & {"watch", "continue"}]
    assert done.returncode == 0, done.stderr
    assert len(listed) == 1, [r.query for r in listed]
    got = {(p["type"], p["key"]): p["value"] for p in points(done.stdout)}
    for pool in ("default", "other"):
        key = f"|cluster=kube-prod,pool={pool}.kubernetes"
        assert got[("system_metrics", "cpus_allocated" + key)] == pytest.approx(1.0)
        assert got[("system_metrics", "unschedulable_pods" + key)] == 1


def test_a_list_after_410_keeps_the_records_it_holds_and_a_run_meanwhile_sees_every_pod(world):
    """The list after a 410 replaces records as its pages come, keeping each one held when it is
    equal (never two copies of the cache); a run while it lists sees every pod, before or after."""
    fake, config = world
    for i in range(3, 8):
        fake.put("pods", pod(f"p{i}", NODES[i % 3]))
    connector = watching(config)
    try:
        before = connector.scheduler_view(NOW)
        cache = connector.cache()
        during: list[Any] = []

        def mid_list(request: Any, answer: Any) -> None:
            if request.path == "/api/v1/pods" and "continue" in request.query and not during:
                during.append(connector.scheduler_view(NOW))

        fake.after_answer = mid_list
        fake.gone_storm = True  # every watch 410 Gone, however recent its version
        deadline = time.monotonic() + 15
        while cache.pod_reflector.lists < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fake.gone_storm = False
        caught_up(connector, fake)
        assert during == [before]
        after = connector.scheduler_view(NOW)
        assert all(node is held for node, held in zip(after.nodes, before.nodes, strict=True))
    finally:
        connector.close()


def test_each_change_is_folded_into_its_node_as_it_arrives(world, monkeypatch):
    """A run after changes builds no node: each pod event rebuilt its node when it came."""
    fake, config = world
    connector = watching(config)
    try:
        connector.scheduler_view(NOW)
        fake.put("pods", pod("p5", NODES[2]))
        fake.delete("pods", "p0", "ns")
        caught_up(connector, fake)
        built = []
        monkeypatch.setattr(kubernetes_cache, "assemble", lambda *a: built.append(a) or assemble(*a))
        view = connector.scheduler_view(NOW)
        assert built == []
        assert [[t.id for t in n.tasks] for n in view.nodes] == [[], ["ns/p1"], ["ns/p5"]]
    finally:
        connector.close()


def test_pools_sharing_a_reader_each_watch_their_nodes(tmp_path):
    """Two pools on one reader: the first snapshot lists both pools' nodes, then the pods once; the
    second pool's first snapshot lists nothing, and its nodes are watched from then on."""
    nodes, pods = two_pools()
    with serving(FakeKubernetes(nodes, pods)) as fake:
        fake.bookmark_seconds = 0.05
        config, readers = kubeconfig(tmp_path / "kubeconfig", fake.url), PodReaders()
        first, second = (
            KubernetesConnector(KubernetesPool(pool), config, page_size=2, watch_seconds=2, readers=readers)
            for pool in ("default", "other")
        )
        try:
            first.scheduler_view(NOW)
            asked = len(fake.requests)
            assert [t.id for n in second.scheduler_view(NOW).nodes for t in n.tasks] == ["ns/p2", "ns/p3"]
            assert first.cache().reader is second.cache().reader
            assert not [r for r in fake.requests[asked:] if "watch" not in r.query]
            fake.put("nodes", node("node-3", pool="other", taint=True))
            fake.put("pods", pod("p5", "node-2"))
            caught_up(second, fake)
            view = second.scheduler_view(NOW)
            assert [n.state.value for n in view.nodes] == ["ready", "tainted"]
            assert [t.id for t in view.nodes[0].tasks] == ["ns/p2", "ns/p5"]
            assert sorted(first.cache().pods) == ["ns/p0", "ns/p1", "ns/wait-default"]
        finally:
            first.close()
            second.close()


def test_a_pool_that_comes_after_the_list_reads_its_nodes_pods_and_again_what_failed(tmp_path):
    """A pool whose connector is made after its reader listed reads the pods of each of its nodes;
    when a read fails, that node and those not read yet are read again at the next runs."""
    nodes, pods = two_pools()
    with serving(FakeKubernetes(nodes, pods)) as fake:
        fake.bookmark_seconds = 0.05
        config, readers = kubeconfig(tmp_path / "kubeconfig", fake.url), PodReaders()
        first = KubernetesConnector(POOL, config, page_size=2, watch_seconds=2, readers=readers)
        first.scheduler_view(NOW)
        late = KubernetesConnector(KubernetesPool("other"), config, page_size=2, watch_seconds=2, readers=readers)
        try:
            fake.node_read_errors["node-2"] = status(503, "ServiceUnavailable", "etcd is away")
            with pytest.raises(ConnectorError, match=r"the pods on node node-2 could not be read"):
                late.scheduler_view(NOW)
            del fake.node_read_errors["node-2"]
            view = late.scheduler_view(NOW)
            assert [[t.id for t in n.tasks] for n in view.nodes] == [["ns/p2"], ["ns/p3"]]
            other = KubernetesConnector(KubernetesPool("other"), config, watch=False)
            assert view == other.scheduler_view(NOW)
            other.close()
        finally:
            first.close()
            late.close()

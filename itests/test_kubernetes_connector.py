"""The Kubernetes connector against recorded API JSON served on loopback to the real ``kubernetes``
client, configured from a kubeconfig file like an operator's (nothing in the client is patched)."""

import logging
import time

import pytest

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import KubernetesConnector
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.core.accounting import account_nodes
from clusterman.core.accounting import pending_demand
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudView
from clusterman.core.config import DEFAULT_POD_REQUEST
from clusterman.core.model import NodeState
from clusterman.core.model import ResourceGroup
from itests.recorded_api import flag
from itests.recorded_api import kubeconfig
from itests.recorded_api import load
from itests.recorded_api import recorded_api
from itests.recorded_api import silent_api

N = "ip-10-0-1-{}.us-west-2.compute.internal"
POOL = KubernetesPool(
    "default", safe_to_evict_keys=("cluster-autoscaler.kubernetes.io/safe-to-evict", "clusterman.com/safe_to_evict")
)
NOW = 1714650000.0


@pytest.fixture
def api():
    with recorded_api() as server:
        server.serve("/api/v1/nodes", load("kubernetes/nodes.json"), kubernetes_list=True)
        server.serve("/api/v1/pods", load("kubernetes/pods.json"), kubernetes_list=True)
        yield server


@pytest.fixture
def connector(api, tmp_path):
    c = KubernetesConnector(POOL, kubeconfig(tmp_path / "kubeconfig", api.url), page_size=4)
    yield c
    c.close()


def test_snapshot_from_recorded_api(api, connector, caplog):
    with caplog.at_level(logging.WARNING):
        snap = connector.snapshot(NOW)

    # nodes by the pool's label, in every state
    states = {n.id: n.state for n in snap.nodes}
    assert states == {
        N.format(10): NodeState.READY,
        N.format(11): NodeState.TAINTED,
        N.format(12): NodeState.CORDONED,
        N.format(13): NodeState.UNKNOWN,
        N.format(14): NodeState.TAINTED,
    }
    n10, n11, n14 = snap.node(N.format(10)), snap.node(N.format(11)), snap.node(N.format(14))
    assert (n11.tainted_at, n14.tainted_at) == (1714640000.0, 1714640300.0)
    assert (n10.instance_id, n10.market, n10.instance_type, n10.ip) == (
        "i-0a1b2c3d4e5f60010",
        "us-west-2a",
        "m5.xlarge",
        "10.0.1.10",
    )
    assert n10.launched_at == 1714557600.0  # 2024-05-01T10:00:00Z

    # pods on node 10: the daemon and the mirror pod come out of allocatable (3920m − 25m − 100m)
    assert n10.allocatable.cpus == pytest.approx(3.795)
    assert n10.allocatable.mem == pytest.approx(15143256 * 1024 / 1e6 - 64 * 2**20 / 1e6)
    assert n10.allocatable.disk == pytest.approx(95551.679124)
    requests = {t.id: t.requests for t in n10.workload()}
    assert set(requests) == {
        "default/web-7d9f8c6b5-abcde",
        "default/migrate-5b6c7d8e9-fghij",
        "default/sidecar-6c7d8e9f0-klmno",
        "default/besteffort-7e8f9a0b1-pqrst",
        "default/web-7d9f8c6b5-uvwxy",  # scheduled, still starting: on the node already
    }
    assert requests["default/web-7d9f8c6b5-abcde"].cpus == pytest.approx(0.75)
    assert requests["default/web-7d9f8c6b5-abcde"].mem == pytest.approx(536.870912 + 128.974848)
    assert requests["default/migrate-5b6c7d8e9-fghij"].cpus == pytest.approx(2.0)  # the init container
    assert requests["default/sidecar-6c7d8e9f0-klmno"].cpus == pytest.approx(1.1 + 0.25)  # sidecar + init, + overhead
    assert requests["default/sidecar-6c7d8e9f0-klmno"].mem == pytest.approx(67.108864 + 129 + 125.82912)
    assert requests["default/besteffort-7e8f9a0b1-pqrst"] == DEFAULT_POD_REQUEST
    assert "besteffort" in caplog.text and "1 pod(s) request no cpu or memory" in caplog.text
    assert {t.id for t in n10.tasks if t.daemon} == {
        "kube-system/aws-node-8x2kq",
        f"kube-system/kube-proxy-{N.format(10)}",
    }

    # safe-to-evict annotations pin their nodes; a Job is batch work
    (train,) = n11.tasks
    assert not train.safe_to_evict and train.batch and n11.pins_node()
    assert n14.pins_node() and not snap.node(N.format(12)).pins_node()
    assert {t.id: t.app for t in n10.workload()}["default/web-7d9f8c6b5-abcde"] == "web"

    # pending: unschedulable pods aimed at the pool, by selector, affinity or pool label
    assert sorted(t.id for t in snap.pending) == [
        "default/batch-9a0b1c2d3-aaaaa",
        "default/batch-9a0b1c2d3-bbbbb",
        "default/labelled-0b1c2d3e4-ccccc",
    ]
    demand = pending_demand(snap)
    assert demand.cpus == pytest.approx(3.5) and demand.mem == pytest.approx(4294.967296 + 1073.741824 + 500)
    assert account_nodes(snap.nodes).allocated.cpus == pytest.approx(0.75 + 2 + 1.35 + 0.1 + 0.5 + 1 + 0.3)
    assert snap.groups == ()  # no cloud view given


def test_the_client_asks_what_a_real_api_server_expects(api, connector):
    connector.snapshot(NOW)
    deadline = time.monotonic() + 10
    while len([r for r in api.requests if "watch" in r.query]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    lists = [r for r in api.requests if "watch" not in r.query]
    node_calls = [r for r in lists if r.path == "/api/v1/nodes"]
    pod_calls = [r for r in lists if r.path == "/api/v1/pods"]
    assert all(r.query["labelSelector"] == "clusterman.com/pool=default" for r in node_calls)
    assert all(r.query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed" for r in pod_calls)
    assert all(r.query["limit"] == "4" for r in node_calls + pod_calls)
    # five pool nodes in pages of four, seventeen unfinished pods in pages of four: continue tokens followed
    assert len(node_calls) == 2 and "continue" in node_calls[1].query
    assert len(pod_calls) == 5
    assert all(r.headers.get("authorization") == "Bearer recorded-token" for r in api.requests)
    # then one watch of each, from the list's version, with the same selectors and bookmarks
    watches = {r.path: r.query for r in api.requests if "watch" in r.query}
    assert set(watches) == {"/api/v1/nodes", "/api/v1/pods"}
    for path, query in watches.items():
        assert flag(query, "watch") and flag(query, "allowWatchBookmarks")
        recorded = load(f"kubernetes/{path.rsplit('/', 1)[1]}.json")
        assert query["resourceVersion"] == recorded["metadata"]["resourceVersion"]
        assert query["timeoutSeconds"] == "60" and "limit" not in query
    assert watches["/api/v1/nodes"]["labelSelector"] == "clusterman.com/pool=default"
    assert watches["/api/v1/pods"]["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"


def test_join_with_the_clouds_view(api, tmp_path):
    class Groups:
        def cloud_view(self, now):
            group = ResourceGroup("sfr-1", target_capacity=6, fulfilled_capacity=6, kind="sfr")
            instances = tuple(
                CloudInstance(f"i-0a1b2c3d4e5f600{n}", "sfr-1", 1.0, 1714550000.0, "m5.xlarge", "us-west-2a")
                for n in (10, 11, 12, 99)
            )
            return CloudView((group,), instances)

    connector = KubernetesConnector(POOL, kubeconfig(tmp_path / "kubeconfig", api.url), cloud=Groups())
    snap = connector.snapshot(NOW)
    connector.close()
    states = {n.id: (n.state, n.group_id) for n in snap.nodes}
    assert states[N.format(10)] == (NodeState.READY, "sfr-1")
    assert states[N.format(13)] == (NodeState.UNKNOWN, "")  # not one of the pool's instances
    assert states["i-0a1b2c3d4e5f60099"] == (NodeState.ORPHAN, "sfr-1")
    assert snap.node(N.format(10)).launched_at == 1714550000.0
    assert snap.target_capacity == 6


def test_api_errors_name_the_server_and_the_call(api, connector):
    api.serve(
        "/api/v1/pods",
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'pods is forbidden: User "system:serviceaccount:clusterman:collector" '
            'cannot list resource "pods"',
        },
        status=403,
    )
    with pytest.raises(ConnectorError) as e:
        connector.snapshot(NOW)
    assert str(e.value) == (
        f"kubernetes API {api.url}: listing pods: 403 Forbidden: pods is forbidden: User "
        '"system:serviceaccount:clusterman:collector" cannot list resource "pods"'
    )


def test_not_json_and_no_items(api, connector):
    api.serve("/api/v1/nodes", b"<html>proxy error</html>")
    with pytest.raises(ConnectorError, match="listing nodes: the answer is not JSON"):
        connector.snapshot(NOW)
    api.serve("/api/v1/nodes", {"kind": "Status"})
    with pytest.raises(ConnectorError, match="listing nodes: the answer has no items list"):
        connector.snapshot(NOW)


def test_unreachable_api_and_bad_kubeconfig(tmp_path):
    with recorded_api() as gone:
        url = gone.url
    connector = KubernetesConnector(POOL, kubeconfig(tmp_path / "kubeconfig", url), timeout_seconds=2)
    with pytest.raises(ConnectorError, match=f"kubernetes API {url}: listing nodes: cannot reach it"):
        connector.snapshot(NOW)
    missing = KubernetesConnector(POOL, str(tmp_path / "nope"))
    with pytest.raises(ConnectorError, match=r"kubeconfig .*nope"):
        missing.snapshot(NOW)


def test_an_api_server_that_does_not_answer_costs_three_timeouts(tmp_path):
    with silent_api() as silent:
        connector = KubernetesConnector(POOL, kubeconfig(tmp_path / "kubeconfig", silent.url), timeout_seconds=0.5)
        started = time.monotonic()
        with pytest.raises(ConnectorError, match=f"kubernetes API {silent.url}: listing nodes: cannot reach it"):
            connector.snapshot(NOW)
        assert silent.connections == 3  # urllib3 alone makes 4 attempts
        assert time.monotonic() - started < 3 * 0.5 + 1.0

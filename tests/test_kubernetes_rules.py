"""The Kubernetes connector's rules on plain API objects: quantities, effective requests, node
states, which pods are the pool's. The HTTP path is in itests/test_kubernetes_connector.py."""

import logging

import pytest

from clusterman.cluster.connector import ConnectorError
from clusterman.cluster.kubernetes import KubernetesPool
from clusterman.cluster.kubernetes import as_node
from clusterman.cluster.kubernetes import build_view
from clusterman.cluster.kubernetes import node_state
from clusterman.cluster.kubernetes import pod_request
from clusterman.cluster.kubernetes import provider_instance
from clusterman.cluster.kubernetes import resources_from
from clusterman.cluster.kubernetes import targets_pool
from clusterman.core.config import DEFAULT_POD_REQUEST
from clusterman.core.model import NO_TIME
from clusterman.core.model import NodeState
from clusterman.core.resources import Resources

NO_DEFAULT = Resources()
POOL = KubernetesPool("default")


@pytest.mark.parametrize(
    ("amounts", "expected"),
    [
        ({"cpu": "500m"}, Resources(cpus=0.5)),
        ({"cpu": "2"}, Resources(cpus=2)),
        ({"memory": "1Gi"}, Resources(mem=1073.741824)),
        ({"memory": "128974848"}, Resources(mem=128.974848)),
        ({"memory": "129e6"}, Resources(mem=129)),
        ({"memory": "123Mi"}, Resources(mem=128.974848)),
        ({"memory": "15143256Ki"}, Resources(mem=15506.694144)),
        ({"ephemeral-storage": "95551679124"}, Resources(disk=95551.679124)),
        ({"nvidia.com/gpu": "1", "pods": "58", "hugepages-2Mi": "0"}, Resources(gpus=1)),
        ({"amd.com/gpu": "2"}, Resources(gpus=2)),
    ],
)
def test_quantities_in_clusterman_units(amounts, expected):
    decoded = as_node({"status": {"allocatable": amounts}}).status.allocatable  # as API answers are read
    for got in (resources_from(amounts, "here"), resources_from(decoded, "here")):
        assert got.cpus == pytest.approx(expected.cpus)
        assert got.mem == pytest.approx(expected.mem)
        assert got.disk == pytest.approx(expected.disk)
        assert got.gpus == pytest.approx(expected.gpus)


@pytest.mark.parametrize("bad", ["abc", "1Qi", "-1", "NaN", ""])
def test_bad_quantity_names_the_field(bad):
    with pytest.raises(ConnectorError, match=r"node n1: status.allocatable.cpu: .* quantity"):
        resources_from({"cpu": bad}, "node n1: status.allocatable")


def container(cpu=None, memory=None, restart=None, limits=None):
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    c = {"name": "c", "resources": {"requests": requests, **({"limits": limits} if limits else {})}}
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(containers=(), init=(), overhead=None, **extra):
    spec = {"containers": list(containers), "initContainers": list(init), **extra}
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("the_pod", "cpus", "mem"),
    [
        # the sum of the containers
        (pod([container("500m", "512Mi"), container("250m", "128974848")]), 0.75, 536.870912 + 128.974848),
        # an init container bigger than the app decides
        (pod([container("500m", "256Mi")], init=[container("2", "1Gi")]), 2.0, 1073.741824),
        # an init container smaller than the app does not
        (pod([container("3", "2Gi")], init=[container("1", "1Gi")]), 3.0, 2147.483648),
        # a sidecar runs beside the regular init step and beside the app
        (
            pod([container("200m", "129e6")], init=[container("100m", "64Mi", restart="Always"), container("1")]),
            1.1,
            67.108864 + 129,
        ),
        # overhead is added on top
        (pod([container("1", "1G")], overhead={"cpu": "250m", "memory": "120Mi"}), 1.25, 1000 + 125.82912),
        # a limit without a request requests the limit
        (pod([{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1G"}}}]), 2.0, 1000),
    ],
)
def test_effective_request_is_kubernetes_rule(the_pod, cpus, mem):
    request, defaulted = pod_request(the_pod, NO_DEFAULT)
    assert request.cpus == pytest.approx(cpus)
    assert request.mem == pytest.approx(mem)
    assert not defaulted


def test_missing_requests_count_with_the_default_per_resource():
    request, defaulted = pod_request(pod([container()]), DEFAULT_POD_REQUEST)
    assert defaulted and request == DEFAULT_POD_REQUEST
    request, defaulted = pod_request(pod([container(cpu="2")]), DEFAULT_POD_REQUEST)
    assert defaulted and request == Resources(cpus=2, mem=DEFAULT_POD_REQUEST.mem)
    request, defaulted = pod_request(pod([container(cpu="2", memory="1G")]), DEFAULT_POD_REQUEST)
    assert not defaulted and request == Resources(cpus=2, mem=1000)


def node_obj(ready="True", taints=(), unschedulable=False):
    return {
        "metadata": {"name": "n1"},
        "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


SCALE_DOWN = {"key": "clusterman.com/scale-down", "value": "1714640000", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("obj", "state", "tainted_at"),
    [
        (node_obj(), NodeState.READY, NO_TIME),
        (node_obj(taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]), NodeState.READY, NO_TIME),
        (node_obj(taints=[SCALE_DOWN]), NodeState.TAINTED, 1714640000.0),
        (node_obj(taints=[{"key": "atlassian.com/escalator", "value": "1714640300"}]), NodeState.TAINTED, 1714640300.0),
        (
            node_obj(taints=[{"key": "clusterman.yelp.com/terminating", "value": "1714640400.5"}]),
            NodeState.TAINTED,
            1714640400.5,
        ),
        # timeAdded when the value carries no time
        (
            node_obj(taints=[{"key": "clusterman.com/scale-down", "timeAdded": "2024-05-02T09:00:00Z"}]),
            NodeState.TAINTED,
            1714640400.0,
        ),
        # on its way out, Ready or not
        (node_obj(ready="Unknown", taints=[SCALE_DOWN]), NodeState.TAINTED, 1714640000.0),
        (node_obj(ready="Unknown"), NodeState.UNKNOWN, NO_TIME),
        (node_obj(ready="False", unschedulable=True), NodeState.UNKNOWN, NO_TIME),
        (node_obj(unschedulable=True), NodeState.CORDONED, NO_TIME),
        ({"metadata": {"name": "n1"}, "spec": {}, "status": {}}, NodeState.UNKNOWN, NO_TIME),
    ],
)
def test_node_state(obj, state, tainted_at):
    assert node_state(obj, now=1714650000.0) == (state, tainted_at)


def test_a_taint_without_time_counts_from_now(caplog):
    with caplog.at_level(logging.WARNING):
        assert node_state(node_obj(taints=[{"key": "clusterman.com/scale-down"}]), now=42.0) == (
            NodeState.TAINTED,
            42.0,
        )
    assert "n1" in caplog.text and "no time" in caplog.text


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        ("aws:///us-west-2a/i-0abc", ("i-0abc", "us-west-2a")),
        ("aws://us-west-2a/i-0abc", ("i-0abc", "us-west-2a")),
        ("gce://project/us-central1-b/node-1", ("node-1", "")),
        ("", ("", "")),
    ],
)
def test_provider_id(provider_id, expected):
    assert provider_instance(provider_id) == expected


def pending_pod(**spec):
    p = pod([container("1", "1G")], **spec)
    p["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    return p


def affinity(key, operator, values):
    term = {"matchExpressions": [{"key": key, "operator": operator, "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(
    ("the_pod", "ours"),
    [
        (pending_pod(nodeSelector={"clusterman.com/pool": "default"}), True),
        (pending_pod(nodeSelector={"clusterman.com/pool": "gpu"}), False),
        (pending_pod(affinity=affinity("clusterman.com/pool", "In", ["gpu", "default"])), True),
        (pending_pod(affinity=affinity("clusterman.com/pool", "NotIn", ["default"])), False),
        (pending_pod(affinity=affinity("other", "In", ["default"])), False),
        (pending_pod(), False),
    ],
)
def test_which_pending_pods_are_the_pools(the_pod, ours):
    assert targets_pool(the_pod, POOL) is ours


def test_pool_label_on_the_pod_counts_as_clusterman_does():
    the_pod = pending_pod()
    the_pod["metadata"]["labels"] = {"clusterman.com/pool": "default"}
    assert targets_pool(the_pod, POOL)
    assert not targets_pool(the_pod, KubernetesPool("default", pool_label_key="yelp.com/pool"))


def test_custom_node_label_key():
    the_pod = pending_pod(nodeSelector={"yelp.com/pool": "default"})
    assert targets_pool(the_pod, KubernetesPool("default", node_label_key="yelp.com/pool"))
    assert not targets_pool(the_pod, POOL)


def ready_node(name, cpu="4", memory="16G"):
    return {
        "metadata": {"name": name, "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"providerID": f"aws:///us-west-2a/i-{name}"},
        "status": {"allocatable": {"cpu": cpu, "memory": memory}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def on(node, p, owners=(), annotations=None):
    p["spec"]["nodeName"] = node
    p["metadata"]["ownerReferences"] = [{"kind": k, "name": "x"} for k in owners]
    if annotations:
        p["metadata"]["annotations"] = annotations
    return p


def test_daemon_pods_come_out_of_allocatable_and_are_no_demand():
    pods = [
        on("n1", pod([container("500m", "500M")]), owners=["DaemonSet"]),
        on("n1", pod([container("100m")]), annotations={"kubernetes.io/config.mirror": "abc"}),
        on("n1", pod([container("1", "1G")]), owners=["ReplicaSet"]),
    ]
    view = build_view([ready_node("n1")], pods, POOL, now=0)
    (n1,) = view.nodes
    assert n1.allocatable.cpus == pytest.approx(3.4)
    assert n1.allocatable.mem == pytest.approx(15500)
    assert [t.daemon for t in n1.tasks] == [True, True, False]
    assert [t.requests for t in n1.workload()] == [Resources(cpus=1, mem=1000)]


def test_pods_elsewhere_and_finished_pods_are_ignored():
    finished = on("n1", pod([container("3")]))
    finished["status"]["phase"] = "Succeeded"
    view = build_view([ready_node("n1")], [finished, on("other-node", pod([container("1")]))], POOL, now=0)
    assert view.nodes[0].tasks == () and view.pending == ()


def test_pods_without_requests_warn_once_per_snapshot(caplog):
    pods = [on("n1", pod([container()]), owners=["ReplicaSet"]) for _ in range(7)]
    with caplog.at_level(logging.WARNING):
        view = build_view([ready_node("n1")], pods, POOL, now=0)
    assert all(t.requests == DEFAULT_POD_REQUEST for t in view.nodes[0].tasks)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "7 pod(s)" in warnings[0].getMessage() and "cpus=0.1" in warnings[0].getMessage()


def test_a_node_without_a_name_is_an_error():
    with pytest.raises(ConnectorError, match=r"no metadata\.name"):
        build_view([{"metadata": {}}], [], POOL, now=0)


def moved(annotations=None, owners=(), volumes=()):
    """The Task a pod with these annotations, owner references and volumes becomes."""
    from clusterman.cluster.kubernetes import as_pod
    from clusterman.cluster.kubernetes import task_from

    body = pod([container("1")], volumes=list(volumes))
    body["metadata"] |= {"annotations": annotations or {}, "ownerReferences": list(owners)}
    keys = ("cluster-autoscaler.kubernetes.io/safe-to-evict", "clusterman.com/safe_to_evict")
    return task_from(as_pod(body), Resources(cpus=1), KubernetesPool("web", safe_to_evict_keys=keys), set())


REPLICASET = {"kind": "ReplicaSet", "name": "web-1", "controller": True}


@pytest.mark.parametrize(
    ("annotations", "owners", "volumes", "flags"),
    [
        ({}, [REPLICASET], [], (True, False, True, False)),
        ({}, [], [], (True, False, False, False)),  # a bare pod: no controller makes a new one
        ({}, [{"kind": "ConfigMap", "name": "x"}], [], (True, False, False, False)),  # owned, not controlled
        ({"karpenter.sh/do-not-disrupt": "true"}, [REPLICASET], [], (True, True, True, False)),
        ({"karpenter.sh/do-not-disrupt": "false"}, [REPLICASET], [], (True, False, True, False)),
        ({"clusterman.com/safe_to_evict": "false"}, [REPLICASET], [], (False, False, True, False)),
        ({}, [REPLICASET], [{"name": "d", "emptyDir": {}}], (True, False, True, True)),
        ({}, [REPLICASET], [{"name": "d", "emptyDir": {"medium": "Memory"}}], (True, False, True, False)),
        ({}, [REPLICASET], [{"name": "h", "hostPath": {"path": "/var"}}], (True, False, True, True)),
        # cluster-autoscaler's "true": movable without a controller and with local storage
        ({"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}, [], [{"name": "d", "emptyDir": {}}],
         (True, False, True, False)),
    ],
)  # fmt: skip
def test_which_pods_consolidation_may_move(annotations, owners, volumes, flags):
    t = moved(annotations, owners, volumes)
    assert (t.safe_to_evict, t.do_not_disrupt, t.controller, t.local_storage) == flags

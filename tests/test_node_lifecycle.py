"""Node lifecycle: taint lists, the Mesos schedule, per-node results, the simulated adapter, the factory."""

import copy

import pytest

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cluster.kubernetes import SCALE_DOWN_TAINT_KEY
from clusterman.cluster.kubernetes_lifecycle import KubernetesLifecycle
from clusterman.cluster.kubernetes_lifecycle import blocking_pods
from clusterman.cluster.kubernetes_lifecycle import is_pinned
from clusterman.cluster.kubernetes_lifecycle import with_scale_down_taint
from clusterman.cluster.kubernetes_lifecycle import without_scale_down_taints
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.lifecycle import WithoutDraining
from clusterman.cluster.lifecycle import unique
from clusterman.cluster.mesos import OUR_WINDOW_SIGNATURE_NANOS
from clusterman.cluster.mesos_lifecycle import NANOS
from clusterman.cluster.mesos_lifecycle import Machine
from clusterman.cluster.mesos_lifecycle import MesosLifecycle
from clusterman.cluster.mesos_lifecycle import active_tasks
from clusterman.cluster.mesos_lifecycle import down_machines
from clusterman.cluster.mesos_lifecycle import scheduled
from clusterman.cluster.mesos_lifecycle import with_machines
from clusterman.cluster.mesos_lifecycle import without_machines
from clusterman.cluster.simulated_lifecycle import SimulatedLifecycle
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.cluster.simulated_scheduler import TaskList
from clusterman.cluster.simulated_scheduler import WorkItem
from clusterman.core.config import ClusterConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import ScalingLimits
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.model import NodeState
from clusterman.core.resources import Resources
from clusterman.run.budget import scheduler_timeout
from clusterman.wiring.schedulers import connector_for_pool
from clusterman.wiring.schedulers import lifecycle_for_pool

CORDON = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2024-05-02T07:00:00Z"}
OURS = {"key": SCALE_DOWN_TAINT_KEY, "value": "1714640000", "effect": "NoSchedule"}
ESCALATOR = {"key": "atlassian.com/escalator", "value": "1714640300", "effect": "NoSchedule"}

# --- Kubernetes taint lists ---


def test_tainting_adds_ours_after_the_others_with_whole_seconds():
    assert with_scale_down_taint([CORDON], 1714650000.9) == [
        CORDON,
        {"key": SCALE_DOWN_TAINT_KEY, "value": "1714650000", "effect": "NoSchedule"},
    ]
    assert with_scale_down_taint([], 5.0) == [{"key": SCALE_DOWN_TAINT_KEY, "value": "5", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    "marked", [OURS, ESCALATOR, {"key": "clusterman.yelp.com/terminating", "effect": "NoSchedule"}]
)
def test_a_node_already_marked_keeps_its_taint_and_time(marked):
    assert with_scale_down_taint([CORDON, marked], 1714650000.0) is None


def test_untainting_removes_every_scale_down_key_and_nothing_else():
    assert without_scale_down_taints([CORDON, OURS, ESCALATOR]) == [CORDON]
    assert without_scale_down_taints([CORDON]) is None
    assert without_scale_down_taints([]) is None


def test_daemonset_and_mirror_pods_do_not_block_a_drain():
    app = {"metadata": {"name": "web", "ownerReferences": [{"kind": "ReplicaSet"}]}}
    daemon = {"metadata": {"name": "agent", "ownerReferences": [{"kind": "DaemonSet"}]}}
    mirror = {"metadata": {"name": "proxy", "annotations": {"kubernetes.io/config.mirror": "x"}}}
    bare = {"metadata": {"name": "bare"}}
    assert blocking_pods([app, daemon, mirror, bare]) == [app, bare]


def test_a_pod_is_pinned_by_any_of_the_keys_saying_false():
    keys = ("cluster-autoscaler.kubernetes.io/safe-to-evict", "clusterman.com/safe_to_evict")
    pod = {"metadata": {"annotations": {"clusterman.com/safe_to_evict": " False "}}}
    assert is_pinned(pod, keys)
    assert not is_pinned({"metadata": {"annotations": {"clusterman.com/safe_to_evict": "true"}}}, keys)
    assert not is_pinned(pod, keys[:1])
    assert not is_pinned({}, keys)
    # Karpenter's do-not-disrupt pins a pod whatever the safe-to-evict keys say
    assert is_pinned({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}, keys)
    assert not is_pinned({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "false"}}}, keys)


# --- the Mesos schedule ---

A = Machine("ip-10-0-1-10.us-west-2.compute.internal", "10.0.1.10")
B = Machine("ip-10-0-1-13.us-west-2.compute.internal", "10.0.1.13")
OPERATOR = {
    "machine_ids": [{"hostname": "other", "ip": "10.0.9.9"}, {"ip": "10.0.9.10"}],
    "unavailability": {"start": {"nanoseconds": 1000 * NANOS}, "duration": {"nanoseconds": 60 * NANOS}},
}


def test_scheduling_adds_one_window_and_keeps_the_others():
    schedule = {"windows": [OPERATOR]}
    before = copy.deepcopy(schedule)
    new = with_machines(schedule, [A, B, A], 2000.5, 600)
    assert schedule == before  # not changed in place
    assert new["windows"][0] == OPERATOR
    assert new["windows"][1] == {
        "machine_ids": [{"hostname": A.hostname, "ip": A.ip}, {"hostname": B.hostname, "ip": B.ip}],
        "unavailability": {
            "start": {"nanoseconds": 2000500000000},
            "duration": {"nanoseconds": 600 * NANOS + OUR_WINDOW_SIGNATURE_NANOS},
        },
    }
    assert scheduled(new) == {("other", "10.0.9.9"): 1000.0, ("", "10.0.9.10"): 1000.0, A.key: 2000.5, B.key: 2000.5}


def test_a_scheduled_machine_keeps_its_window_whatever_the_hostnames_case():
    schedule = with_machines({}, [A], 1000.0, 600)
    upper = Machine(A.hostname.upper(), A.ip)
    assert with_machines(schedule, [upper], 2000.0, 600) == schedule
    assert scheduled(schedule)[upper.key] == 1000.0


def test_unscheduling_removes_machines_and_windows_left_empty():
    schedule = with_machines({"windows": [OPERATOR]}, [A, B], 2000.0, 600)
    assert without_machines(schedule, [Machine(A.hostname.upper(), A.ip)])["windows"][1]["machine_ids"] == [
        {"hostname": B.hostname, "ip": B.ip}
    ]
    assert without_machines(schedule, [A, B]) == {"windows": [OPERATOR]}
    assert without_machines(schedule, [Machine("", "10.0.9.10")])["windows"][0]["machine_ids"] == [
        {"hostname": "other", "ip": "10.0.9.9"}
    ]
    assert without_machines({}, [A]) == {"windows": []}  # posting this cancels nothing else: there is nothing


def test_down_machines_from_the_status():
    status = {"draining_machines": [{"id": {"hostname": "x", "ip": "1.2.3.4"}}], "down_machines": [A.json()]}
    assert down_machines(status) == {A.key}
    assert down_machines({}) == set()


def task(agent, state="TASK_RUNNING", key="slave_id"):
    return {"id": f"t-{agent}-{state}", "state": state, key: agent}


def test_active_tasks_count_per_agent_in_the_states_a_drain_waits_for():
    body = {
        "frameworks": [
            {"name": "marathon", "tasks": [task("S0"), task("S0", "TASK_STAGING"), task("S1", "TASK_KILLING")]},
            {"name": "chronos", "tasks": [task("S0", "TASK_STARTING"), task("S1", "TASK_FINISHED")]},
            {"name": "spark", "tasks": [task("S2", key="agent_id"), task("S1", "TASK_LOST")]},
            {"name": "idle"},  # a framework with no task list at all
            {"name": "none", "tasks": None},
        ]
    }
    counts = active_tasks(body)
    assert (counts["S0"], counts["S1"], counts["S2"], counts["S9"]) == (3, 1, 1, 0)  # S9: not registered
    assert active_tasks({"frameworks": []}) == {}


@pytest.mark.parametrize(
    "body, problem",
    [
        ({}, "no 'frameworks' list"),  # read as "no tasks", it would let a busy agent go
        ({"frameworks": {"marathon": []}}, "no 'frameworks' list"),
        ({"frameworks": ["marathon"]}, "a framework that is not an object"),
        ({"frameworks": [{"tasks": {"t": task("S0")}}]}, "'tasks' is not a list"),
        ({"frameworks": [{"tasks": ["t"]}]}, "a task that is not an object"),
    ],
)
def test_active_tasks_refuse_an_answer_of_another_shape(body, problem):
    with pytest.raises(ValueError, match=problem):
        active_tasks(body)


# --- per-node results and the simulated adapter ---


def simulated(n_nodes=2, n_tasks=3, dry_run=False):
    market = SimulatedMarket("m5.xlarge", "us-west-2a", 1.0, Resources(cpus=4, mem=16000))
    cloud = GroupsCloudView([SimulatedGroup("g1", [market], lambda: 0.0, target_capacity=n_nodes)])
    work = TaskList(WorkItem(f"t{i}", Resources(cpus=1)) for i in range(n_tasks))
    connector = SimulatedConnector(cloud, SimulatedScheduler(work))
    nodes = [n.id for n in connector.snapshot(0.0).nodes]
    return connector, SimulatedLifecycle(connector.scheduler, dry_run=dry_run), nodes


def test_unique_keeps_order_and_takes_a_string_as_one_id():
    assert unique(["b", "a", "b"]) == ["b", "a"]
    assert unique("i-0abc") == ["i-0abc"]


def test_one_nodes_exception_is_its_own_failure():
    _, life, (first, second) = simulated()

    def act(node_id):
        if node_id == first:
            raise KeyError("spec")
        return life.result(node_id, Outcome.CHANGED, "fine")

    results = life.each([first, second], act, "taint")
    assert (results[first].outcome, results[first].detail) == (Outcome.FAILED, "taint: KeyError: 'spec'")
    assert results[second].outcome is Outcome.CHANGED
    assert (results[first].ok, results[second].ok) == (False, True)


def test_simulated_taint_drain_untaint():
    connector, life, (first, second) = simulated()
    results = life.taint([first, "nope", first], 5.0)
    assert {n: r.outcome for n, r in results.items()} == {first: Outcome.CHANGED, "nope": Outcome.FAILED}
    assert life.taint([first], 9.0)[first].outcome is Outcome.UNCHANGED
    assert connector.scheduler.node(first).tainted_at == 5.0

    assert life.drain(second, 6.0).status is DrainStatus.FAILED  # not tainted
    drained = life.drain(first, 6.0)
    assert (drained.status, drained.evicted, drained.remaining) == (DrainStatus.DONE, 3, 0)
    snap = connector.snapshot(10.0)
    assert len(snap.node(second).tasks) == 3 and snap.node(first).tasks == ()
    assert life.drain("gone", 6.0).status is DrainStatus.DONE

    assert life.untaint([first, second]) == {
        first: life.result(first, Outcome.CHANGED, "untainted"),
        second: life.result(second, Outcome.UNCHANGED, "not tainted"),
    }
    assert connector.snapshot(20.0).node(first).state is NodeState.READY
    assert life.before_terminate([first], 30.0)[first].outcome is Outcome.UNCHANGED


def test_simulated_dry_run_changes_nothing():
    connector, life, (first, _) = simulated(dry_run=True)
    assert life.taint([first], 5.0)[first].detail == "dry run: would have tainted at 5"
    assert connector.scheduler.node(first).state is NodeState.READY
    connector.scheduler.taint([first], 5.0)
    drained = life.drain(first, 6.0)
    assert (drained.status, drained.evicted, drained.remaining, drained.dry_run) == (DrainStatus.NOT_NOW, 3, 3, True)
    assert len(connector.scheduler.node(first).tasks) == 3
    assert life.untaint([first])[first].outcome is Outcome.CHANGED
    assert connector.scheduler.node(first).state is NodeState.TAINTED


def test_without_draining_terminates_at_once_and_delegates_the_rest():
    connector, inner, (first, _) = simulated()
    life = WithoutDraining(inner)
    assert life.taint([first], 5.0)[first].outcome is Outcome.CHANGED
    drained = life.drain(first, 6.0)
    assert (drained.status, drained.detail) == (DrainStatus.DONE, "draining is disabled for this pool")
    assert len(connector.scheduler.node(first).tasks) == 3  # nothing was evicted
    assert life.untaint([first])[first].outcome is Outcome.CHANGED


# --- the factory ---

LIMITS = ScalingLimits(min_capacity=1, max_capacity=10, max_weight_to_add=5, max_weight_to_remove=5)
MAIN = MainConfig(clusters={"c1": ClusterConfig(kubeconfig_path="/etc/kube.conf", mesos_master_fqdn="master.c1")})


def test_factory_builds_each_scheduler_and_honours_draining_enabled():
    draining = PoolConfig(scaling_limits=LIMITS, draining_enabled=True)
    kube = lifecycle_for_pool(MAIN, PoolIdentity("c1", "web", Scheduler.KUBERNETES), draining, dry_run=True)
    assert isinstance(kube, KubernetesLifecycle) and kube.dry_run and kube.kubeconfig_path == "/etc/kube.conf"
    assert kube.safe_to_evict_keys == ("cluster-autoscaler.kubernetes.io/safe-to-evict", "clusterman.com/safe_to_evict")
    mesos = lifecycle_for_pool(MAIN, PoolIdentity("c1", "web", Scheduler.MESOS), draining)
    assert isinstance(mesos, MesosLifecycle) and mesos.url == "http://master.c1:5050" and not mesos.dry_run

    plain = PoolConfig(scaling_limits=LIMITS)  # draining_enabled defaults to false, as in Clusterman
    wrapped = lifecycle_for_pool(MAIN, PoolIdentity("c1", "web", Scheduler.KUBERNETES), plain, dry_run=True)
    assert isinstance(wrapped, WithoutDraining) and isinstance(wrapped.inner, KubernetesLifecycle) and wrapped.dry_run

    connector, _, _ = simulated()
    sim = lifecycle_for_pool(MAIN, PoolIdentity("c1", "sim", Scheduler.SIMULATED), draining, connector=connector)
    assert isinstance(sim, SimulatedLifecycle) and sim.scheduler is connector.scheduler


def test_scheduler_api_calls_are_bounded_by_the_runs_budget():
    # each attempt a third of the budget (a Kubernetes call makes 3 at most), never above 30 s
    assert scheduler_timeout(None) == 30.0
    assert scheduler_timeout(60.0) == 20.0
    assert scheduler_timeout(3.0) == 1.0
    assert scheduler_timeout(600.0) == 30.0
    pool = PoolConfig(scaling_limits=LIMITS, draining_enabled=True)
    for scheduler in (Scheduler.KUBERNETES, Scheduler.MESOS):
        identity = PoolIdentity("c1", "web", scheduler)
        assert lifecycle_for_pool(MAIN, identity, pool, timeout_seconds=4.0).timeout_seconds == 4.0
        assert connector_for_pool(MAIN, identity, pool, timeout_seconds=4.0).timeout_seconds == 4.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", [lifecycle_for_pool, connector_for_pool])
def test_factory_errors_name_what_is_missing(factory):
    """The connector and the lifecycle of one pool read the scheduler's settings alike."""
    pool = PoolConfig(scaling_limits=LIMITS)
    with pytest.raises(ConfigError, match="mesos_master_fqdn"):
        factory(MainConfig(clusters={"c2": ClusterConfig()}), PoolIdentity("c2", "web", Scheduler.MESOS), pool)
    for scheduler in (Scheduler.MESOS, Scheduler.KUBERNETES):
        with pytest.raises(ConfigError, match=r"unknown cluster \(known: c1"):
            factory(MAIN, PoolIdentity("c9", "web", scheduler), pool)


def test_lifecycle_for_pool_needs_the_simulated_connector():
    pool = PoolConfig(scaling_limits=LIMITS)
    with pytest.raises(ValueError, match="pass the pool's SimulatedConnector"):
        lifecycle_for_pool(MAIN, PoolIdentity("c1", "sim", Scheduler.SIMULATED), pool)


def test_pods_that_took_longest_to_start_are_evicted_first():
    from clusterman.cluster.kubernetes_lifecycle import eviction_order
    from clusterman.cluster.kubernetes_lifecycle import start_seconds

    def pod(name: str, took: float | None, cpu: str = "1") -> dict:
        status: dict = {"startTime": "2026-12-06T10:00:00Z"}
        if took is not None:
            ready = f"2026-12-06T10:{int(took) // 60:02d}:{int(took) % 60:02d}Z"
            status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]
        containers = [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
        return {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": containers},
            "status": status,
        }

    pods = [pod("web", 5), pod("db", 95), pod("cache", 40), pod("new", None, cpu="4"), pod("tiny", None, cpu="100m")]
    assert [start_seconds(p) for p in pods] == [5, 95, 40, 0, 0]
    assert [p["metadata"]["name"] for p in eviction_order(pods)] == ["db", "cache", "web", "new", "tiny"]

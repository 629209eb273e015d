"""The simulated pool: groups, join delays, first-fit placement, taints, terminations, demand traces."""

import math

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.cluster.accounting import account_nodes
from clusterman.cluster.cloud_view import CloudInstance
from clusterman.cluster.cloud_view import CloudView
from clusterman.cluster.model import NodeState
from clusterman.cluster.model import ResourceGroup
from clusterman.cluster.simulated import DemandTrace
from clusterman.cluster.simulated import SimulatedCloud
from clusterman.cluster.simulated import SimulatedConnector
from clusterman.cluster.simulated import SimulatedGroupSpec
from clusterman.cluster.simulated import SimulatedScheduler
from clusterman.cluster.simulated import TaskList
from clusterman.cluster.simulated import WorkItem
from clusterman.resources import Resources

CPU4 = Resources(cpus=4, mem=16000)


def group(group_id="g1", weight=1.0, **kw):
    return SimulatedGroupSpec(group_id, CPU4 * weight, weight=weight, **kw)


def pool(target=2, workload=None, delay=60.0, **kw):
    cloud = SimulatedCloud([group()], {"g1": target})
    return cloud, SimulatedConnector(cloud, SimulatedScheduler(workload, join_delay_seconds=delay, **kw))


def tasks(n, cpus=1.0, start=0.0, end=math.inf, prefix="t"):
    return [WorkItem(f"{prefix}{i:03d}", Resources(cpus=cpus), start=start, end=end) for i in range(n)]


def placement(snapshot):
    return {t.id: n.id for n in snapshot.nodes for t in n.tasks}


# --- the cloud ---


def test_targets_launch_at_first_look_and_on_raise_only():
    cloud = SimulatedCloud([group(weight=2)], {"g1": 5})
    view = cloud.cloud_view(1000.0)
    assert [(i.launched_at, i.weight) for i in view.instances] == [(1000.0, 2.0)] * 3  # 6 >= 5: a fleet overshoots
    assert view.groups[0].fulfilled_capacity == 6 and view.groups[0].target_capacity == 5
    assert view.groups[0].node_resources == CPU4  # per weight unit
    assert cloud.cloud_view(1060.0) is view  # nothing changed: the same value
    cloud.set_target("g1", 2, 1100.0)
    assert len(cloud.cloud_view(1100.0).instances) == 3  # lowering kills nothing
    cloud.set_target("g1", 8, 1200.0)
    assert [i.launched_at for i in cloud.cloud_view(1200.0).instances][-1] == 1200.0


def test_terminate_lowers_the_target_unless_replacing():
    cloud = SimulatedCloud([group()], {"g1": 3})
    first, second, _ = (i.instance_id for i in cloud.cloud_view(0).instances)
    cloud.terminate([first], 10.0)
    view = cloud.cloud_view(10.0)
    assert view.groups[0].target_capacity == 2 and len(view.instances) == 2
    cloud.terminate([second], 20.0, replace=True)
    view = cloud.cloud_view(20.0)
    assert view.groups[0].target_capacity == 2 and len(view.instances) == 2
    assert view.instances[-1].launched_at == 20.0
    with pytest.raises(ValueError, match="no instance 'i-nope'"):
        cloud.terminate(["i-nope"], 30.0)


def test_targets_are_clamped_and_groups_checked():
    cloud = SimulatedCloud([group(min_capacity=1, max_capacity=4)])
    assert cloud.set_target("g1", 10, 0) == 4
    assert cloud.set_target("g1", 0, 0) == 1
    with pytest.raises(ValueError, match="no group 'g9'"):
        cloud.set_target("g9", 1, 0)
    cloud.mark_stale("g1")
    assert cloud.cloud_view(0).groups[0].stale


# --- joining ---


def test_instances_are_orphans_until_they_join():
    _, connector = pool(target=2, delay=60.0)
    snap = connector.snapshot(1000.0)
    assert [n.state for n in snap.nodes] == [NodeState.ORPHAN] * 2
    assert all(n.allocatable == Resources() and n.group_id == "g1" for n in snap.nodes)
    snap = connector.snapshot(1059.0)
    assert snap.counts_by_state[NodeState.ORPHAN] == 2
    snap = connector.snapshot(1060.0)
    assert [n.state for n in snap.nodes] == [NodeState.READY] * 2
    assert all(n.allocatable == CPU4 and n.launched_at == 1000.0 for n in snap.nodes)
    assert snap.target_capacity == 2 and snap.fulfilled_capacity == 2


def join_times(seed):
    _, connector = pool(target=20, delay=120.0, join_delay_stdev_seconds=30.0, seed=seed)
    joined = {}
    for t in range(0, 400, 5):
        for n in connector.snapshot(float(t)).nodes:
            if n.state is NodeState.READY:
                joined.setdefault(n.id, t)
    return joined


def test_join_delays_are_random_but_repeatable():
    assert join_times(seed=1) == join_times(seed=1)
    assert join_times(seed=1) != join_times(seed=2)
    assert len(set(join_times(seed=1).values())) > 3


def test_time_never_goes_back():
    _, connector = pool()
    connector.snapshot(100.0)
    with pytest.raises(ValueError, match="backwards"):
        connector.snapshot(99.0)


# --- placement ---


def test_first_fit_and_pending_until_capacity_joins():
    cloud, connector = pool(target=2, delay=0.0, workload=TaskList(tasks(10)))
    snap = connector.snapshot(0.0)
    first, second = (n.id for n in snap.nodes)
    assert [len(n.tasks) for n in snap.nodes] == [4, 4]
    assert [t.id for t in snap.pending] == ["t008", "t009"]
    assert placement(snap)["t000"] == first and placement(snap)["t004"] == second
    cloud.set_target("g1", 3, 60.0)
    snap = connector.snapshot(60.0)
    assert snap.pending == () and [len(n.tasks) for n in snap.nodes] == [4, 4, 2]
    assert account_nodes(snap.nodes).allocated == Resources(cpus=10)


def test_departures_make_room_for_waiting_work():
    work = TaskList([*tasks(4, cpus=1.0, end=100.0), WorkItem("big", Resources(cpus=3), start=50.0)])
    _, connector = pool(target=1, delay=0.0, workload=work)
    assert [t.id for t in connector.snapshot(50.0).pending] == ["big"]
    snap = connector.snapshot(100.0)
    assert snap.pending == () and [t.id for t in snap.nodes[0].tasks] == ["big"]


def test_tainted_nodes_take_no_new_work_until_untainted():
    _, connector = pool(target=2, delay=0.0, workload=TaskList(tasks(2, start=10.0)))
    first, second = (n.id for n in connector.snapshot(0.0).nodes)
    connector.scheduler.taint([first], 5.0)
    snap = connector.snapshot(10.0)
    assert set(placement(snap).values()) == {second}
    assert snap.node(first).state is NodeState.TAINTED and snap.node(first).tainted_at == 5.0
    connector.scheduler.untaint([first])
    assert connector.snapshot(20.0).node(first).state is NodeState.READY
    with pytest.raises(ValueError, match="no joined node 'nope'"):
        connector.scheduler.taint(["nope"], 30.0)


def test_untainting_reopens_a_node_for_work_that_waited():
    _, connector = pool(target=1, delay=0.0, workload=TaskList(tasks(1, start=10.0)))
    (only,) = (n.id for n in connector.snapshot(0.0).nodes)
    connector.scheduler.taint([only], 1.0)
    assert len(connector.snapshot(10.0).pending) == 1
    connector.scheduler.untaint([only])
    assert connector.snapshot(11.0).pending == ()


def test_a_terminated_nodes_tasks_wait_and_move():
    cloud, connector = pool(target=2, delay=0.0, workload=TaskList(tasks(6)))
    first, second = (n.id for n in connector.snapshot(0.0).nodes)
    cloud.terminate([first], 10.0)
    snap = connector.snapshot(10.0)
    assert [n.id for n in snap.nodes] == [second]
    assert len(snap.nodes[0].tasks) == 4 and len(snap.pending) == 2
    cloud.set_target("g1", 2, 20.0)
    snap = connector.snapshot(20.0)
    assert snap.pending == () and sum(len(n.tasks) for n in snap.nodes) == 6


def test_nothing_changed_means_the_same_values():
    _, connector = pool(target=3, delay=0.0, workload=TaskList(tasks(5)))
    a, b = connector.snapshot(0.0), connector.snapshot(60.0)
    assert a.nodes is b.nodes and a.pending is b.pending


def test_demand_trace_runs_as_identical_tasks_newest_leave_first():
    size = Resources(cpus=1, mem=1000)
    trace = DemandTrace([(0.0, Resources(cpus=2.5)), (60.0, Resources(cpus=1, mem=5000)), (120.0, Resources())], size)
    assert trace.tasks_for(Resources(cpus=2.5)) == 3
    _, connector = pool(target=2, delay=0.0, workload=trace)
    assert sorted(placement(connector.snapshot(0.0))) == ["demand-0000001", "demand-0000002", "demand-0000003"]
    snap = connector.snapshot(60.0)  # mem decides now: 5 tasks
    assert sorted(placement(snap)) == [f"demand-000000{i}" for i in range(1, 6)]
    assert connector.snapshot(120.0).pending == () and placement(connector.snapshot(120.0)) == {}
    with pytest.raises(ValueError, match="task_size"):
        DemandTrace([], Resources())


def test_an_external_cloud_view_works_too():
    """The local stack's cloud is a real adapter (moto's Auto Scaling groups): any CloudViewSource."""

    class Fixed:
        def cloud_view(self, now):
            g = ResourceGroup("asg-1", 1, 1, kind="asg", node_resources=CPU4)
            return CloudView((g,), (CloudInstance("i-0abc", "asg-1", 1.0, 500.0, "m5.xlarge", "us-west-2a"),))

    connector = SimulatedConnector(Fixed(), SimulatedScheduler(join_delay_seconds=30.0))
    assert connector.snapshot(520.0).nodes[0].state is NodeState.ORPHAN  # joins 30 s after launch
    assert connector.snapshot(530.0).nodes[0].state is NodeState.READY


# --- first fit, checked against a plain reference implementation ---

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
        st.tuples(st.just("leave"), st.integers(0, 40)),
        st.tuples(st.just("taint"), st.integers(0, 4)),
        st.tuples(st.just("untaint"), st.integers(0, 4)),
        st.tuples(st.just("target"), st.integers(0, 5)),
    ),
    max_size=40,
)


class Scripted:
    """A workload driven by the test, one step at a time."""

    def __init__(self):
        self.arrivals, self.departures = [], []

    def changes(self, now):
        out = (self.arrivals, self.departures)
        self.arrivals, self.departures = [], []
        return out


def reference_first_fit(order, states, capacity, placed, pending, sizes):
    """Oldest pending first; each to the first ready node in join order with room."""
    free = {n: capacity - sum(sizes[t] for t, m in placed.items() if m == n) for n in order}
    for t in list(pending):
        for n in order:
            if states[n] is NodeState.READY and free[n] >= sizes[t] - 1e-9:
                placed[t] = n
                free[n] -= sizes[t]
                pending.remove(t)
                break


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_placement_is_plain_first_fit(ops):
    work = Scripted()
    cloud, connector = pool(target=2, delay=0.0, workload=work)
    sizes, placed, pending, made = {}, {}, [], 0
    now = 0.0
    snap = connector.snapshot(now)
    for op, arg in ops:
        now += 1.0
        joined = [n.id for n in snap.nodes if n.state is not NodeState.ORPHAN]
        if op == "arrive":
            made += 1
            item = WorkItem(f"w{made:03d}", Resources(cpus=arg))
            work.arrivals.append(item)
            sizes[item.id] = arg
            pending.append(item.id)
        elif op == "leave" and sizes:
            victim = sorted(sizes)[arg % len(sizes)]
            work.departures.append(victim)
            del sizes[victim]
            placed.pop(victim, None)
            if victim in pending:
                pending.remove(victim)
        elif op in ("taint", "untaint") and joined:
            node = joined[arg % len(joined)]
            if op == "taint":
                connector.scheduler.taint([node], now)
            else:
                connector.scheduler.untaint([node])
        elif op == "target":
            cloud.set_target("g1", max(arg, len(cloud.cloud_view(now).instances)), now)
        snap = connector.snapshot(now)
        states = {n.id: n.state for n in snap.nodes}
        order = [n.id for n in snap.nodes if n.state is not NodeState.ORPHAN]
        reference_first_fit(order, states, 4.0, placed, pending, sizes)
        assert placement(snap) == placed
        assert [t.id for t in snap.pending] == pending


def test_evict_moves_a_tainted_nodes_tasks_to_the_other_nodes():
    _, connector = pool(target=2, delay=0.0, workload=TaskList(tasks(3)))
    snap = connector.snapshot(0.0)
    first, second = (n.id for n in snap.nodes)
    assert len(snap.node(first).tasks) == 3
    with pytest.raises(ValueError, match="is not tainted"):
        connector.scheduler.evict(first)
    connector.scheduler.taint([first], 5.0)
    assert connector.scheduler.evict(first) == 3
    assert connector.scheduler.node(first).tasks == ()  # at once, before the next step
    assert len(connector.scheduler.pending()) == 3
    snap = connector.snapshot(10.0)  # placed again, never on the tainted node
    assert set(placement(snap).values()) == {second} and snap.pending == ()
    assert connector.scheduler.evict(first) == 0
    with pytest.raises(ValueError, match="no joined node 'nope'"):
        connector.scheduler.evict("nope")


def test_node_is_the_current_value_of_one_node():
    _, connector = pool(target=1, delay=60.0)
    (orphan_node,) = connector.snapshot(0.0).nodes
    assert connector.scheduler.node(orphan_node.id).state is NodeState.ORPHAN
    assert connector.scheduler.node("nope") is None
    connector.snapshot(60.0)
    connector.scheduler.taint([orphan_node.id], 70.0)
    node = connector.scheduler.node(orphan_node.id)
    assert (node.state, node.tainted_at) == (NodeState.TAINTED, 70.0)
    assert connector.scheduler.nodes() == (node,)  # the full list agrees

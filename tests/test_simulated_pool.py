"""The simulated pool: join delays, first-fit placement, taints, terminations, demand traces.

The cloud is ``SimulatedGroup``s (tests/test_simulated_group.py) read through ``GroupsCloudView``.
"""

import math

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.cloud.groups_view import GroupsCloudView
from clusterman.cloud.simulated_group import SimulatedGroup
from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.cluster.simulated_scheduler import DemandTrace
from clusterman.cluster.simulated_scheduler import LiveSimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedConnector
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.cluster.simulated_scheduler import TaskList
from clusterman.cluster.simulated_scheduler import WorkItem
from clusterman.core.accounting import account_nodes
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudView
from clusterman.core.model import NodeState
from clusterman.core.model import ResourceGroup
from clusterman.core.resources import Resources

CPU4 = Resources(cpus=4, mem=16000)


class Pool:
    """One simulated group under a simulated scheduler; ``snapshot(t)`` moves the clock to t first."""

    def __init__(self, target=2, workload=None, delay=60.0, start=0.0, **kw):
        self.now = start
        market = SimulatedMarket("m5.xlarge", "us-west-2a", 1.0, CPU4)
        self.group = SimulatedGroup("g1", [market], lambda: self.now, target_capacity=target)
        self.cloud = GroupsCloudView([self.group])
        self.scheduler = SimulatedScheduler(workload, join_delay_seconds=delay, **kw)
        self.connector = SimulatedConnector(self.cloud, self.scheduler)

    def at(self, now):
        self.now = now
        return self.group

    def snapshot(self, now):
        self.now = now
        return self.connector.snapshot(now)


def tasks(n, cpus=1.0, start=0.0, end=math.inf, prefix="t"):
    return [WorkItem(f"{prefix}{i:03d}", Resources(cpus=cpus), start=start, end=end) for i in range(n)]


def placement(snapshot):
    return {t.id: n.id for n in snapshot.nodes for t in n.tasks}


# --- joining ---


def test_instances_are_orphans_until_they_join():
    pool = Pool(target=2, delay=60.0, start=1000.0)
    snap = pool.snapshot(1000.0)
    assert [n.state for n in snap.nodes] == [NodeState.ORPHAN] * 2
    assert all(n.allocatable == Resources() and n.group_id == "g1" for n in snap.nodes)
    snap = pool.snapshot(1059.0)
    assert snap.counts_by_state[NodeState.ORPHAN] == 2
    snap = pool.snapshot(1060.0)
    assert [n.state for n in snap.nodes] == [NodeState.READY] * 2
    assert all(n.allocatable == CPU4 and n.launched_at == 1000.0 for n in snap.nodes)
    assert snap.target_capacity == 2 and snap.fulfilled_capacity == 2


def test_initial_nodes_may_have_joined_already_and_later_ones_wait():
    pool = Pool(target=2, delay=60.0, start=1000.0, initial_nodes_joined=True)
    assert [n.state for n in pool.snapshot(1000.0).nodes] == [NodeState.READY] * 2
    pool.at(1010.0).set_target_capacity(3)
    assert [n.state for n in pool.snapshot(1010.0).nodes][-1] is NodeState.ORPHAN
    assert [n.state for n in pool.snapshot(1070.0).nodes][-1] is NodeState.READY


def test_nothing_changed_means_the_same_cloud_view():
    pool = Pool(target=2)
    first = pool.cloud.cloud_view(0.0)
    assert pool.cloud.cloud_view(60.0) is first
    pool.at(70.0).set_target_capacity(3)
    assert pool.cloud.cloud_view(70.0) is not first


def join_times(seed):
    pool = Pool(target=20, delay=120.0, join_delay_stdev_seconds=30.0, seed=seed)
    joined = {}
    for t in range(0, 400, 5):
        for n in pool.snapshot(float(t)).nodes:
            if n.state is NodeState.READY:
                joined.setdefault(n.id, t)
    return joined


def test_join_delays_are_random_but_repeatable():
    assert join_times(seed=1) == join_times(seed=1)
    assert join_times(seed=1) != join_times(seed=2)
    assert len(set(join_times(seed=1).values())) > 3


def test_time_never_goes_back():
    pool = Pool()
    pool.snapshot(100.0)
    with pytest.raises(ValueError, match="backwards"):
        pool.connector.snapshot(99.0)


# --- placement ---


def test_first_fit_and_pending_until_capacity_joins():
    pool = Pool(target=2, delay=0.0, workload=TaskList(tasks(10)))
    snap = pool.snapshot(0.0)
    first, second = (n.id for n in snap.nodes)
    assert [len(n.tasks) for n in snap.nodes] == [4, 4]
    assert [t.id for t in snap.pending] == ["t008", "t009"]
    assert placement(snap)["t000"] == first and placement(snap)["t004"] == second
    pool.at(60.0).set_target_capacity(3)
    snap = pool.snapshot(60.0)
    assert snap.pending == () and [len(n.tasks) for n in snap.nodes] == [4, 4, 2]
    assert account_nodes(snap.nodes).allocated == Resources(cpus=10)


@pytest.mark.parametrize("mode, b, c", [("first_fit", 0, 0), ("least_allocated", 1, 2), ("most_allocated", 0, 0)])
def test_placement_first_fit_spreads_or_packs(mode, b, c):
    """A 2-CPU task, then two of 1 CPU, on three empty 4-CPU nodes: first fit and MostAllocated put
    them all on the first node; LeastAllocated (Kubernetes' default scoring) on the emptiest each time."""
    work = TaskList(
        [
            WorkItem("a", Resources(cpus=2)),
            WorkItem("b", Resources(cpus=1), start=60.0),
            WorkItem("c", Resources(cpus=1), start=120.0),
        ]
    )
    pool = Pool(target=3, delay=0.0, workload=work, placement=mode)
    nodes = [n.id for n in pool.snapshot(0.0).nodes]
    pool.snapshot(60.0)
    assert placement(pool.snapshot(120.0)) == {"a": nodes[0], "b": nodes[b], "c": nodes[c]}


def test_an_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="unknown placement 'best'"):
        SimulatedScheduler(placement="best")


def test_departures_make_room_for_waiting_work():
    work = TaskList([*tasks(4, cpus=1.0, end=100.0), WorkItem("big", Resources(cpus=3), start=50.0)])
    pool = Pool(target=1, delay=0.0, workload=work)
    assert [t.id for t in pool.snapshot(50.0).pending] == ["big"]
    snap = pool.snapshot(100.0)
    assert snap.pending == () and [t.id for t in snap.nodes[0].tasks] == ["big"]


def test_tainted_nodes_take_no_new_work_until_untainted():
    pool = Pool(target=2, delay=0.0, workload=TaskList(tasks(2, start=10.0)))
    first, second = (n.id for n in pool.snapshot(0.0).nodes)
    pool.scheduler.taint([first], 5.0)
    snap = pool.snapshot(10.0)
    assert set(placement(snap).values()) == {second}
    assert snap.node(first).state is NodeState.TAINTED and snap.node(first).tainted_at == 5.0
    pool.scheduler.untaint([first])
    assert pool.snapshot(20.0).node(first).state is NodeState.READY
    with pytest.raises(ValueError, match="no joined node 'nope'"):
        pool.scheduler.taint(["nope"], 30.0)


def test_untainting_reopens_a_node_for_work_that_waited():
    pool = Pool(target=1, delay=0.0, workload=TaskList(tasks(1, start=10.0)))
    (only,) = (n.id for n in pool.snapshot(0.0).nodes)
    pool.scheduler.taint([only], 1.0)
    assert len(pool.snapshot(10.0).pending) == 1
    pool.scheduler.untaint([only])
    assert pool.snapshot(11.0).pending == ()


def test_a_terminated_nodes_tasks_wait_and_move():
    pool = Pool(target=2, delay=0.0, workload=TaskList(tasks(6)))
    first, second = (n.id for n in pool.snapshot(0.0).nodes)
    pool.at(10.0).terminate_instances([first])
    snap = pool.snapshot(10.0)
    assert [n.id for n in snap.nodes] == [second]
    assert len(snap.nodes[0].tasks) == 4 and len(snap.pending) == 2
    pool.at(20.0).set_target_capacity(2)
    snap = pool.snapshot(20.0)
    assert snap.pending == () and sum(len(n.tasks) for n in snap.nodes) == 6


def test_nothing_changed_means_the_same_values():
    pool = Pool(target=3, delay=0.0, workload=TaskList(tasks(5)))
    a, b = pool.snapshot(0.0), pool.snapshot(60.0)
    assert a.nodes is b.nodes and a.pending is b.pending


def test_demand_trace_runs_as_identical_tasks_newest_leave_first():
    size = Resources(cpus=1, mem=1000)
    trace = DemandTrace([(0.0, Resources(cpus=2.5)), (60.0, Resources(cpus=1, mem=5000)), (120.0, Resources())], size)
    assert trace.tasks_for(Resources(cpus=2.5)) == 3
    pool = Pool(target=2, delay=0.0, workload=trace)
    assert sorted(placement(pool.snapshot(0.0))) == ["demand-0000001", "demand-0000002", "demand-0000003"]
    snap = pool.snapshot(60.0)  # mem decides now: 5 tasks
    assert sorted(placement(snap)) == [f"demand-000000{i}" for i in range(1, 6)]
    assert pool.snapshot(120.0).pending == () and placement(pool.snapshot(120.0)) == {}
    with pytest.raises(ValueError, match="task_size"):
        DemandTrace([], Resources())


class FixedCloud:
    """One Auto Scaling group of one instance, launched at 500."""

    def cloud_view(self, now):
        g = ResourceGroup("asg-1", 1, 1, kind="asg", node_resources=CPU4)
        return CloudView((g,), (CloudInstance("i-0abc", "asg-1", 1.0, 500.0, "m5.xlarge", "us-west-2a"),))


def test_an_external_cloud_view_works_too():
    """The local stack's cloud is a real adapter (moto's Auto Scaling groups): any CloudViewSource."""

    connector = SimulatedConnector(FixedCloud(), SimulatedScheduler(join_delay_seconds=30.0))
    assert connector.snapshot(520.0).nodes[0].state is NodeState.ORPHAN  # joins 30 s after launch
    assert connector.snapshot(530.0).nodes[0].state is NodeState.READY


def test_a_live_pool_goes_on_when_the_wall_clock_is_stepped_back():
    """A replay never goes back in time (it is a bug there); a live pool's wall clock can (NTP)."""

    replay = SimulatedConnector(FixedCloud(), SimulatedScheduler(join_delay_seconds=30.0))
    replay.snapshot(520.0)
    with pytest.raises(ValueError, match="time went backwards"):
        replay.snapshot(510.0)
    live = LiveSimulatedConnector(FixedCloud(), SimulatedScheduler(join_delay_seconds=30.0))
    assert live.snapshot(520.0).nodes[0].state is NodeState.ORPHAN
    back = live.snapshot(-3000.0)  # an hour back: the pool's own time goes on from 520 ...
    assert back.taken_at == -3000.0 and back.nodes[0].state is NodeState.ORPHAN  # ... (the wall clock's time)
    assert live.snapshot(-2990.0).nodes[0].state is NodeState.READY  # 530 in the pool's time: joined


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
    pool = Pool(target=2, delay=0.0, workload=work)
    sizes, placed, pending, made = {}, {}, [], 0
    now = 0.0
    snap = pool.snapshot(now)
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
                pool.scheduler.taint([node], now)
            else:
                pool.scheduler.untaint([node])
        elif op == "target":
            pool.at(now).set_target_capacity(max(arg, len(pool.cloud.cloud_view(now).instances)))
        snap = pool.snapshot(now)
        states = {n.id: n.state for n in snap.nodes}
        order = [n.id for n in snap.nodes if n.state is not NodeState.ORPHAN]
        reference_first_fit(order, states, 4.0, placed, pending, sizes)
        assert placement(snap) == placed
        assert [t.id for t in snap.pending] == pending


def test_evict_moves_a_tainted_nodes_tasks_to_the_other_nodes():
    pool = Pool(target=2, delay=0.0, workload=TaskList(tasks(3)))
    snap = pool.snapshot(0.0)
    first, second = (n.id for n in snap.nodes)
    assert len(snap.node(first).tasks) == 3
    with pytest.raises(ValueError, match="is not tainted"):
        pool.scheduler.evict(first)
    pool.scheduler.taint([first], 5.0)
    assert pool.scheduler.evict(first) == 3
    assert pool.scheduler.node(first).tasks == ()  # at once, before the next step
    assert len(pool.scheduler.pending()) == 3
    snap = pool.snapshot(10.0)  # placed again, never on the tainted node
    assert set(placement(snap).values()) == {second} and snap.pending == ()
    assert pool.scheduler.evict(first) == 0
    with pytest.raises(ValueError, match="no joined node 'nope'"):
        pool.scheduler.evict("nope")


def test_node_is_the_current_value_of_one_node():
    pool = Pool(target=1, delay=60.0)
    (orphan_node,) = pool.snapshot(0.0).nodes
    assert pool.scheduler.node(orphan_node.id).state is NodeState.ORPHAN
    assert pool.scheduler.node("nope") is None
    pool.snapshot(60.0)
    pool.scheduler.taint([orphan_node.id], 70.0)
    node = pool.scheduler.node(orphan_node.id)
    assert (node.state, node.tainted_at) == (NodeState.TAINTED, 70.0)
    assert pool.scheduler.nodes() == (node,)  # the full list agrees

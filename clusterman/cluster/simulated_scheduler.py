"""A simulated scheduler, in process: for the simulator and the local stack.

Two parts, each a plain state machine with time passed in (no clock, no threads):
  SimulatedScheduler  instances join as nodes after a join delay (seeded, so runs repeat); a
                      workload's tasks are placed first fit on ready nodes, the rest wait pending;
                      nodes can be tainted and untainted; a terminated node's tasks are re-queued
  SimulatedConnector  the ClusterConnector over it and the pool's cloud: any ``CloudViewSource``,
                      usually ``cloud.view.GroupsCloudView`` over ``cloud.simulated_group.SimulatedGroup``s
                      (or over a real adapter, e.g. an Auto Scaling group on moto's server)

Speed matters (the simulator steps 30 days by the minute over ~1,000 nodes): node and task
values are built once and rebuilt only when they change, and placement remembers, per request
size, which leading nodes are known to be too full, so a step costs what changed, not the pool.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import math
import random
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from typing import Protocol

from clusterman.cluster.connector import ClusterConnector
from clusterman.cluster.connector import SchedulerView
from clusterman.core.cloud_view import CloudInstance
from clusterman.core.cloud_view import CloudView
from clusterman.core.cloud_view import CloudViewSource
from clusterman.core.cloud_view import orphan
from clusterman.core.config import PLACEMENTS
from clusterman.core.model import NO_TIME
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import Resources

log = logging.getLogger(__name__)

EPSILON = 1e-9

# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkItem:
    """A task of a simulated workload: it wants to run from ``start`` until ``end``."""

    id: str
    requests: Resources
    start: float = 0.0
    end: float = math.inf
    app: str = ""
    batch: bool = False


class Workload(Protocol):
    def changes(self, now: float) -> tuple[list[WorkItem], list[str]]:
        """Tasks that arrive, and ids of tasks that leave, since the previous call (time only grows)."""
        ...


class TaskList:
    """A fixed list of tasks, each with its own start and end."""

    def __init__(self, items: Iterable[WorkItem]) -> None:
        self._items = sorted(items, key=lambda w: (w.start, w.id))
        ids = [w.id for w in self._items]
        if len(set(ids)) != len(ids):
            raise ValueError("task list: task ids must be unique")
        self._next = 0
        self._ends: list[tuple[float, str]] = []

    def changes(self, now: float) -> tuple[list[WorkItem], list[str]]:
        arrivals = []
        while self._next < len(self._items) and self._items[self._next].start <= now:
            item = self._items[self._next]
            self._next += 1
            if item.end > now:
                arrivals.append(item)
                heapq.heappush(self._ends, (item.end, item.id))
        departures = []
        while self._ends and self._ends[0][0] <= now:
            departures.append(heapq.heappop(self._ends)[1])
        return arrivals, departures


class Workloads:
    """Several workloads as one (a demand trace beside a pool's steady tasks)."""

    def __init__(self, parts: Iterable[Workload]) -> None:
        self.parts = list(parts)

    def changes(self, now: float) -> tuple[list[WorkItem], list[str]]:
        arrivals: list[WorkItem] = []
        departures: list[str] = []
        for part in self.parts:
            a, d = part.changes(now)
            arrivals += a
            departures += d
        return arrivals, departures


class DemandTrace:
    """Demand over time (a step function of ``(time, Resources)`` points), run as tasks.

    By default (the old mode) identical tasks of ``task_size``, as many as the most demanding
    resource needs, the newest leaving first: scale-down then always meets the nodes that joined
    last, emptied in order, which flatters it. The realistic mode:
      ``mix``          tasks of several sizes, ``(weight, size)``, each drawn at random by weight;
                       the running tasks follow the demand of the resource that needs the most of
                       them, to within half a task
      ``departures``   ``random``: the tasks that leave when demand falls are chosen at random, so
                       every node keeps a few and nodes fragment
      ``lifetime``     mean seconds a task runs (exponential) before it ends and is replaced: the
                       turnover that lets a fragmented pool be packed again
    Every draw comes from ``seed``, so a run repeats."""

    def __init__(
        self,
        points: Iterable[tuple[float, Resources]],
        task_size: Resources,
        id_prefix: str = "demand",
        *,
        mix: Sequence[tuple[float, Resources]] = (),
        departures: str = "newest",
        lifetime_seconds: float | None = None,
        seed: int = 0,
    ) -> None:
        self._points = sorted(points, key=lambda p: p[0])
        self._times = [t for t, _ in self._points]
        if not any(task_size):
            raise ValueError("demand trace: task_size must ask for some resource")
        if departures not in ("newest", "random"):
            raise ValueError(f"demand trace: departures must be newest or random, got {departures!r}")
        self._size = task_size
        self._prefix = id_prefix
        self._running: list[str] = []
        self._made = 0
        self._random = departures == "random"
        self._rng = random.Random(seed)
        self._lifetime = lifetime_seconds
        self._mix = [(w, s) for w, s in mix if w > 0 and any(s)]
        self._cumulative = list(itertools.accumulate(w for w, _ in self._mix))
        mean = (
            [sum(w * tuple(s)[k] for w, s in self._mix) / self._cumulative[-1] for k in range(4)] if self._mix else []
        )
        self._mean = Resources(*mean) if mean else task_size
        self._amount: dict[str, float] = {}  # task id -> its amount of the driving resource (mix only)
        self._total = 0.0
        self._next_size: Resources | None = None
        self._ends: list[tuple[float, str]] = []
        self._index: dict[str, int] = {}  # task id -> position in _running (random departures)
        self._asked = -math.inf  # the last time changes were drawn for

    def tasks_for(self, demand: Resources) -> int:
        return max(
            (math.ceil(need / size - EPSILON) for need, size in zip(demand, self._size, strict=True) if size > 0),
            default=0,
        )

    def changes(self, now: float) -> tuple[list[WorkItem], list[str]]:
        """What arrives and leaves by ``now``. Asked again at the same time, nothing: how often the
        pool is read must not change its demand."""
        if now == self._asked:
            return [], []
        self._asked = now
        i = bisect.bisect_right(self._times, now) - 1
        demand = self._points[i][1] if i >= 0 else Resources()
        departures = self._ended(now)
        arrivals: list[WorkItem] = []
        if not self._mix:
            wanted = self.tasks_for(demand)
            while len(self._running) < wanted:
                arrivals.append(self._arrive(self._size, now, 0.0))
            while len(self._running) > wanted:
                departures.append(self._leave())
            return arrivals, departures
        r = self._driving(demand)
        need = tuple(demand)[r]
        while True:
            size = self._next_size or self._draw()
            amount = tuple(size)[r]
            if need - self._total < amount / 2 - EPSILON:
                self._next_size = size
                break
            self._next_size = None
            arrivals.append(self._arrive(size, now, amount))
        while self._running:
            task_id = self._pick()
            if self._total - need < self._amount[task_id] / 2 - EPSILON:
                break
            departures.append(self._leave(task_id))
        return arrivals, departures

    def _driving(self, demand: Resources) -> int:
        """The resource that needs the most tasks of the mix's mean size."""
        best, worst = 0, -1.0
        for k, (need, size) in enumerate(zip(demand, self._mean, strict=True)):
            if size > 0 and need / size > worst:
                best, worst = k, need / size
        return best

    def _draw(self) -> Resources:
        x = self._rng.random() * self._cumulative[-1]
        return self._mix[bisect.bisect_right(self._cumulative, x)][1]

    def _arrive(self, size: Resources, now: float, amount: float) -> WorkItem:
        self._made += 1
        item = WorkItem(f"{self._prefix}-{self._made:07d}", size, start=now)
        self._index[item.id] = len(self._running)
        self._running.append(item.id)
        if self._mix:
            self._amount[item.id] = amount
            self._total += amount
        if self._lifetime is not None:
            heapq.heappush(self._ends, (now + self._rng.expovariate(1 / self._lifetime), item.id))
        return item

    def _pick(self) -> str:
        """The task that would leave next: a random one, or the newest."""
        if self._random:
            k = self._rng.randrange(len(self._running))
            last = len(self._running) - 1
            if k != last:  # keep the choice in the last place, where _leave takes it from
                a, b = self._running[k], self._running[last]
                self._running[k], self._running[last] = b, a
                self._index[b], self._index[a] = k, last
        return self._running[-1]

    def _leave(self, task_id: str | None = None) -> str:
        if task_id is None:
            task_id = self._pick()
        k = self._index.pop(task_id)
        last = self._running.pop()
        if last != task_id:
            self._running[k] = last
            self._index[last] = k
        self._total -= self._amount.pop(task_id, 0.0)
        return task_id

    def _ended(self, now: float) -> list[str]:
        """Tasks whose lifetime is over (they are replaced by arrivals in the same step)."""
        out = []
        while self._ends and self._ends[0][0] <= now:
            _, task_id = heapq.heappop(self._ends)
            if task_id in self._index:
                out.append(self._leave(task_id))
        return out


# --- the scheduler ------------------------------------------------------------------------------


class _SimTask:
    __slots__ = ("node", "requests", "value")

    def __init__(self, value: Task) -> None:
        self.value = value
        self.requests = tuple(value.requests)
        self.node: _SimNode | None = None


class _SimNode:
    __slots__ = (
        "allocatable",
        "changed",
        "free",
        "index",
        "instance",
        "joined",
        "pos",
        "state",
        "tainted_at",
        "tasks",
        "value",
    )

    def __init__(self, instance: CloudInstance, allocatable: Resources, pos: int) -> None:
        self.instance = instance
        self.allocatable = allocatable
        self.free = list(allocatable)
        self.joined = False
        self.state = NodeState.ORPHAN
        self.tainted_at = NO_TIME
        self.tasks: dict[str, _SimTask] = {}
        self.index = -1  # position among joined nodes (the first-fit order)
        self.pos = pos  # position in the snapshot's nodes
        self.value = orphan(instance)
        self.changed = False  # value is out of date

    def build(self) -> Node:
        i = self.instance
        self.changed = False
        self.value = Node(
            id=i.instance_id,
            state=self.state,
            allocatable=self.allocatable,
            group_id=i.group_id,
            instance_id=i.instance_id,
            weight=i.weight,
            launched_at=i.launched_at,
            tainted_at=self.tainted_at,
            tasks=tuple([t.value for t in self.tasks.values()]),
            instance_type=i.instance_type,
            market=i.market,
            ip=i.ip,
            template=i.template,
            image_id=i.image_id,
        )
        return self.value

    def fits(self, requests: tuple[float, ...]) -> bool:
        free = self.free
        return (
            requests[0] <= free[0] + EPSILON
            and requests[1] <= free[1] + EPSILON
            and requests[2] <= free[2] + EPSILON
            and requests[3] <= free[3] + EPSILON
        )

    def add(self, task: _SimTask, sign: float) -> None:
        for k in range(4):
            self.free[k] -= sign * task.requests[k]


def node_allocatable(instance: CloudInstance, group: ResourceGroup | None) -> Resources:
    """By default a node offers its group's allocatable per weight unit times its weight."""
    return group.node_resources * instance.weight if group is not None else Resources()


class SimulatedScheduler:
    def __init__(
        self,
        workload: Workload | None = None,
        *,
        join_delay_seconds: float = 0.0,
        join_delay_stdev_seconds: float = 0.0,
        seed: int = 0,
        allocatable: Callable[[CloudInstance, ResourceGroup | None], Resources] = node_allocatable,
        initial_nodes_joined: bool = False,
        placement: str = "first_fit",
    ) -> None:
        """``initial_nodes_joined``: the instances of the first cloud view have already joined (the
        pool was running before the story starts); otherwise they join after the delay too.
        ``placement``: ``first_fit`` (join order), ``most_allocated`` or ``least_allocated``
        (scored as Kubernetes' NodeResourcesFit strategies; see ``_best``)."""
        if join_delay_seconds < 0 or join_delay_stdev_seconds < 0:
            raise ValueError("simulated scheduler: join delays must be >= 0")
        if placement not in PLACEMENTS:
            raise ValueError(f"simulated scheduler: unknown placement {placement!r}")
        self._placement = placement
        self.workload = workload
        self._initial_joined = initial_nodes_joined
        self._delay = join_delay_seconds
        self._stdev = join_delay_stdev_seconds
        self._rng = random.Random(seed)
        self._allocatable = allocatable
        self._nodes: dict[str, _SimNode] = {}  # every instance seen, in the order it was seen
        self._values: list[Node] = []  # their Node values, in the same order
        self._changed: list[_SimNode] = []  # nodes whose value must be rebuilt
        self._joined: list[_SimNode] = []  # joined nodes, in join order: the first-fit order
        self._joins: list[tuple[float, int, str]] = []
        self._seen = 0
        self._tasks: dict[str, _SimTask] = {}
        self._pending: dict[str, _SimTask] = {}
        # instances the cloud takes with their tasks (an interruption): until when their tasks stay
        # pending, not placed (Kubernetes sees the node gone, then deletes its pods: they come back)
        self._taken: dict[str, float] = {}
        self._held: dict[str, float] = {}  # task id -> until when it is not placed
        self._no_fit_before: dict[tuple[float, ...], int] = {}
        self._last_view: CloudView | None = None
        self._now = -math.inf
        self._nodes_value: tuple[Node, ...] | None = ()
        self._pending_value: tuple[Task, ...] | None = ()

    # the state machine --------------------------------------------------------------------------

    def step(self, view: CloudView, now: float) -> None:
        """Bring the pool to ``now``: instances come and go, due ones join, work arrives, leaves, is placed."""
        if now < self._now:
            raise ValueError(f"simulated scheduler: time went backwards ({now} < {self._now})")
        self._now = now
        self._observe(view, now)
        while self._joins and self._joins[0][0] <= now:
            _, _, instance_id = heapq.heappop(self._joins)
            node = self._nodes.get(instance_id)
            if node is not None and not node.joined:
                node.joined, node.state = True, NodeState.READY
                node.index = len(self._joined)
                self._joined.append(node)
                self._touch(node)
        if self.workload is not None:
            arrivals, departures = self.workload.changes(now)
            for task_id in departures:
                self._remove_task(task_id)
            for item in arrivals:
                self._add_task(item)
        self._place()

    def taint(self, node_ids: Iterable[str], now: float) -> None:
        for node in self._joined_nodes(node_ids):
            if node.state is not NodeState.TAINTED:
                node.state, node.tainted_at = NodeState.TAINTED, now
                self._touch(node)

    def untaint(self, node_ids: Iterable[str]) -> None:
        for node in self._joined_nodes(node_ids):
            if node.state is NodeState.TAINTED:
                node.state, node.tainted_at = NodeState.READY, NO_TIME
                self._touch(node)
                self._room_at(node.index)

    def take(self, instance_ids: Iterable[str], back_at: float) -> int:
        """The cloud takes these instances with what runs there (the caller removes them from their
        group): their tasks are pending again but not placed before ``back_at``. How many tasks
        were on them."""
        count = 0
        for instance_id in instance_ids:
            node = self._nodes.get(instance_id)
            if node is not None:
                self._taken[instance_id] = back_at
                count += len(node.tasks)
        return count

    def tasks_on(self, instance_id: str) -> int:
        node = self._nodes.get(instance_id)
        return len(node.tasks) if node is not None else 0

    def evict(self, node_id: str) -> int:
        """Move a tainted node's tasks back to pending (the next step places them on ready nodes, as a
        drain's evicted pods are rescheduled); returns how many moved."""
        (node,) = self._joined_nodes([node_id])
        if node.state is not NodeState.TAINTED:
            raise ValueError(f"simulated scheduler: node {node_id!r} is not tainted")
        for task in node.tasks.values():
            task.node = None
            node.add(task, -1.0)
            self._pending[task.value.id] = task
        moved = len(node.tasks)
        if moved:
            node.tasks.clear()
            self._touch(node)
            self._pending_value = None
        return moved

    def node(self, node_id: str) -> Node | None:
        """One node's current value; None for an instance this scheduler has not seen (or that is gone)."""
        node = self._nodes.get(node_id)
        if node is None:
            return None
        if node.changed and node.pos >= 0:
            self._values[node.pos] = node.build()  # it stays in _changed: nodes() only rebuilds it again
        return node.value

    def nodes(self) -> tuple[Node, ...]:
        if self._nodes_value is None:
            for node in self._changed:
                if node.pos >= 0:
                    self._values[node.pos] = node.build()
            self._changed.clear()
            self._nodes_value = tuple(self._values)
        return self._nodes_value

    def pending(self) -> tuple[Task, ...]:
        if self._pending_value is None:
            self._pending_value = tuple(t.value for t in self._pending.values())
        return self._pending_value

    # internals ----------------------------------------------------------------------------------

    def _touch(self, node: _SimNode) -> None:
        if not node.changed:
            node.changed = True
            self._changed.append(node)
        self._nodes_value = None

    def _observe(self, view: CloudView, now: float) -> None:
        if view is self._last_view:
            return
        first = self._last_view is None
        self._last_view = view
        groups = {g.id: g for g in view.groups}
        known = self._nodes
        for instance in view.instances:
            if instance.instance_id in known:
                continue
            delay = max(0.0, self._rng.gauss(self._delay, self._stdev)) if self._stdev else self._delay
            if first and self._initial_joined:
                delay = -math.inf
            start = instance.launched_at if instance.launched_at != NO_TIME else now
            self._seen += 1
            heapq.heappush(self._joins, (start + delay, self._seen, instance.instance_id))
            node = _SimNode(instance, self._allocatable(instance, groups.get(instance.group_id)), len(self._values))
            known[instance.instance_id] = node
            self._values.append(node.value)
            self._nodes_value = None
        if len(known) == len(view.instances):
            return
        gone = known.keys() - {i.instance_id for i in view.instances}
        for instance_id in gone:
            node = known.pop(instance_id)
            node.pos = -1
            held = self._taken.pop(instance_id, None)
            for task in node.tasks.values():
                task.node = None
                self._pending[task.value.id] = task
                if held is not None:
                    self._held[task.value.id] = held
            node.tasks.clear()
        self._values = [node.value for node in known.values()]
        for pos, node in enumerate(known.values()):
            node.pos = pos
        self._joined = [n for n in self._joined if n.pos >= 0]
        for index, node in enumerate(self._joined):
            node.index = index
        self._no_fit_before.clear()
        self._pending_value = self._nodes_value = None

    def _joined_nodes(self, node_ids: Iterable[str]) -> list[_SimNode]:
        nodes = []
        for node_id in node_ids:
            node = self._nodes.get(node_id)
            if node is None or not node.joined:
                raise ValueError(f"simulated scheduler: no joined node {node_id!r}")
            nodes.append(node)
        return nodes

    def _add_task(self, item: WorkItem) -> None:
        if item.id in self._tasks:
            raise ValueError(f"simulated workload: task {item.id!r} arrived twice")
        task = _SimTask(Task(item.id, item.requests, batch=item.batch, app=item.app))
        self._tasks[item.id] = task
        self._pending[item.id] = task
        self._pending_value = None

    def _remove_task(self, task_id: str) -> None:
        task = self._tasks.pop(task_id, None)
        if task is None:
            return
        node = task.node
        if node is None:
            del self._pending[task_id]
            self._held.pop(task_id, None)
            self._pending_value = None
            return
        del node.tasks[task_id]
        node.add(task, -1.0)
        self._touch(node)
        self._room_at(node.index)

    def _room_at(self, index: int) -> None:
        """Node ``index`` has more room: no request size is known not to fit there any more."""
        for key, first in self._no_fit_before.items():
            if first > index:
                self._no_fit_before[key] = index

    def _place(self) -> None:
        """Each pending task, oldest first, on a ready node with room: the first in join order, or
        the best scored (``_best``); what fits nowhere waits."""
        if not self._pending:
            return
        joined = self._joined
        placed = []
        held = self._held
        for task in self._pending.values():
            if held and held.get(task.value.id, -math.inf) > self._now:
                continue
            if self._placement != "first_fit":
                node = self._best(task.requests, packs=self._placement == "most_allocated")
            else:
                index = self._no_fit_before.get(task.requests, 0)
                while index < len(joined) and not (
                    joined[index].state is NodeState.READY and joined[index].fits(task.requests)
                ):
                    index += 1
                self._no_fit_before[task.requests] = index
                node = joined[index] if index < len(joined) else None
            if node is not None:
                node.tasks[task.value.id] = task
                node.add(task, 1.0)
                task.node = node
                self._touch(node)
                placed.append(task.value.id)
        for task_id in placed:
            del self._pending[task_id]
            held.pop(task_id, None)
        if placed:
            self._pending_value = None

    def _best(self, requests: tuple[float, ...], packs: bool) -> _SimNode | None:
        """The ready node with room that Kubernetes' NodeResourcesFit scoring ranks first: by the
        share of CPUs and of memory requested with the task, averaged over the two (a resource the
        node lacks left out); the highest when it ``packs`` (MostAllocated), else the lowest
        (LeastAllocated, the default scheduler's spreading); ties in join order."""
        best: _SimNode | None = None
        best_score = 0.0
        for node in self._joined:
            if node.state is NodeState.READY and node.fits(requests):
                score = _requested_share(node, requests)
                if best is None or (score > best_score if packs else score < best_score):
                    best, best_score = node, score
        return best


def _requested_share(node: _SimNode, requests: tuple[float, ...]) -> float:
    """The mean over CPUs and memory (those the node has) of the share requested with ``requests``."""
    have = (node.allocatable.cpus, node.allocatable.mem)
    shares = [(have[k] - node.free[k] + requests[k]) / have[k] for k in (0, 1) if have[k] > 0]
    return sum(shares) / len(shares) if shares else 0.0


@dataclass(frozen=True)
class SimulatedView(SchedulerView):
    """A simulated scheduler's view before it meets the cloud: its nodes are the cloud's instances,
    so they are known in the join; this says the pool's own time, which the join steps it to."""

    at: float = 0.0


class SimulatedConnector(ClusterConnector):
    """A pool whose scheduler is simulated; ``cloud`` is simulated groups' view or a real adapter's."""

    def __init__(self, cloud: CloudViewSource, scheduler: SimulatedScheduler) -> None:
        super().__init__(cloud)
        self.scheduler = scheduler
        self._last: PoolSnapshot | None = None

    def scheduler_view(self, now: float) -> SimulatedView:
        return SimulatedView(at=now)

    def join(self, view: SchedulerView, cloud: CloudView, now: float) -> PoolSnapshot:
        """The scheduler stepped to the view's time on the cloud's instances. It already carries the
        cloud's fields, so no join is needed (and none is paid). Asked again at the same time with
        nothing changed, it returns the same snapshot, so what readers cached on it (counts,
        indexes) is not worked out twice. The snapshot carries ``now``, as every connector's."""
        at = view.at if isinstance(view, SimulatedView) else now
        self.scheduler.step(cloud, at)
        nodes, pending, last = self.scheduler.nodes(), self.scheduler.pending(), self._last
        if (
            last is None
            or last.taken_at != at
            or last.nodes is not nodes
            or last.pending is not pending
            or (last.groups is not cloud.groups)
        ):
            last = self._last = PoolSnapshot(at, nodes, cloud.groups, pending)
        return last if at == now else replace(last, taken_at=now)


class LiveSimulatedConnector(SimulatedConnector):
    """A simulated pool in a live process (the local stack, a pool with ``scheduler: simulated``):
    its time is the wall clock's, but a wall clock stepped back (NTP, an operator) moves the pool's
    own time on from where it was instead of back, so the pool goes on (a replay's time never goes
    back: there, a step back is a bug, and ``SimulatedScheduler.step`` says so). The pool's time is
    its view's; snapshots still carry the wall clock's time, like every other connector's."""

    def __init__(self, cloud: CloudViewSource, scheduler: SimulatedScheduler) -> None:
        super().__init__(cloud, scheduler)
        self._ahead = 0.0  # seconds the pool's time runs ahead of the wall clock: the steps back seen
        self._latest = -math.inf

    def scheduler_view(self, now: float) -> SimulatedView:
        at = now + self._ahead
        if at < self._latest:
            log.warning("the wall clock went back %.0f s: the simulated pool's time goes on from where it was",
                        self._latest - at)  # fmt: skip
            self._ahead += self._latest - at
            at = self._latest
        self._latest = at
        return SimulatedView(at=at)

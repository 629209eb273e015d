"""Node lifecycle on the simulated scheduler (``simulated_scheduler.py``), for the simulator and the local stack.

A thin wrapper: taints and untaints are the scheduler's own; a drain moves the node's tasks back to
pending at once (the next step places them on ready nodes, as evicted pods are rescheduled), so it
is DONE in one call. There are no disruption budgets in a simulation. Terminating is the cloud's
(``SimulatedCloud.terminate``); the scheduler forgets a node when its instance leaves the cloud.
"""

from __future__ import annotations

from collections.abc import Iterable

from clusterman.cluster.lifecycle import DrainResult
from clusterman.cluster.lifecycle import DrainStatus
from clusterman.cluster.lifecycle import GoingOn
from clusterman.cluster.lifecycle import NodeLifecycle
from clusterman.cluster.lifecycle import NodeResult
from clusterman.cluster.lifecycle import Outcome
from clusterman.cluster.lifecycle import Results
from clusterman.cluster.simulated_scheduler import SimulatedScheduler
from clusterman.core.model import Node
from clusterman.core.model import NodeState


class SimulatedLifecycle(NodeLifecycle):
    def __init__(self, scheduler: SimulatedScheduler, *, dry_run: bool = False) -> None:
        self.scheduler = scheduler
        self.dry_run = dry_run

    def taint(self, node_ids: Iterable[str], now: float) -> Results:
        def taint_one(node_id: str) -> NodeResult:
            node = self._joined(node_id)
            if node is None:
                return self.result(node_id, Outcome.FAILED, "no joined node")
            if node.state is NodeState.TAINTED:
                return self.result(node_id, Outcome.UNCHANGED, "already tainted")
            if not self.dry_run:
                self.scheduler.taint([node_id], now)
            return self.result(node_id, Outcome.CHANGED, self.would(f"tainted at {now:g}"))

        return self.each(node_ids, taint_one, "taint")

    def untaint(self, node_ids: Iterable[str]) -> Results:
        def untaint_one(node_id: str) -> NodeResult:
            node = self._joined(node_id)
            if node is None:
                return self.result(node_id, Outcome.FAILED, "no joined node")
            if node.state is not NodeState.TAINTED:
                return self.result(node_id, Outcome.UNCHANGED, "not tainted")
            if not self.dry_run:
                self.scheduler.untaint([node_id])
            return self.result(node_id, Outcome.CHANGED, self.would("untainted"))

        return self.each(node_ids, untaint_one, "untaint")

    def drain(self, node_id: str, now: float, going_on: GoingOn = lambda: "") -> DrainResult:
        node = self.scheduler.node(node_id)
        if node is None:
            return DrainResult(
                node_id, DrainStatus.DONE, 0, detail="no such node: nothing runs there", dry_run=self.dry_run
            )
        if node.state is not NodeState.TAINTED:
            return DrainResult(node_id, DrainStatus.FAILED, detail="not tainted: never drained", dry_run=self.dry_run)
        tasks = node.task_count()
        if self.dry_run:
            status = DrainStatus.NOT_NOW if tasks else DrainStatus.DONE
            return DrainResult(node_id, status, tasks, tasks, self.would(f"evicted {tasks} task(s)"), True)
        moved = self.scheduler.evict(node_id)
        return DrainResult(node_id, DrainStatus.DONE, 0, moved, f"evicted {moved} task(s)")

    def _joined(self, node_id: str) -> Node | None:
        node = self.scheduler.node(node_id)
        return node if node is not None and node.joined else None

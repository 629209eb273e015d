"""Node lifecycle: what the autoscaler does to a node in the scheduler on its way out (or back in).

The decision names nodes to untaint, taint and terminate; a ``NodeLifecycle`` carries that out in
one scheduler, in this order for a node that leaves (docs/node_lifecycle.md):

    taint  ->  drain (each period while tainted)  ->  [the decision chooses to terminate]
           ->  before_terminate  ->  the cloud terminates the instance  ->  after_terminate

and ``untaint`` for a tainted node the pool needs again. Every call answers per node and never
raises for one node: one node's failure is its own result, and the others go on. In dry-run mode
an adapter reads what it needs, changes nothing, and its results say what it would have done.
Time is passed in (the taint time is part of the taint).
"""

from __future__ import annotations

import abc
import enum
import logging
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    CHANGED = "changed"  # done (in dry-run mode: would be done)
    UNCHANGED = "unchanged"  # already so: nothing to do
    FAILED = "failed"  # could not; the detail says why


@dataclass(frozen=True)
class NodeResult:
    node_id: str
    outcome: Outcome
    detail: str = ""  # what was (or would be) done, or why it failed
    dry_run: bool = False
    # FAILED without a clear answer (a timeout, a lost connection, a server error): the change may
    # have been made all the same, and only a later read of the node tells
    unknown: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome is not Outcome.FAILED


Results = dict[str, NodeResult]  # by node id, in the order asked
GoingOn = Callable[[], str]  # why the run must stop acting now ("" when it may go on)


class DrainStatus(enum.Enum):
    DONE = "done"  # nothing left on the node that must move first: it may be terminated
    NOT_NOW = "not_now"  # work is still leaving, or a disruption budget refused for now: ask again later
    FAILED = "failed"  # the drain cannot proceed (not tainted, an error the next try will not fix)


UNKNOWN_COUNT = -1  # "not known" for a count of pods or tasks


@dataclass(frozen=True)
class DrainResult:
    node_id: str
    status: DrainStatus
    remaining: int = UNKNOWN_COUNT  # pods/tasks still on the node that block termination
    evicted: int = 0  # evictions accepted in this call (in dry-run mode: the ones it would ask for)
    detail: str = ""
    dry_run: bool = False


class NodeLifecycle(abc.ABC):
    """Acts on nodes in one scheduler. Constructors take plain values; the first call connects."""

    dry_run: bool = False

    @abc.abstractmethod
    def taint(self, node_ids: Iterable[str], now: float) -> Results:
        """Mark nodes for removal at ``now``: no new work goes there. A marked node keeps its first time."""

    @abc.abstractmethod
    def untaint(self, node_ids: Iterable[str]) -> Results:
        """Take the removal mark off: the node is capacity again (an operator's cordon stays)."""

    @abc.abstractmethod
    def drain(self, node_id: str, now: float, going_on: GoingOn = lambda: "") -> DrainResult:
        """One step of moving the work off a tainted node; DONE once nothing is left that must move.
        ``going_on`` is asked before each pod is asked to leave: why the run must stop ("" to go on)."""

    def running(self, node_ids: Iterable[str]) -> dict[str, int]:
        """The work on each node that must move before it goes (as a drain counts it), read from the
        scheduler itself right before termination: work may have come since the run's snapshot (a
        pod bound by name, one that tolerates the taint, a watch cache behind, a Mesos framework
        that ignores its inverse offers). ``UNKNOWN_COUNT`` for a node whose work cannot be read.
        An adapter that leaves a node out (this default leaves them all) is not read again: the
        snapshot's count stands."""
        return {}

    def before_terminate(self, node_ids: Iterable[str], now: float) -> Results:
        """Tell the scheduler the machines are going down now (Mesos: ``machine/down``)."""
        return self.unchanged(node_ids, "nothing to do before termination")

    def after_terminate(self, node_ids: Iterable[str]) -> Results:
        """Forget what the scheduler keeps about terminated machines (Mesos: the maintenance schedule)."""
        return self.unchanged(node_ids, "nothing to do after termination")

    def close(self) -> None:  # noqa: B027 - adapters that hold no connection need not override
        """Release connections; the lifecycle may be used again afterwards (it reconnects)."""

    # helpers for adapters ------------------------------------------------------------------------

    def result(self, node_id: str, outcome: Outcome, detail: str = "", unknown: bool = False) -> NodeResult:
        """A result, marked as a dry run when this lifecycle is one."""
        return NodeResult(node_id, outcome, detail, self.dry_run, unknown)

    def unchanged(self, node_ids: Iterable[str], detail: str) -> Results:
        return {n: self.result(n, Outcome.UNCHANGED, detail) for n in unique(node_ids)}

    def each(self, node_ids: Iterable[str], act: Callable[[str], NodeResult], what: str) -> Results:
        """``act`` on each node alone: an exception is that node's failure, never the others'."""
        results: Results = {}
        for node_id in unique(node_ids):
            try:
                results[node_id] = act(node_id)
            except Exception as e:  # one node's surprise must not stop the others; logged in full
                log.exception("%s %s failed", what, node_id)
                results[node_id] = self.result(node_id, Outcome.FAILED, f"{what}: {type(e).__name__}: {e}")
        return results

    def would(self, text: str) -> str:
        """``"tainted ..."`` -> ``"dry run: would have tainted ..."`` in dry-run mode (details are past tense)."""
        return f"dry run: would have {text}" if self.dry_run else text


def unique(node_ids: Iterable[str]) -> list[str]:
    """Node ids once each, in the order given (a string is one id, not its characters)."""
    if isinstance(node_ids, str):
        return [node_ids]
    return list(dict.fromkeys(node_ids))


class WithoutDraining(NodeLifecycle):
    """A pool with ``draining_enabled: false``: nodes are terminated without draining, as Clusterman
    does. Taints, untaints and the termination steps still go to the scheduler underneath."""

    def __init__(self, inner: NodeLifecycle) -> None:
        self.inner = inner
        self.dry_run = inner.dry_run

    def taint(self, node_ids: Iterable[str], now: float) -> Results:
        return self.inner.taint(node_ids, now)

    def untaint(self, node_ids: Iterable[str]) -> Results:
        return self.inner.untaint(node_ids)

    def drain(self, node_id: str, now: float, going_on: GoingOn = lambda: "") -> DrainResult:
        return DrainResult(node_id, DrainStatus.DONE, detail="draining is disabled for this pool", dry_run=self.dry_run)

    def running(self, node_ids: Iterable[str]) -> dict[str, int]:
        return self.inner.running(node_ids)

    def before_terminate(self, node_ids: Iterable[str], now: float) -> Results:
        return self.inner.before_terminate(node_ids, now)

    def after_terminate(self, node_ids: Iterable[str]) -> Results:
        return self.inner.after_terminate(node_ids)

    def close(self) -> None:
        self.inner.close()

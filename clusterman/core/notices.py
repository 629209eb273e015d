"""Notices: something outside the decision says a node must go, and why (docs/node_lifecycle.md).

A notice names a node by its instance id (the cloud's notices: a Spot interruption warning, a
rebalance recommendation, a scheduled change, an instance stopping) or by its node id (a node
migration chooses nodes from the snapshot). Adapters turn each source into these values; the run
hands them to the decision, which drains the node through the same machinery as a scale-down and
asks for its replacement in the same run. Times are Unix seconds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol
from typing import runtime_checkable

from clusterman.core.model import NO_TIME
from clusterman.core.model import PoolSnapshot


class LeaveReason(enum.Enum):
    """Why a node leaves. The first three are Clusterman's drain reasons, spelled as it spells them;
    events, counters and ``clusterman status`` carry these values."""

    SPOT_INTERRUPTION = "spot_interruption"  # the cloud takes the instance back at the deadline
    NODE_MIGRATION = "node_migration"  # replaced by rule (issue 42: uptime, kernel, template)
    SCALING_DOWN = "scaling_down"  # the decision's own scale-down, consolidation's removals included
    REBALANCE_RECOMMENDATION = "rebalance_recommendation"  # the Spot market says: at higher risk
    SCHEDULED_CHANGE = "scheduled_change"  # an AWS Health scheduled retirement or reboot
    INSTANCE_STOPPING = "instance_stopping"  # the instance is stopping, shutting down or gone

    @property
    def has_deadline(self) -> bool:
        """The cloud ends the instance at a known time whether the drain finished or not."""
        return self in (LeaveReason.SPOT_INTERRUPTION, LeaveReason.INSTANCE_STOPPING, LeaveReason.SCHEDULED_CHANGE)


@dataclass(frozen=True)
class Notice:
    """One node to replace. ``instance_id`` or ``node_id`` (or both) says which; a notice for
    neither's node in the pool is reported and dropped by the decision.

    ``deadline``: when the instance goes regardless (NO_TIME: none; a drain then has
    ``draining_time_threshold_seconds``). ``drain``: taint it and move its pods now; False asks
    only for its replacement (a rebalance recommendation handled as ``replace_ahead``).
    ``replace``: ask for the capacity it takes with it in the same run. ``key``: the source's
    own name for the notice (an SQS message id, a NodeMigration), for lines and logs."""

    reason: LeaveReason
    noticed_at: float
    instance_id: str = ""
    node_id: str = ""
    deadline: float = NO_TIME
    drain: bool = True
    replace: bool = True
    key: str = ""

    def __post_init__(self) -> None:
        if not self.instance_id and not self.node_id:
            raise ValueError("a notice names an instance id or a node id")

    @property
    def subject(self) -> str:
        """The notice's node as a person reads it."""
        return self.node_id or self.instance_id


NO_NOTICES: tuple[Notice, ...] = ()
# a notice stays in force this long past its deadline (or its arrival, without one): an inbox keeps
# it so long, and the decision remembers a drain it gave up at least so long (the same notice
# does not start it again)
KEEP_SECONDS = 3600.0


@dataclass(frozen=True)
class DrainOutcome:
    """What a run did with the nodes leaving, for the sources that sent notices (a migration
    counts the nodes it replaced and the drains that failed). By node id."""

    now: float
    leaving: dict[str, LeaveReason]  # still leaving after this run (and why)
    gone: dict[str, LeaveReason]  # terminated this run
    given_up: dict[str, str]  # drains given up this run: why (the node is back in the pool)
    lost: dict[str, int]  # pods still on a node terminated anyway
    unknown: tuple[Notice, ...]  # notices for no node of the pool


class NoticeError(Exception):
    """A source of notices could not be read; the message is one line. The run goes on with the
    nodes it already knows to be leaving (they are in its record)."""


class NoticeSource(Protocol):
    """Where a run learns which nodes must go (docs/node_lifecycle.md, "Sources of notices").

    ``notices`` is called once per run, after the pool is read and before the decision, with the
    snapshot (a migration chooses its nodes from it) and the time; it returns every notice still
    in force (a notice repeated run after run is one notice: the decision keeps its own record).
    ``settle`` is called after the run acted (not after a dry run, nor a run that did not act).
    Neither may block for long: a source that reads the network does it on its own schedule and
    hands over what it has."""

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        """Raises NoticeError when it cannot say."""
        ...

    def settle(self, outcome: DrainOutcome) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Ahead:
    """What a source that plans its notices (a node migration) asks of the run besides them:
    ``weight`` (capacity units) asked beyond the decision's own sizing while it runs (Clusterman's
    prescaling), ``hold`` why the pool must not shrink meanwhile ("" when it may: Clusterman's
    ``disable_autoscaling``), and its ``line`` for the run's log line and ``clusterman status``."""

    weight: float = 0.0
    hold: str = ""
    line: str = ""


NOTHING_AHEAD = Ahead()


@runtime_checkable
class Plans(Protocol):
    """A source of notices that also asks capacity ahead (``ahead`` is read after ``notices``)."""

    def ahead(self) -> Ahead: ...


class NoSource:
    """No notices: a pool whose nodes leave only by its own decision."""

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        return NO_NOTICES

    def settle(self, outcome: DrainOutcome) -> None:
        pass

    def close(self) -> None:
        pass


class Sources:
    """Several sources read as one (the cloud's notices and a migration): each one's failure is
    its own, named in the NoticeError raised after the others were read (their notices are kept
    in ``last``)."""

    def __init__(self, *sources: NoticeSource) -> None:
        self.sources = sources
        self.last: tuple[Notice, ...] = NO_NOTICES

    def notices(self, snapshot: PoolSnapshot, now: float) -> tuple[Notice, ...]:
        found: list[Notice] = []
        failed: list[str] = []
        for source in self.sources:
            try:
                found.extend(source.notices(snapshot, now))
            except NoticeError as e:
                failed.append(str(e))
        self.last = tuple(found)
        if failed:
            raise NoticeError("; ".join(failed))
        return self.last

    def waiting(self) -> bool:
        """Whether any source has news since the last run read it (one that cannot say has none)."""
        return any(getattr(source, "waiting", lambda: False)() for source in self.sources)

    def settle(self, outcome: DrainOutcome) -> None:
        for source in self.sources:
            source.settle(outcome)

    def ahead(self) -> Ahead:
        """The sources that plan, as one: their weights added, their holds and lines joined."""
        asks = [source.ahead() for source in self.sources if isinstance(source, Plans)]
        if not asks:
            return NOTHING_AHEAD
        return Ahead(
            sum(a.weight for a in asks),
            "; ".join(a.hold for a in asks if a.hold),
            "; ".join(a.line for a in asks if a.line),
        )

    def close(self) -> None:
        for source in self.sources:
            source.close()


def combined(*sources: NoticeSource | None) -> NoticeSource | None:
    """The sources that are there, read as one (``Sources`` only when there are several); None
    when none is."""
    present = [source for source in sources if source is not None]
    if len(present) > 1:
        return Sources(*present)
    return present[0] if present else None

"""What one run did, as a value: how it ended, what it read, decided and changed.

The loop prints ``line()`` for people; the simulator and the tests read the fields.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction

from clusterman.cloud.resource_group import TargetChange
from clusterman.cloud.resource_group import Termination
from clusterman.cluster.lifecycle import DrainResult
from clusterman.cluster.lifecycle import Results
from clusterman.core.model import PoolSnapshot
from clusterman.core.timestamps import format_time
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.exact import number
from clusterman.decision.result import Decision
from clusterman.decision.result import Reason
from clusterman.events.exporter import ErrorSource
from clusterman.run.demand_source import Requests
from clusterman.signals.outcomes import short_cause
from clusterman.state.pause import PauseStatus


@dataclass
class ApplyReport:
    """What was done (or, in a dry run, would be), per node and per group, and what failed."""

    dry_run: bool
    untainted: Results = field(default_factory=dict)
    tainted: Results = field(default_factory=dict)
    drains: dict[str, DrainResult] = field(default_factory=dict)
    terminations: list[Termination] = field(default_factory=list)
    targets: list[TargetChange] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (object id, message)
    stopped_before: str = ""  # the stage acting stopped before (lease lost, budget spent); "" when it went through
    # the weight of the nodes consolidation chose to remove whose taint failed: their groups' targets
    # were set that much above the decision's
    not_removed: Fraction = Fraction(0)

    @property
    def tainted_now(self) -> list[str]:
        """The nodes this run tainted (asked, and done)."""
        return [n for n, r in self.tainted.items() if r.ok]

    @property
    def terminated(self) -> list[str]:
        return [i for t in self.terminations for i in t.terminated]

    def terminated_nodes(self, snapshot: PoolSnapshot) -> list[str]:
        """The nodes whose instance was terminated this run, by node id."""
        done = set(self.terminated)
        return [n.id for n in snapshot.nodes if n.instance_id in done]


class Outcome(enum.Enum):
    ACTED = "acted"  # decided and applied (a decision to change nothing included)
    PAUSED = "paused"
    NO_SNAPSHOT = "no_snapshot"
    NO_DEMAND = "no_demand"  # no metrics or no signal answer: the target is kept
    NO_STATE = "no_state"  # the carried-over state could not be read: nothing is done
    STANDBY = "standby"  # another autoscaler holds the pool's lease (or it cannot be read): nothing is done
    OVERRUN = "overrun"  # the snapshot was older than the run's budget when acting: nothing is done


@dataclass(frozen=True)
class Problem:
    """Something that went wrong in a run, not enough to end it: an error event."""

    source: ErrorSource
    object_id: str
    message: str


@dataclass(frozen=True)
class RunReport:
    now: float
    outcome: Outcome
    message: str = ""
    snapshot: PoolSnapshot | None = None
    decision: Decision | None = None
    applied: ApplyReport | None = None
    requests: Requests | None = None
    unreadable_groups: int = 0  # resource groups that could not be read: the target is not all known
    unworkable: str = ""  # why the configuration cannot work, as this run found ("" when it did not)
    migration: str = ""  # where the pool's node migration stands ("" when none runs)
    problems: tuple[Problem, ...] = ()  # what went wrong on the way, in the order met
    pause: PauseStatus | None = None  # the pool's pause as the run read it (None: not read)
    target_seen: float = math.nan  # a run that ended before deciding: the pool's target as it knew it
    state_before: AutoscalerState | None = None  # the carried state the run read the pool with

    def line(self) -> str:
        """One line per run, for people watching the log or `make run`."""
        stamp = format_time(self.now)
        if self.decision is None:
            return f"{stamp} {self.outcome.value}: {self.message}"
        d = self.decision
        demand = ", ".join(f"{k}={float(v):.1f}" for k, v in d.demand.items()) or "no opinion"
        util = ", ".join(f"{k} {float(v):.0%}" for k, v in d.utilisation.items()) or "-"
        errors = f" ({len(self.applied.errors)} errors)" if self.applied and self.applied.errors else ""
        dry = " (dry run: nothing changed)" if self.applied and self.applied.dry_run else ""
        held = f" ({self.outcome.value}: {self.message})" if self.outcome is not Outcome.ACTED else ""
        return (
            f"{stamp}{dry}{held} demand {demand}{self._fallbacks()} | utilisation {util} | {d.action.value} | "
            f"{self._target_text(d)}{errors} | {d.explanation}{self._drains_text(d)}"
            + (f" | {self.migration}" if self.migration else "")
        )

    def _drains_text(self, d: Decision) -> str:
        """What the drain machinery did this run, node by node, with why ("" when nothing):
        ``| n2 spot_interruption: tainted, evicted 3, 0 left``."""
        why = d.drains.why
        parts = []
        applied = self.applied
        for node_id in dict.fromkeys([*d.drains.new, *(applied.drains if applied else ()), *why]):
            words = []
            if node_id in d.drains.new:
                words.append("noticed")
            if applied is not None and node_id in applied.tainted_now:
                words.append("tainted")
            drain = applied.drains.get(node_id) if applied is not None else None
            if drain is not None and (drain.evicted or node_id in why):
                left = "" if drain.remaining < 0 else f", {drain.remaining} left"
                words.append(f"evicted {drain.evicted}{left}")
            if node_id in d.terminate:
                lost = d.drains.lost.get(node_id, 0)
                words.append(f"terminated with {lost} pod(s) not evicted" if lost else "terminated")
            if node_id in d.drains.given_up:
                words.append(f"drain given up, {d.drains.given_up[node_id]}: back in the pool")
            if words:
                reason = why[node_id].value if node_id in why else "scaling_down"
                parts.append(f"{node_id} {reason}: {', '.join(words)}")
        return f" | {'; '.join(parts)}" if parts else ""

    def _fallbacks(self) -> str:
        """Which apps the default signal answered for, and why, in a few words ("" when none)."""
        fell_back = [e for e in self.requests.evaluations if e.is_fallback] if self.requests else []
        if not fell_back:
            return ""
        return " (" + "; ".join(f"app {e.app} on the default signal: {short_cause(e)}" for e in fell_back) + ")"

    def _target_text(self, d: Decision) -> str:
        """The pool's target before and after, or what is known of it when groups could not be read."""
        change = f"{number(d.current_target)} -> {number(d.target_capacity)}"
        if self.applied is not None and self.applied.stopped_before and d.delta:
            change += " not set"  # the targets are set last: a run that stopped before them changed none
        elif self.applied is not None and self.applied.not_removed:
            change += f", {number(d.target_capacity + self.applied.not_removed)} set (a node to remove not tainted)"
        if not self.unreadable_groups:
            return f"target {change}"
        unread = f"{self.unreadable_groups} resource group(s) could not be read"
        if d.reason is Reason.NO_GROUPS:
            return f"target unknown ({unread})"
        return f"target of the readable groups {change} ({unread})"

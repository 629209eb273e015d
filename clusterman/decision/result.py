"""The decision value: what the pool should look like now, and why (the ``clusterman plan`` output)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from dataclasses import field
from fractions import Fraction
from typing import Any

from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.consolidate import OFF
from clusterman.decision.consolidate import Consolidation
from clusterman.decision.drains import DrainActions
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import number


class Action(enum.Enum):
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    NONE = "none"


class Reason(enum.Enum):
    """What decided the target, as a value (the explanation says it in words): events and metrics
    group decisions by it to answer "why did it (not) scale?"."""

    UTILISATION = "utilisation"  # utilisation against the setpoint decided
    MIN_CAPACITY = "min_capacity"  # the pool's minimum raised (or held up) the target
    MAX_CAPACITY = "max_capacity"  # the pool's maximum capped the target
    STEP_LIMIT = "step_limit"  # max_weight_to_add / max_weight_to_remove limited the change
    SCALE_LOCK = "scale_lock"  # held: a scale-up's capacity is still arriving
    BREAKER = "breaker"  # held: scale-ups keep failing to bring capacity
    CAPACITY_LOSS = "capacity_loss"  # no scale-down: nodes were lost since the last run
    HELD = "held"  # no scale-down: the caller said so (a resource group could not be read)
    NO_GROUPS = "no_groups"  # nothing to scale: no resource group, or all stale
    CONSOLIDATION = "consolidation"  # a node whose pods fit elsewhere is removed (consolidate.py)


@dataclass(frozen=True)
class Decision:
    """Capacities in weight units; utilisation as fractions (2.5 = 250%)."""

    action: Action
    current_capacity: Fraction  # ready capacity now
    current_target: Fraction  # the live groups' targets now (Clusterman's T)
    target_capacity: Fraction  # the live groups' targets to set: the ready capacity wanted
    group_targets: dict[str, Fraction]
    explanation: str
    reason: Reason = Reason.UTILISATION
    utilisation: dict[str, Fraction] = field(default_factory=dict)
    most_constrained: str = ""  # "" when the request had no opinion on any measurable resource
    demand: dict[str, Fraction] = field(default_factory=dict)
    load: dict[str, Fraction] = field(default_factory=dict)  # demand + slack
    capacity: dict[str, Fraction] = field(default_factory=dict)  # of ready nodes
    untaint: tuple[str, ...] = ()
    taint: tuple[str, ...] = ()
    terminate: tuple[str, ...] = ()
    node_reasons: dict[str, str] = field(default_factory=dict)
    # the most tasks each node to terminate may run when it goes (read again right before): the
    # count it was chosen on; a node not named goes whatever runs there (hard grace period, orphan)
    terminate_with: dict[str, int] = field(default_factory=dict)
    state: AutoscalerState = field(default_factory=AutoscalerState)
    consolidation: Consolidation = OFF
    # the drain machinery's choices (drains.py): which nodes get a drain step now (most urgent
    # first), why each node leaves, drains given up, pods lost with a node that went anyway
    drains: DrainActions = field(default_factory=DrainActions)
    # which tainted nodes apply drains: those of ``drains.drain`` (False: every tainted node, for
    # decisions built by hand)
    paced: bool = False

    @property
    def delta(self) -> Fraction:
        """The signed change of the live groups' targets: what the action, the explanation's arrow and
        the DECISION event all say, so that one run tells one story."""
        return self.target_capacity - self.current_target

    def as_json(self) -> dict[str, Any]:
        def numbers(values: dict[str, Fraction]) -> dict[str, int | float]:
            return {k: number(v) for k, v in values.items()}

        return {
            "action": self.action.value,
            "reason": self.reason.value,
            "utilisation": numbers(self.utilisation),
            "most_constrained": self.most_constrained or None,
            "current_capacity": number(self.current_capacity),
            "current_target": number(self.current_target),
            "target_capacity": number(self.target_capacity),
            "delta": number(self.delta),
            "untaint": list(self.untaint),
            "taint": list(self.taint),
            "terminate": list(self.terminate),
            "group_targets": numbers(self.group_targets),
            "explanation": self.explanation,
            "demand": numbers(self.demand),
            "load": numbers(self.load),
            "capacity": numbers(self.capacity),
            "node_reasons": dict(self.node_reasons),
            "consolidation": self.consolidation.as_json(),
            "drains": {
                "drain": list(self.drains.drain),
                "leaving": {n: r.value for n, r in self.drains.why.items()},
                "given_up": dict(self.drains.given_up),
                "lost": dict(self.drains.lost),
                "replacement": numbers(self.drains.replacement),
            },
            "state": self.state.as_json(),
        }


def action_of(current_target: Fraction, target: Fraction, untainted: Fraction, tainted: Fraction) -> Action:
    """The direction of the change this decision makes: the cloud target first, else the taints."""
    if target != current_target:
        return Action.SCALE_UP if target > current_target else Action.SCALE_DOWN
    net = untainted - tainted
    return Action.SCALE_UP if net > ZERO else Action.SCALE_DOWN if net < ZERO else Action.NONE

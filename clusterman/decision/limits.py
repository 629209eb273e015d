"""Clusterman's scaling limits, applied to the change of the pool's target (docs/scaling.md, "Limits").

Δ = proposed − T; toward the bounds first (Δ > 0: at most max_capacity − T; Δ < 0: at least
min_capacity − T, which can turn a decrease into an increase when T is below the minimum); then the
step limits (max_weight_to_add, max_weight_to_remove); then, while scale-down is blocked, Δ ≥ 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.decision.exact import ZERO
from clusterman.decision.exact import show
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.holds import shown
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.result import Reason


@dataclass(frozen=True)
class Clamped:
    target: Fraction
    notes: tuple[str, ...]  # which limits changed the proposal, for the explanation
    reason: Reason = Reason.UTILISATION  # the first limit that changed it, if any


def clamp(
    current: Fraction,
    proposed: Fraction,
    policy: ScalingPolicy,
    holds: tuple[Hold, ...] = (),
    unseen: Fraction | None = ZERO,
) -> Clamped:
    """``holds``: why scale-down is blocked this run (none when it is not). ``unseen``: the
    capacity of the pool's groups that could not be read (``current`` leaves it out), counted
    within the pool's bounds; None when it is not known, and then the pool does not grow."""
    notes = []
    reasons = []
    delta = proposed - current
    if unseen is None:
        top, cap = min(current, policy.max_capacity), "groups not read, of unknown capacity: no growth"
    else:
        top, cap = policy.max_capacity - unseen, f"max_capacity {show(policy.max_capacity)}"
        cap += f" less {show(unseen)} in groups not read" if unseen else ""
    bottom = policy.min_capacity - (unseen or ZERO)
    if delta > 0 and current + delta > top:
        delta = top - current
        notes.append(cap)
        reasons.append(Reason.MAX_CAPACITY)
    elif delta < 0 and current + delta < bottom:
        delta = bottom - current
        notes.append(f"min_capacity {show(policy.min_capacity)}")
        reasons.append(Reason.MIN_CAPACITY)
        if current + delta > top:  # the unread groups' capacity: the minimum is not worth the maximum
            delta = max(ZERO, top - current)
            notes.append(cap)
    if delta > policy.max_weight_to_add:
        delta = policy.max_weight_to_add
        notes.append(f"max_weight_to_add {show(policy.max_weight_to_add)}")
        reasons.append(Reason.STEP_LIMIT)
    elif delta < -policy.max_weight_to_remove:
        delta = -policy.max_weight_to_remove
        notes.append(f"max_weight_to_remove {show(policy.max_weight_to_remove)}")
        reasons.append(Reason.STEP_LIMIT)
    if holds and delta < 0:
        delta = Fraction(0)
        notes.append(shown(holds))
        lost = any(h.reason is HoldReason.CAPACITY_LOSS for h in holds)
        reasons.append(Reason.CAPACITY_LOSS if lost else Reason.HELD)
    return Clamped(current + delta, tuple(notes), reasons[0] if reasons else Reason.UTILISATION)

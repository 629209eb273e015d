"""An operator's target for the whole pool (``clusterman manage``), limited and spread as a run would.

The requested total goes through the autoscaler's own ``limits.clamp`` (min and max capacity, then
``max_weight_to_add`` / ``max_weight_to_remove``) and ``distribute`` (the groups' own bounds, stale
groups to 0), then each group's ``set_target_capacity``. Lowering a target terminates nothing: the
autoscaler's next run chooses which nodes leave (taint, drain, terminate), as for its own
decisions. A group that cannot be read stops the change before anything is sent (the pool's
current target would be unknown); a group that refuses its new target does not stop the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from clusterman.cloud.resource_group import CloudGroup
from clusterman.cloud.resource_group import ResourceGroupError
from clusterman.cloud.resource_group import TargetChange
from clusterman.cloud.resource_group import read_groups
from clusterman.core.model import PoolSnapshot
from clusterman.decision.distribute import distribute
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.exact import number
from clusterman.decision.exact import show
from clusterman.decision.limits import clamp
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import view_of
from clusterman.errors import UserError


class ManualTargetError(UserError):
    """The target could not be set at all; nothing was changed."""


@dataclass(frozen=True)
class ManualTarget:
    current: Fraction  # the live groups' targets before (Clusterman's T)
    requested: Fraction
    target: Fraction  # after the pool's limits
    achieved: Fraction  # what the groups' own bounds allow of it
    notes: tuple[str, ...]  # which limits changed the request
    changes: tuple[TargetChange, ...]
    errors: tuple[tuple[str, str], ...]  # (group id, why its target was not set)
    dry_run: bool


def parse_target(text: str, policy: ScalingPolicy) -> Fraction:
    """``min``, ``max`` (the pool's limits) or a number of weight units >= 0."""
    word = text.strip().lower()
    if word == "min":
        return policy.min_capacity
    if word == "max":
        return policy.max_capacity
    try:
        value = exact(float(word))
    except ValueError:
        raise ValueError(f"--target-capacity {text!r}: expected min, max or a number of weight units") from None
    if value < 0:
        raise ValueError(f"--target-capacity {text!r}: must be at least 0")
    return value


def set_pool_target(
    groups: Sequence[CloudGroup], requested: Fraction, policy: ScalingPolicy, now: float, dry_run: bool
) -> ManualTarget:
    readings = read_groups(groups)
    if readings.errors:
        problems = "; ".join(str(e) for e in readings.errors)
        raise ManualTargetError(f"cannot read every resource group, nothing changed: {problems}")
    if not readings.states:
        raise ManualTargetError("the pool has no resource groups: nothing to set")
    view = view_of(PoolSnapshot(now, (), tuple(s.group for s in readings.states.values())))
    current = view.target
    clamped = clamp(current, requested, policy)
    targets = distribute(view.groups.values(), clamped.target)
    achieved = sum((targets[g.id] for g in view.live_groups), ZERO)
    notes = list(clamped.notes)
    if achieved != clamped.target:
        notes.append(f"the groups' own bounds allow {show(achieved)}")
    changes: list[TargetChange] = []
    errors: list[tuple[str, str]] = []
    by_id = {g.id: g for g in groups}
    for group_id, target in sorted(targets.items()):
        try:
            changes.append(by_id[group_id].set_target_capacity(float(number(target)), dry_run=dry_run))
        except ResourceGroupError as e:
            errors.append((group_id, str(e)))
    return ManualTarget(
        current, requested, clamped.target, achieved, tuple(notes), tuple(changes), tuple(errors), dry_run
    )

"""The target the pool should have before limits: Clusterman's rules, Escalator's scale-up, and
optionally Escalator's removal rates (docs/scaling.md, "The target").

All in weight units, exact. ``T`` is the current target (non-stale groups), ``W`` the ready
capacity, ``u`` the utilisation of the most constrained resource, ``s`` the setpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.resources import RESOURCE_NAMES
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import ceil
from clusterman.decision.exact import exact
from clusterman.decision.exact import percent
from clusterman.decision.exact import show
from clusterman.decision.fit import Need
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import PoolView
from clusterman.decision.slots import Places
from clusterman.decision.slots import reserve
from clusterman.decision.spare import Spare
from clusterman.decision.utilisation import Utilisation


@dataclass(frozen=True)
class Proposal:
    target: Fraction
    reason: str  # the start of the decision's explanation, with the numbers it used
    # what utilisation alone asks for (before the slot reserve and the margin): the capacity the
    # signals ask for, which consolidation never removes; None when the rule did not apply
    asked: Fraction | None = None


def propose(
    view: PoolView,
    util: Utilisation,
    policy: ScalingPolicy,
    slot: Need | None = None,
    places: Places | None = None,
    coming: int = 0,
    spare: Spare | None = None,
) -> Proposal:
    """``slot``: the largest request in the pool, for ``policy.slot_reserve`` (slots.py), with the
    ready nodes' ``places`` when already counted and the places ``coming`` from nodes drained to
    be kept (consolidate.py); ``spare``: what the signals ask above the pods, with ``policy.spare``
    kept as whole places and as the band a scale-down waits out (spare.py)."""
    T = view.target
    if not util.has_opinion:
        return Proposal(T, f"no opinion on any resource: keep target {show(T)}")
    W = view.ready_total
    escalator = policy.escalator_removal is not None
    if util.all_zero and not (escalator and W > 0):
        proposal = Proposal(ZERO, "every request is zero: target 0")
    elif W == 0:
        proposal = _from_zero_ready(view, util, policy, T)
    elif not util.most_constrained:
        return Proposal(T, f"no requested resource exists on ready nodes: keep target {show(T)}")
    else:
        # with Escalator's thresholds zero requests are 0% utilisation: the fast rate, not target 0
        proposal = _from_utilisation(util, policy, T, W)
        if not escalator:
            asked = proposal.target
            wanted = policy.slot_reserve if spare is None else max(policy.slot_reserve, spare.places(slot))
            kept = reserve(
                view,
                proposal.target,
                slot,
                wanted,
                policy.slot_reserve_band,
                policy.slot_reserve_fraction,
                places,
                coming,
            )
            if kept.reason:
                proposal = Proposal(kept.target, f"{proposal.reason}; {kept.reason}")
            within = _within_margin(proposal, T, policy.target_capacity_margin)
            if spare is not None:
                within = _within_band(within, T, spare)
            return Proposal(within.target, within.reason, asked)
    # the taint thresholds are Escalator's band, its rates its step: no margin on top
    return _escalator_bounds(proposal, W, policy) if escalator else proposal


def _escalator_bounds(p: Proposal, ready: Fraction, policy: ScalingPolicy) -> Proposal:
    """Escalator's node-count bounds on the ready (untainted) capacity, whatever the utilisation
    said, the hold band included: above max_nodes come down to it, below min_nodes go up to it."""
    hi, lo = policy.max_capacity, policy.min_capacity
    if ready > hi and p.target > hi:
        return Proposal(hi, f"{p.reason}; {show(ready)} ready > max_capacity {show(hi)}: at most {show(hi)}")
    if ready < lo and p.target < lo:
        return Proposal(lo, f"{p.reason}; {show(ready)} ready < min_capacity {show(lo)}: at least {show(lo)}")
    return p


def _from_utilisation(util: Utilisation, policy: ScalingPolicy, T: Fraction, W: Fraction) -> Proposal:
    r, u, s = util.most_constrained, util.value, policy.setpoint
    sizing = W * u / s
    wanted = Fraction(ceil(sizing))
    formula = f"ceil({show(W)} × {percent(u)} / {percent(s)}) = {show(wanted)}"
    compare = ">" if u > s else "<" if u < s else "="
    removal = policy.escalator_removal
    if removal is None or u > s:
        return Proposal(wanted, f"{r} {percent(u)}% {compare} setpoint {percent(s)}%: {formula}")
    # Escalator's scale-down by removal rates, floored so that utilisation stays at most the setpoint
    if u < removal.lower:
        rate, name, edge = removal.fast, "fast_node_removal_rate", f"taint_lower {percent(removal.lower)}%"
    elif u < removal.upper:
        rate, name, edge = removal.slow, "slow_node_removal_rate", f"taint_upper {percent(removal.upper)}%"
    else:
        return Proposal(
            T,
            f"{r} {percent(u)}% between taint_upper {percent(removal.upper)}% and setpoint {percent(s)}%: "
            f"keep target {show(T)}",
        )
    target = max(W - rate, wanted)
    return Proposal(
        target,
        f"{r} {percent(u)}% < {edge}: remove {name} {show(rate)}, at most down to {formula}: "
        f"max({show(W)} − {show(rate)}, {show(wanted)}) = {show(target)}",
    )


def _from_zero_ready(view: PoolView, util: Utilisation, policy: ScalingPolicy, T: Fraction) -> Proposal:
    """No ready capacity to measure: size from the node size if known, else wait or probe."""
    unit, source = _unit_resources(view, policy)
    s = policy.setpoint
    best: tuple[int, str] | None = None
    for r in RESOURCE_NAMES:
        per_unit = unit.get(r, ZERO)
        if r in util.load and util.load[r] > 0 and per_unit > 0:
            size = ceil(util.load[r] / (per_unit * s))
            text = f"{r} {show(util.load[r])} / ({show(per_unit)} per unit × {percent(s)}%) → {size}"
            if best is None or size > best[0]:
                best = (size, text)
    if best is None:
        if T > 0:
            return Proposal(T, f"no ready nodes yet: keep target {show(T)} while it joins")
        return Proposal(Fraction(1), "no ready nodes and no node size known: one probe unit → 1")
    size, text = best
    if size < T:
        return Proposal(T, f"no ready nodes ({source}): {text}; keep target {show(T)} while it joins")
    return Proposal(Fraction(size), f"no ready nodes ({source}): {text}")


def _unit_resources(view: PoolView, policy: ScalingPolicy) -> tuple[dict[str, Fraction], str]:
    measured = view.unit_resources()
    if measured:
        return measured, "node size from tainted/cordoned nodes"
    sizes = [g.node_resources for g in view.live_groups if any(g.node_resources)]
    if sizes:
        # the smallest unit over the groups, per resource: a new unit may land in any of them
        return {r: min(exact(s[r]) for s in sizes) for r in RESOURCE_NAMES}, "node size from the groups"
    if any(policy.unit_resources):
        return {r: exact(v) for r, v in policy.unit_resources.items()}, "node size from cpus_per_weight"
    return {}, ""


def _within_margin(p: Proposal, T: Fraction, margin: Fraction) -> Proposal:
    """Clusterman's target_capacity_margin, on scale-down only: ignore a decrease smaller than margin × T.

    A scale-up is never held back: a margin that swallows increases leaves demand unmet until it
    grows past the band. Inside the band the result is T itself, nothing added to it: an offset
    applied on top of a kept target is how Clusterman's capacity offset crept up run after run.
    """
    if T > 0 and p.target < T and (T - p.target) / T < margin:
        return Proposal(T, f"{p.reason}, within margin {percent(margin)}% of target {show(T)}: keep {show(T)}")
    return p


def _within_band(p: Proposal, T: Fraction, spare: Spare) -> Proposal:
    """With ``spare``: ignore a decrease while the target is no more than the spare above what is
    asked (spare.py): the free room stays within one more spare."""
    if T > 0 and p.target < T and T - p.target <= spare.units:
        return Proposal(
            T,
            f"{p.reason}, within the spare's band ({show(spare.amount)} {spare.resource}) of target {show(T)}: "
            f"keep {show(T)}",
        )
    return p

"""Capacity asked for and not yet joined (docs/scaling.md, "While nodes join").

Instances join a join delay after launch, each at its own time, and pending pods run on the first
ones to join. So a scale-up for pending pods that asks for exactly what they need leaves them
waiting for the slowest instance. ``scale_up_hedge`` asks for that share more: enough instances
join early. Once the pods run the rest are given back: terminated while still joining, or as
empty nodes once joined. A rise of less than ``HEDGE_MIN_NODES`` nodes is not hedged: the first of
two instances joins on average 0.56 standard deviations of the join delay sooner than one (17 s
for 180 ± 30 s), less than a run, and noise of a node or so comes and goes before either joins;
the slowest of n instances comes later as n grows (1.5 deviations after the mean at 10).

While pods wait and an instance launched less than ``JOIN_WAIT_SECONDS`` ago has not joined, the
target is not lowered: the capacity is needed, and a sizing that dips meanwhile (the margin, a
noisy forecast) would take it from the pods about to run. Once the pods run, the target follows
the sizing again, joining instances or not.

Pure: the proposal, the pool's view and the time in; a proposal out.
"""

from __future__ import annotations

from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.decision.exact import ceil
from clusterman.decision.exact import percent
from clusterman.decision.exact import show
from clusterman.decision.pool_view import PoolView
from clusterman.decision.target import Proposal

JOIN_WAIT_SECONDS = 600.0  # an instance not joined this long after launch is not waited for
HEDGE_MIN_NODES = 2  # a smaller rise is not hedged (module doc)


def hedged(proposal: Proposal, view: PoolView, hedge: Fraction, pods_waiting: bool) -> Proposal:
    """The proposal with ``hedge`` × its rise above the capacity there is (ready, or asked for
    before) added, when pods wait for it."""
    if not hedge or not pods_waiting:
        return proposal
    rise = proposal.target - max(view.target, view.ready_total)
    if rise <= 0 or _in_nodes(rise, view) < HEDGE_MIN_NODES:
        return proposal
    more = ceil(rise * hedge)
    return Proposal(
        proposal.target + more,
        f"{proposal.reason}; hedge +{more} for the join delay's spread "
        f"(scale_up_hedge {percent(hedge)}% of {show(rise)})",
        proposal.asked,
    )


def _in_nodes(units: Fraction, view: PoolView) -> Fraction:
    """``units`` of weight in nodes of the ready nodes' mean weight (in units without ready nodes)."""
    W = view.ready_total
    return units * len(view.ready) / W if W > 0 else units


def held_while_joining(proposal: Proposal, view: PoolView, now: float, top: Fraction) -> Proposal:
    """The proposal, or the current target when it is lower while pods wait and instances are
    still joining; a target above ``top`` (max_capacity) is not held there."""
    joining = [n for n in view.orphans if n.launched_at != NO_TIME and now - n.launched_at < JOIN_WAIT_SECONDS]
    kept = min(view.target, top)
    if proposal.target >= kept or not joining:
        return proposal
    return Proposal(
        kept,
        f"{proposal.reason}; pods wait for {len(joining)} launched nodes still joining: keep target {show(kept)}",
        proposal.asked,
    )

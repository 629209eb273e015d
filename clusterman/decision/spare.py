"""The spare: what the signals ask for above the pods' own requests (docs/scaling.md, "The spare").

The default signal sizes it from the forecast's measured errors over the join horizon
(docs/forecast_headroom.md). With ``spare`` on, the decision keeps that spare in two ways:
  places  the spare is the room for the pods that arrive before a node could join. The share of
          it that comes as large pods (larger than half the pool's largest: the pods' own mix,
          read off a sample of ready nodes) needs whole places for the largest pod; the rest
          fits in the pieces. So the places kept are ceil(spare × share / slot), at least
          ``slot_reserve``: counted inside the spare, not added on top, and room split into
          pieces no large pod fits does not pass for them (slots.py counts them)
  band    a scale-down waits while the target is no more than the spare above what is asked:
          a request that moves within its own spread changes no target. Measured, not a timer:
          the band is as wide as the spare the errors called for.

Pure: the view, the utilisation and the pods' requests in; a value out.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import ResourceRequest
from clusterman.decision.exact import MICRO
from clusterman.decision.exact import ZERO
from clusterman.decision.exact import exact
from clusterman.decision.fit import Need
from clusterman.decision.pool_view import PoolView
from clusterman.decision.utilisation import Utilisation


@dataclass(frozen=True)
class Spare:
    """The signals' request above the pods, in the most constrained resource."""

    resource: str
    amount: Fraction  # in the resource's units, at least 0
    units: Fraction  # the same in weight units of the ready nodes
    large: Fraction = Fraction(1)  # the share of the pods' request in pods that need a whole place

    def places(self, slot: Need | None) -> int:
        """Whole places for ``slot`` in the spare's share that comes as large pods (0 when the slot
        does not ask for its resource)."""
        d = RESOURCE_NAMES.index(self.resource)
        if slot is None or slot[d] <= 0:
            return 0
        return -(-int(self.amount * self.large * MICRO) // slot[d])


SAMPLE = 64  # ready nodes whose pods tell the share of large pods


def large_share(view: PoolView, resource: str, slot: Need | None) -> Fraction:
    """The share of the pods' request (on up to ``SAMPLE`` ready nodes) in pods larger than half
    the slot: those that need a whole place; 1 when there is none to tell."""
    d = RESOURCE_NAMES.index(resource)
    if slot is None or slot[d] <= 0:
        return Fraction(1)
    half = slot[d] / (2 * MICRO)
    total = large = 0.0
    for node in view.ready[:SAMPLE]:
        for t in node.workload():
            v = t.requests[resource]
            total += v
            if v > half:
                large += v
    return exact(large / total) if total > 0 else Fraction(1)


def spare_of(view: PoolView, util: Utilisation, pods: ResourceRequest, slot: Need | None = None) -> Spare | None:
    """The spare of this run; None without a resource to measure it in."""
    r = util.most_constrained
    own = pods.opinions().get(r)
    if not r or r not in util.demand or own is None:
        return None
    amount = max(util.demand[r] - exact(own), ZERO)
    capacity = view.capacity.get(r, ZERO)
    units = amount * view.ready_total / capacity if capacity > 0 else ZERO
    return Spare(r, amount, units, large_share(view, r, slot))

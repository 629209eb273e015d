"""The spare: what the signals ask for above the pods' own requests (docs/scaling.md, "The spare").

The default signal sizes it from the forecast's measured errors over the join horizon, at the
newsvendor's quantile (docs/forecast_headroom.md). With ``spare`` on, the decision adds no cushion
of its own and keeps that one spare in two ways:
  places  the spare is the room for the pods that arrive before a node could join, the largest
          among them: it is kept as whole places for the pool's largest pod, floor(spare / slot)
          of them (at least ``slot_reserve``), so that room split into pieces no pod fits does
          not pass for spare (slots.py counts them)
  band    a scale-down waits while the target is no more than the spare above what is asked:
          the free room then stays between one and two spares, and a request that moves within
          its own spread changes no target. Measured, not a timer: the band is as wide as the
          errors the spare was sized from.

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

    def places(self, slot: Need | None) -> int:
        """Whole places for ``slot`` in the spare (0 when the slot does not ask for its resource)."""
        d = RESOURCE_NAMES.index(self.resource)
        if slot is None or slot[d] <= 0:
            return 0
        return int(self.amount * MICRO // slot[d])


def spare_of(view: PoolView, util: Utilisation, pods: ResourceRequest) -> Spare | None:
    """The spare of this run; None without a resource to measure it in."""
    r = util.most_constrained
    own = pods.opinions().get(r)
    if not r or r not in util.demand or own is None:
        return None
    amount = max(util.demand[r] - exact(own), ZERO)
    capacity = view.capacity.get(r, ZERO)
    units = amount * view.ready_total / capacity if capacity > 0 else ZERO
    return Spare(r, amount, units)

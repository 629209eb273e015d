"""The scaling decision, as pure code: ``decide(snapshot, requests, policy, state, now) -> Decision``."""

from clusterman.autoscaler.decide import decide
from clusterman.autoscaler.decision import Action
from clusterman.autoscaler.decision import Decision
from clusterman.autoscaler.decision import Reason
from clusterman.autoscaler.demand import demand_from_snapshot
from clusterman.autoscaler.policy import ScalingPolicy
from clusterman.autoscaler.pool_view import SnapshotError
from clusterman.autoscaler.state import AutoscalerState

__all__ = [
    "Action",
    "AutoscalerState",
    "Decision",
    "Reason",
    "ScalingPolicy",
    "SnapshotError",
    "decide",
    "demand_from_snapshot",
]

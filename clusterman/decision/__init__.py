"""The scaling decision, as pure code: ``decide(snapshot, requests, policy, state, now, holds) -> Decision``."""

from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.decision.decide import decide
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import SnapshotError
from clusterman.decision.result import Action
from clusterman.decision.result import Decision
from clusterman.decision.result import Reason

__all__ = [
    "Action",
    "AutoscalerState",
    "Decision",
    "Hold",
    "HoldReason",
    "Reason",
    "ScalingPolicy",
    "SnapshotError",
    "decide",
    "demand_from_snapshot",
]

"""The scaling decision, as pure code: ``decide(snapshot, requests, policy, state, now, holds) -> Decision``."""

from clusterman.decision.decide import decide
from clusterman.decision.decision import Action
from clusterman.decision.decision import Decision
from clusterman.decision.decision import Reason
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.holds import Hold
from clusterman.decision.holds import HoldReason
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.pool_view import SnapshotError
from clusterman.decision.state import AutoscalerState

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

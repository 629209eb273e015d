"""Why a run must not shrink the pool: a reason a program can test, and the words people read.

The run gathers its holds (what it could not read or write) and passes them to ``decide``, which
adds its own (capacity lost since the last run). Any hold blocks scale-down; ``shown`` joins their
words for the explanation, and only there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class HoldReason(enum.Enum):
    STATE_NOT_VALID = "state_not_valid"  # the stored autoscaler state was replaced
    METRICS_NOT_WRITTEN = "metrics_not_written"  # the signals read older data
    SCHEDULER_STALE = "scheduler_stale"  # the scheduler's view may be old
    SIGNALS_STALE = "signals_stale"  # the signals' input is too old
    GROUPS_UNREADABLE = "groups_unreadable"  # some of the pool's capacity is not known
    CAPACITY_LOSS = "capacity_loss"  # more nodes lost since the last run than the policy allows
    NODE_MIGRATION = "node_migration"  # a node migration runs with disable_autoscaling


@dataclass(frozen=True)
class Hold:
    reason: HoldReason
    text: str  # shown in the decision's explanation


def shown(holds: Iterable[Hold]) -> str:
    """The holds as one phrase for people ("" when there are none)."""
    return "; ".join(h.text for h in holds)

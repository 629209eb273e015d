"""What one decision hands to the next: the scale lock, the breaker and the capacity-loss memory.

The autoscaler loop (and the simulator) keeps the ``AutoscalerState`` a decision returns and passes
it to the next call; ``decide`` itself keeps nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

from clusterman.autoscaler.breaker import Breaker
from clusterman.autoscaler.loss_guard import NodeMemory
from clusterman.autoscaler.scale_lock import ScaleLock
from clusterman.cluster.model import NO_TIME


@dataclass(frozen=True)
class AutoscalerState:
    scale_lock: ScaleLock = field(default_factory=ScaleLock)
    breaker: Breaker = field(default_factory=Breaker)
    memory: NodeMemory = field(default_factory=NodeMemory)

    def as_json(self) -> dict[str, Any]:
        lock, breaker = self.scale_lock, self.breaker
        return {
            "scale_lock": {"until": _time(lock.until), "requested": lock.requested},
            "breaker": {
                "failures": breaker.failures,
                "awaiting": breaker.awaiting,
                "opened_at": _time(breaker.opened_at),
            },
            "memory": {"joined": sorted(self.memory.joined), "terminating": sorted(self.memory.terminating)},
        }


def _time(value: float) -> float | None:
    return None if value == NO_TIME else value

"""What one decision hands to the next: the scale lock, the breaker, the capacity-loss memory,
what consolidation remembers (its candidates, evictions and nodes drained to be kept) and the
drain machinery's record (nodes leaving for a notice, drain steps, drains given up).

The autoscaler loop (and the simulator) keeps the ``AutoscalerState`` a decision returns and passes
it to the next call; ``decide`` itself keeps nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from clusterman.core.model import NO_TIME
from clusterman.core.stored import is_amount
from clusterman.decision.breaker import Breaker
from clusterman.decision.disruption import DisruptionState
from clusterman.decision.drains import DrainState
from clusterman.decision.loss_guard import NodeMemory
from clusterman.decision.scale_lock import ScaleLock


@dataclass(frozen=True)
class AutoscalerState:
    scale_lock: ScaleLock = field(default_factory=ScaleLock)
    breaker: Breaker = field(default_factory=Breaker)
    memory: NodeMemory = field(default_factory=NodeMemory)
    disruption: DisruptionState = field(default_factory=DisruptionState)
    drains: DrainState = field(default_factory=DrainState)

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
            "disruption": self.disruption.as_json(),
            "drains": self.drains.as_json(),
        }

    @staticmethod
    def from_json(data: Any) -> AutoscalerState:
        """The inverse of ``as_json``, for state kept between runs; ValueError naming the bad field."""
        lock, breaker, memory = (_part(data, name) for name in ("scale_lock", "breaker", "memory"))
        failures = _number(breaker, "breaker.failures")
        if failures != int(failures):
            raise ValueError(f"breaker.failures: expected a whole number, got {failures!r}")
        return AutoscalerState(
            ScaleLock(_when(lock, "scale_lock.until"), _number(lock, "scale_lock.requested")),
            Breaker(int(failures), _number(breaker, "breaker.awaiting"), _when(breaker, "breaker.opened_at")),
            NodeMemory(_ids(memory, "memory.joined"), _ids(memory, "memory.terminating")),
            DisruptionState.from_json(data.get("disruption")),
            DrainState.from_json(data.get("drains")),
        )


def _time(value: float) -> float | None:
    return None if value == NO_TIME else value


def _part(data: Any, name: str) -> Mapping[str, Any]:
    part = data.get(name) if isinstance(data, Mapping) else None
    if not isinstance(part, Mapping):
        raise ValueError(f"{name}: expected an object, got {part!r}")
    return part


def _number(part: Mapping[str, Any], where: str) -> float:
    value = part.get(where.rpartition(".")[2])
    if not is_amount(value):
        raise ValueError(f"{where}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _when(part: Mapping[str, Any], where: str) -> float:
    """A time, or null for "never" (NO_TIME)."""
    return NO_TIME if part.get(where.rpartition(".")[2]) is None else _number(part, where)


def _ids(part: Mapping[str, Any], where: str) -> frozenset[str]:
    value = part.get(where.rpartition(".")[2])
    if not isinstance(value, list) or not all(isinstance(i, str) for i in value):
        raise ValueError(f"{where}: expected a list of node ids, got {value!r}")
    return frozenset(value)

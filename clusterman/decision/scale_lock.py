"""Escalator's scale lock, as a value carried from one decision to the next.

Taken when a decision raises the cloud target (if ``scale_up_cool_down_period`` > 0). While it is
held the decision changes nothing: no further scale-up, no scale-down, no deletion. It is released
when the cool-down period has passed or, earlier, when the capacity it asked for is ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.decision.exact import exact


@dataclass(frozen=True)
class ScaleLock:
    until: float = NO_TIME  # Unix seconds; NO_TIME: not locked
    requested: float = 0.0  # ready capacity (weight units, live groups) the scale-up asked for

    def held(self, now: float, ready: Fraction) -> bool:
        return self.until != NO_TIME and now < self.until and ready < exact(self.requested)

    @staticmethod
    def take(now: float, cool_down_seconds: float, requested: Fraction) -> ScaleLock:
        if cool_down_seconds <= 0:
            return ScaleLock()
        return ScaleLock(until=now + cool_down_seconds, requested=float(requested))

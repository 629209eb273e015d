"""A breaker for scale-ups whose capacity never arrives (Escalator's ``scale_up_failure_threshold``).

A scale-up counts as failed when the next one is evaluated before the ready capacity reached what
the previous one asked for. After ``threshold`` failures in a row the breaker opens: the decision
stops raising the cloud target (untainting still happens: that capacity is already running). After
``cooldown`` seconds open it lets one probe scale-up through. Capacity reaching the asked-for level
closes it; so does a scale-down, which withdraws the request. A value carried between decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from clusterman.core.model import NO_TIME
from clusterman.decision.exact import exact


@dataclass(frozen=True)
class Breaker:
    failures: int = 0  # scale-ups in a row whose capacity had not arrived by the next one
    awaiting: float = 0.0  # ready capacity the last scale-up asked for and has not seen (0: none)
    opened_at: float = NO_TIME

    @property
    def is_open(self) -> bool:
        return self.opened_at != NO_TIME

    def observe(self, ready: Fraction) -> Breaker:
        """Close and reset once the awaited capacity is ready."""
        if self.awaiting and ready >= exact(self.awaiting):
            return Breaker()
        return self

    def withdraw(self) -> Breaker:
        """A scale-down: nothing is awaited any more."""
        return Breaker()

    def try_raise(self, requested: Fraction, now: float, threshold: int, cooldown: float) -> tuple[bool, Breaker]:
        """May the cloud target be raised to ``requested``? And the breaker after the attempt."""
        if threshold <= 0:
            return True, self
        failures = self.failures + (1 if self.awaiting else 0)
        if failures < threshold:
            return True, Breaker(failures, float(requested))
        if self.is_open and now - self.opened_at >= cooldown:
            return True, Breaker(failures, float(requested), opened_at=now)  # the half-open probe
        if self.is_open:
            return False, self
        return False, Breaker(failures, self.awaiting, opened_at=now)

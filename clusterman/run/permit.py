"""Whether this run may act: the one place that asks the pool's lease and the run's budget.

A run that does not hold the pool's lease reads nothing and changes nothing (``standby``). A run
whose snapshot is older than its budget when it is about to act holds instead (``overrun``), so
nothing is ever done on old inputs. While a run reads and acts, its lease is renewed once a third
of it is used: a run that makes progress keeps it, one stuck in a call loses it. ``apply`` asks
the same permit between its stages, and a drain before each eviction, and stops when it says no
(the inputs grew older than the budget, the lease was lost or lapsed meanwhile: a process stopped
or stuck that long may find the pool changed by another); the next holder decides afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from clusterman.core.timestamps import format_time
from clusterman.run.report import Outcome
from clusterman.state.lease import LeaseStatus
from clusterman.state.lease import PoolLease

KeepLease = Callable[[float, bool], "LeaseStatus | None"]  # (now, hand over to an operator who asked?)


@dataclass(frozen=True)
class Refusal:
    outcome: Outcome  # STANDBY or OVERRUN
    message: str
    lease_error: str = ""  # the lease could not be read: worth an error event


class Permit:
    """One run's permit. ``lease`` is None when no other autoscaler can be in the way (no lease, or
    a dry run, which changes nothing); ``keep`` claims or renews the lease and says who holds it."""

    def __init__(
        self,
        now: float,
        *,
        lease: PoolLease | None = None,
        keep: KeepLease = lambda now, hand_over: None,
        budget_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.now = now
        self._lease = lease
        self._keep = keep
        self._budget = budget_seconds
        self._clock = clock
        self._started = clock()
        self._read_at = self._started

    def at(self) -> float:
        """``now`` moved on by the time this run has taken."""
        return self.now + (self._clock() - self._started)

    def claim(self) -> Refusal | None:
        """At the run's start: the lease is claimed (or handed to an operator's command that asked)."""
        status = self._keep(self.now, True)
        if status is None or status.held:
            return None
        return Refusal(Outcome.STANDBY, f"not acting: the pool's lease {status.describe()}", status.error)

    def reading(self) -> None:
        """The pool is read from now on: the budget counts the inputs' age from here."""
        self._read_at = self._clock()

    def going_on(self) -> None:
        """After a slow step of reading: the lease is renewed once a third of it is used, so a run
        that makes progress keeps it. Whether it is still ours is asked before acting
        (``acting``), where a run that lost it refuses."""
        self._still_ours()

    def still_acting(self) -> Refusal | None:
        """Between the steps of acting (each eviction too): the inputs are no older than the
        budget and the lease is still ours, so a run stopped or stuck meanwhile acts no further."""
        age = self._clock() - self._read_at
        if self._budget is not None and age > self._budget:
            return Refusal(Outcome.OVERRUN, f"the snapshot is {age:.1f} s old > budget {self._budget:g} s")
        return self._still_ours()

    def _still_ours(self) -> Refusal | None:
        """The lease, renewed once a third of it is used: None while it is ours."""
        at = self.at()
        if self._lease is None:
            return None
        last = self._lease.last
        if last is not None and last.held and last.expires_at - at > self._lease.ttl_seconds * 2 / 3:
            return None
        return self._renewed(at)

    def acting(self) -> Refusal | None:
        """Right before acting: the inputs are no older than the budget, and the lease renewed now."""
        at = self.at()
        age = self._clock() - self._read_at
        if self._budget is not None and age > self._budget:
            old = f"the snapshot is {age:.1f} s old > budget {self._budget:g} s"
            return Refusal(Outcome.OVERRUN, f"{old}: nothing changed, the next run reads afresh")
        if self._lease is None:
            return None
        return self._renewed(at)

    def _renewed(self, at: float) -> Refusal | None:
        """Renew the lease at ``at``. A lease that ran out before the store's answer came (a slow
        answer, a process stopped meanwhile) was not ours all along, renewed or not: another
        autoscaler may have held it and acted meanwhile, or hold it now."""
        assert self._lease is not None
        last = self._lease.last
        refusal = self._held(self._keep(at, False))
        answered = self.at()
        if refusal is None and last is not None and last.held and not last.covers(answered):
            late = answered - at
            why = f" (its renewal was answered {late:.1f} s after it was sent)" if last.expires_at > at else ""
            return Refusal(
                Outcome.STANDBY, f"the pool's lease lapsed at {format_time(last.expires_at)} during the run{why}"
            )
        return refusal

    @staticmethod
    def _held(status: LeaseStatus | None) -> Refusal | None:
        if status is None or status.held:
            return None
        return Refusal(Outcome.STANDBY, f"not acting: the pool's lease {status.describe()}")

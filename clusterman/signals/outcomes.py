"""Each app's signal as of the last run: answered, or on the default signal and why, since when.

The autoscaler keeps one ``SignalOutcomes`` and serves it in its ``/healthz`` body, so ``clusterman
status`` shows a failing signal and calls the autoscaler ``degraded`` while an app is on its
fallback. A signal that keeps failing is otherwise seen only in the event history and a counter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import replace
from typing import Any

from clusterman.core.timestamps import format_time
from clusterman.core.timestamps import parse_time
from clusterman.signals.evaluator import Evaluation

ALL_APPS = "*"  # the entry for a run in which no signal gave a usable answer at all


@dataclass(frozen=True)
class SignalOutcome:
    app: str
    signal: str  # the app's own signal ("ns.Name"); for ALL_APPS, ""
    answered_by: str  # the signal whose answer was used; "" when none was
    cause: str  # why the app's own signal was not used ("" when it was)
    since: float  # Unix seconds: the first run of the current streak of this kind (ok or not)

    @property
    def ok(self) -> bool:
        return not self.cause

    def describe(self) -> str:
        since = format_time(self.since)
        if self.app == ALL_APPS:
            return f"no signal answered since {since}, target kept: {self.cause}"
        if self.ok:
            return f"app {self.app}: {self.signal} ok since {since}"
        return f"app {self.app}: {self.signal} failed, on {self.answered_by} since {since}: {self.cause}"

    def as_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "signal": self.signal,
            "outcome": "ok" if self.ok else "fallback" if self.answered_by else "no answer",
            "answered_by": self.answered_by or None,
            "cause": self.cause or None,
            "since": format_time(self.since),
        }

    @staticmethod
    def from_json(doc: Any) -> SignalOutcome:
        """What ``as_json`` wrote (``ValueError`` when it is not that)."""
        if not isinstance(doc, dict):
            raise ValueError(f"a signal outcome must be an object, got {type(doc).__name__}")
        return SignalOutcome(
            str(doc.get("app", "")),
            str(doc.get("signal") or ""),
            str(doc.get("answered_by") or ""),
            str(doc.get("cause") or ""),
            parse_time(doc.get("since"), "since"),
        )


def short_cause(evaluation: Evaluation, limit: int = 80) -> str:
    """The reason without the signal's name (the line names the app), in a few words."""
    reason = evaluation.fallback_reason.removeprefix(f"signal {evaluation.failed_signal} (app {evaluation.app}): ")
    reason = reason.removeprefix("the signal failed: ")
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


class SignalOutcomes:
    """Updated once per run by the autoscaler's thread, read by the event API's: each update
    replaces the whole mapping, so a reader never sees half a run."""

    def __init__(self) -> None:
        self._by_app: dict[str, SignalOutcome] = {}

    def observe(self, evaluations: Iterable[Evaluation], now: float) -> None:
        """One run's answers, one per app."""
        self._by_app = {e.app: self._next(self._outcome(e, now)) for e in evaluations}

    def no_answer(self, cause: str, now: float) -> None:
        """A run in which no usable answer came at all (the default signal failed too)."""
        self._by_app = {ALL_APPS: self._next(SignalOutcome(ALL_APPS, "", "", cause, now))}

    def _next(self, outcome: SignalOutcome) -> SignalOutcome:
        """The outcome with the ``since`` of the streak it continues."""
        before = self._by_app.get(outcome.app)
        if before is not None and before.ok == outcome.ok and before.signal == outcome.signal:
            return replace(outcome, since=before.since)
        return outcome

    @staticmethod
    def _outcome(e: Evaluation, now: float) -> SignalOutcome:
        if e.is_fallback:
            return SignalOutcome(e.app, e.failed_signal, e.signal, short_cause(e, limit=300), now)
        return SignalOutcome(e.app, e.signal, e.signal, "", now)

    @property
    def outcomes(self) -> tuple[SignalOutcome, ...]:
        return tuple(sorted(self._by_app.values(), key=lambda o: o.app))

    def degraded(self) -> list[str]:
        """Why the autoscaler scales on something else than the pools' own signals ([] when it does not)."""
        return [o.describe() for o in self.outcomes if not o.ok]

    def health(self) -> dict[str, Any]:
        """For the ``/healthz`` body: not a liveness problem (a restart does not mend a signal)."""
        return {"signals": [o.as_json() for o in self.outcomes], "degraded": self.degraded()}

"""Evaluate every signal of a pool for one autoscaling run, falling back to the default signal.

Each application gets one request: from its own signal, or, when that signal cannot be reached,
answers badly or does not answer in time, from the default signal (the failure is logged and
counted). A pool with no application signals is scaled on the default signal alone.

The signals of one run share ``signal_seconds`` (half the run's budget, see ``run/budget.py``),
and a quarter of it is kept for the default signal until it has answered: a stopped or hung
runner costs its app the fallback, not the run. (Each wait had the whole budget, twice with the
reconnect, so one hung app signal made every run overrun and hold: the pool was not scaled at
all until the runner was restarted by hand.)
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

from clusterman.core.config import PoolIdentity
from clusterman.core.resources import ResourceRequest
from clusterman.datastore.store import MetricsStore
from clusterman.decision.answer_bound import NO_BOUNDS
from clusterman.decision.answer_bound import AnswerBounds
from clusterman.signals.client import SignalClient
from clusterman.signals.metrics_window import read_required_metrics
from clusterman.signals.protocol import AnswerRefused
from clusterman.signals.protocol import SignalError
from clusterman.signals.protocol import SignalUnanswered
from clusterman.signals.specs import SignalSpec

log = logging.getLogger(__name__)


class Signal(Protocol):
    """One signal as the evaluator uses it: a ``SignalClient`` to a runner process, or an
    ``InProcessSignal`` (the simulator). Both validate the answer the same way (``parse_reply``)."""

    def evaluate(self, metrics: Mapping[str, Any], timestamp: float, timeout: float | None = None) -> ResourceRequest:
        """The signal's request; SignalError when it cannot give a usable one within ``timeout``
        seconds, all attempts together (None: the signal's own limits)."""
        ...

    def close(self) -> None: ...


ClientFactory = Callable[[SignalSpec], Signal]


@dataclass(frozen=True)
class Evaluation:
    app: str
    request: ResourceRequest
    signal: str  # the signal that answered, e.g. "clusterman.MostRecentResources"
    latency_seconds: float
    fallback_reason: str = ""  # why the default signal answered for this app ("" when it did not)
    failed_signal: str = ""  # the app's own signal, when it failed and the default answered

    @property
    def is_fallback(self) -> bool:
        return bool(self.fallback_reason)


class _Share:
    """The time one run's signals (their metrics read included) have left; a quarter of it can be
    kept for the default signal."""

    KEPT = 0.25

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.end = math.inf if seconds is None else time.monotonic() + seconds

    def left(self, keep_for_default: bool = False) -> float | None:
        if self.seconds is None:
            return None
        return self.end - time.monotonic() - (self.seconds * self.KEPT if keep_for_default else 0.0)


UNBOUNDED = _Share(None)


class SignalEvaluator:
    def __init__(
        self,
        identity: PoolIdentity,
        default: SignalSpec,
        apps: Sequence[SignalSpec],
        client_factory: ClientFactory | None = None,
        signal_seconds: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``signal_seconds``: all the signals of one run together (None: each call its own limits)."""
        self.identity = identity
        self.default = default
        self.apps = list(apps)
        self._factory = client_factory or self._make_client
        self._clients: dict[str, Signal] = {}
        self.failures: Counter[str] = Counter()
        self.signal_seconds = signal_seconds
        # app -> (since when, the last run in which) its runner did not answer in time, since it
        # last did. "Since when" is this run's time less the silence, measured on ``monotonic``,
        # so a wall clock stepped back cannot put it in the future and hide a hung runner.
        self.unanswered: dict[str, tuple[int, int]] = {}
        self._silent_since: dict[str, float] = {}  # app -> monotonic
        self.monotonic = monotonic

    def _make_client(self, spec: SignalSpec) -> SignalClient:
        return SignalClient(spec.address, self.identity.cluster, self.identity.pool, spec.config.parameters)

    def _client(self, spec: SignalSpec) -> Signal:
        if spec.app not in self._clients:
            self._clients[spec.app] = self._factory(spec)
        return self._clients[spec.app]

    def evaluate_one(
        self,
        spec: SignalSpec,
        store: MetricsStore,
        now: int,
        share: _Share = UNBOUNDED,
        keep: bool = False,
        bounds: AnswerBounds = NO_BOUNDS,
    ) -> Evaluation:
        """Raises SignalError (the signal failed, answered more than ``bounds`` allow, or the run's
        ``share`` of time is gone) or MetricsError (its metrics could not be read). ``keep``: leave
        the default signal its part."""
        metrics = read_required_metrics(store, spec.config.required_metrics, spec.app, self.identity, now)
        timeout = share.left(keep)
        if timeout is not None and timeout <= 0:
            raise SignalError(
                f"signal {spec.namespace}.{spec.name} (app {spec.app}): not asked: the run's "
                f"{share.seconds:g} s for signals went to signals that did not answer"
            )
        started = time.monotonic()
        try:
            request = self._client(spec).evaluate(metrics, now, timeout=timeout)
        except SignalUnanswered:  # silent, or refusing: restarted by the tree alike
            first = self._silent_since.setdefault(spec.app, self.monotonic())
            self.unanswered[spec.app] = (now - round(self.monotonic() - first), now)
            raise
        self.unanswered.pop(spec.app, None)
        self._silent_since.pop(spec.app, None)
        refused = bounds.refusal(request)
        if refused:
            raise AnswerRefused(f"signal {spec.namespace}.{spec.name} (app {spec.app}): {refused}")
        return Evaluation(spec.app, request, f"{spec.namespace}.{spec.name}", time.monotonic() - started)

    def evaluate(self, store: MetricsStore, now: int, bounds: AnswerBounds = NO_BOUNDS) -> list[Evaluation]:
        """One request per app. Raises SignalError only when the default signal fails when needed."""
        share = _Share(self.signal_seconds)
        if not self.apps:
            return [self.evaluate_one(self.default, store, now, share, bounds=bounds)]
        results: list[Evaluation] = []
        default_answer: Evaluation | None = None
        for spec in self.apps:
            try:
                results.append(self.evaluate_one(spec, store, now, share, default_answer is None, bounds))
                continue
            except SignalError as e:
                reason = str(e)
            self.failures[spec.app] += 1
            log.warning("%s; using the default signal for app %s", reason, spec.app)
            if default_answer is None:
                default_answer = self.evaluate_one(self.default, store, now, share, bounds=bounds)
            results.append(
                Evaluation(
                    spec.app,
                    default_answer.request,
                    default_answer.signal,
                    default_answer.latency_seconds,
                    reason,
                    f"{spec.namespace}.{spec.name}",
                )
            )
        return results

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

"""Where a run's requests come from: the pool's signals (over their sockets), or the scheduler.

A pool whose signal is ``internal: true`` runs no signal process: its one request is what the
snapshot's running and pending work asks for, under the default signal's app name. Every other
pool asks its signals, reading their metrics from the store; failures fall back to the default
signal (``SignalEvaluator``). When the signals were given metrics but not one point in their
windows (the newest point is older than the window: the collector stopped, the store became
unwritable), the answer is marked ``stale`` and the run does not scale down on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from clusterman.core.config import MetricType
from clusterman.core.model import PoolSnapshot
from clusterman.core.resources import ResourceRequest
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import Series
from clusterman.decision.answer_bound import NO_BOUNDS
from clusterman.decision.answer_bound import answer_bounds
from clusterman.decision.demand import INTERNAL_APP
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.policy import ScalingPolicy
from clusterman.signals.evaluator import Evaluation
from clusterman.signals.evaluator import SignalEvaluator

__all__ = ["INTERNAL_APP", "DemandSource", "InternalDemand", "Requests", "SignalDemand"]


@dataclass(frozen=True)
class Requests:
    by_app: dict[str, ResourceRequest]
    evaluations: tuple[Evaluation, ...] = ()  # how each app's request was obtained (for the record)
    stale: str = ""  # why the signals' input is too old to shrink the pool on ("" when it is not)


class DemandSource(Protocol):
    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        """Raises SignalError or MetricsError when there is no usable answer at all."""

    def unanswered(self) -> dict[str, tuple[int, int]]:
        """App -> the first and the last run (Unix seconds) in which its signal's runner did not
        answer in time, since it last did."""

    def close(self) -> None: ...


class SignalDemand:
    """``policy``: the pool's, for the bound on an answer (``decision/answer_bound.py``); without
    it, only what no pool holds is refused."""

    def __init__(self, evaluator: SignalEvaluator, store: MetricsStore, policy: ScalingPolicy | None = None) -> None:
        self.evaluator = evaluator
        self.store = store
        self.policy = policy

    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        watched = _WatchedStore(self.store)
        bounds = answer_bounds(snapshot, self.policy) if self.policy is not None else NO_BOUNDS
        evaluations = self.evaluator.evaluate(watched, now, bounds)
        stale = ""
        if watched.reads and watched.newest is None:
            stale = f"no metric point in the signals' windows ({watched.reads} series read, all empty): input stale"
        return Requests({e.app: e.request for e in evaluations}, tuple(evaluations), stale)

    def unanswered(self) -> dict[str, tuple[int, int]]:
        return dict(self.evaluator.unanswered)

    def close(self) -> None:
        self.evaluator.close()
        self.store.close()


class InternalDemand:
    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        return Requests({INTERNAL_APP: demand_from_snapshot(snapshot)})

    def unanswered(self) -> dict[str, tuple[int, int]]:
        return {}

    def close(self) -> None:
        pass


class _WatchedStore(MetricsStore):
    """The store as the signals read it, noting how many series were read and the newest point."""

    def __init__(self, store: MetricsStore) -> None:
        self.store = store
        self.reads = 0
        self.newest: float | None = None

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        series = self.store.read(metric_type, key, start, end)
        self.reads += 1
        if series:
            newest = series[-1][0]
            self.newest = newest if self.newest is None else max(self.newest, newest)
        return series

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        return self.store.keys(metric_type, prefix, regex)

    def write(self, points: Iterable[Point]) -> None:
        self.store.write(points)

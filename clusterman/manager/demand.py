"""Where a run's requests come from: the pool's signals (over their sockets), or the scheduler.

A pool whose signal is ``internal: true`` runs no signal process: its one request is what the
snapshot's running and pending work asks for. Every other pool asks its signals, reading their
metrics from the store; failures fall back to the default signal (``SignalEvaluator``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from clusterman.autoscaler.demand import demand_from_snapshot
from clusterman.cluster.model import PoolSnapshot
from clusterman.metrics.store import MetricsStore
from clusterman.resources import ResourceRequest
from clusterman.signals.evaluator import Evaluation
from clusterman.signals.evaluator import SignalEvaluator

INTERNAL_APP = "__internal__"


@dataclass(frozen=True)
class Requests:
    by_app: dict[str, ResourceRequest]
    evaluations: tuple[Evaluation, ...] = ()  # how each app's request was obtained (for the record)


class DemandSource(Protocol):
    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        """Raises SignalError or MetricsError when there is no usable answer at all."""

    def close(self) -> None: ...


class SignalDemand:
    def __init__(self, evaluator: SignalEvaluator, store: MetricsStore) -> None:
        self.evaluator = evaluator
        self.store = store

    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        evaluations = self.evaluator.evaluate(self.store, now)
        return Requests({e.app: e.request for e in evaluations}, tuple(evaluations))

    def close(self) -> None:
        self.evaluator.close()
        self.store.close()


class InternalDemand:
    def requests(self, snapshot: PoolSnapshot, now: int) -> Requests:
        return Requests({INTERNAL_APP: demand_from_snapshot(snapshot)})

    def close(self) -> None:
        pass

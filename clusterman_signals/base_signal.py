"""What a signal author writes against: ``BaseSignal`` and the ``SignalResources`` it returns.

Units are Mesos units, as in Yelp's Clusterman: CPU shares (1.0 = one core), memory and disk in
MB, GPUs in devices. A resource left as ``None`` means "no opinion" (not zero).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

# name -> [(unix_timestamp_seconds, value), ...], oldest first
MetricsValuesDict = Mapping[str, Sequence[Sequence[float]]]


class SignalResources(NamedTuple):
    cpus: float | None = None
    mem: float | None = None
    disk: float | None = None
    gpus: float | None = None


class BaseSignal:
    """Subclass this and override ``value``.

    Two forms of ``value`` work: ``value(self)`` reading ``self.metrics_cache``, or
    ``value(self, metrics, timestamp)``. The runner sets ``metrics_cache`` before either call.
    """

    def __init__(self, cluster: str, pool: str, parameters: Mapping[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.pool = pool
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.metrics_cache: MetricsValuesDict = {}

    def value(self, *args: Any) -> SignalResources:  # pragma: no cover - always overridden
        raise TypeError(f"{type(self).__name__} does not define value()")

    def evaluate(self, metrics: MetricsValuesDict, timestamp: float) -> SignalResources:
        """Call ``value`` in whichever form the subclass defined it."""
        self.metrics_cache = metrics
        arity = _ARITY.get(type(self))
        if arity is None:  # once per class: a signature costs tens of microseconds, a simulation calls often
            arity = _ARITY[type(self)] = _positional_arity(self.value)
        if arity == 0:
            return self.value()
        return self.value(metrics, timestamp)


_ARITY: dict[type, int] = {}


def _positional_arity(method: Any) -> int:
    params = inspect.signature(method).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)

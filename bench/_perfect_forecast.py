"""A signal that knows the future, for the scoreboard only: the shipped decision fed a perfect forecast.

It asks, each run, for the largest CPU demand of this minute and the next ``horizon_minutes`` of
the trace being replayed (``bench/_traces.py``: the same seeded trace the run replays): what a
request made now must cover when its capacity joins. Whatever the shipped default costs above
this variant is the forecast's error; what this variant costs above the oracle is the decision's
(setpoint, slot reserve, margin, packing pods onto nodes). It is not shipped in
``clusterman_signals``; ``pool_signal`` makes it importable there for one process.
"""

from __future__ import annotations

import sys
from typing import Any

from bench._traces import START
from bench._traces import trace
from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import MetricsValuesDict
from clusterman_signals.base_signal import SignalResources

NAMESPACE = "bench_perfect_forecast"


class PerfectForecast(BaseSignal):
    """Parameters: ``trace`` (a name of ``bench._traces.TRACES``), ``days``, ``horizon_minutes``,
    ``seed`` (the trace's draw, 1 when left out)."""

    def __init__(self, cluster: str, pool: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(cluster, pool, parameters)
        self.horizon = int(self.parameters["horizon_minutes"])
        p = self.parameters
        self.demand = [v for _, v in trace(str(p["trace"]), float(p["days"]), int(p.get("seed", 1)))]

    def value(self, metrics: MetricsValuesDict, timestamp: float) -> SignalResources:
        minute = min(max(int((timestamp - START) // 60), 0), len(self.demand) - 1)
        return SignalResources(cpus=max(self.demand[minute : minute + self.horizon + 1]))


def pool_signal(trace_name: str, days: float, horizon_minutes: float, seed: int = 1) -> dict[str, Any]:
    """A pool's ``autoscale_signal`` running this signal, made importable as
    ``clusterman_signals.bench_perfect_forecast`` (the simulator imports signals by namespace from
    ``clusterman_signals``) for the rest of this process."""
    sys.modules[f"clusterman_signals.{NAMESPACE}"] = sys.modules[__name__]
    return {
        "name": PerfectForecast.__name__,
        "namespace": NAMESPACE,
        "branch_or_tag": "local",
        "period_minutes": 1,
        "parameters": [{"trace": trace_name}, {"days": days}, {"horizon_minutes": horizon_minutes}, {"seed": seed}],
        "required_metrics": [{"name": "cpus_allocated", "type": "system_metrics", "minute_range": 1}],
    }

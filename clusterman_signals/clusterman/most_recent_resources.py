"""The default signal: recent allocation, looking ahead along its trend, plus pending demand.

For each resource r with a ``{r}_allocated`` series in the metrics:
  latest    = the newest value of ``{r}_allocated``
  slope     = least-squares slope of ``{r}_allocated`` over the window (per second)
  projected = latest + slope × lookahead_minutes × 60
  request   = max(latest, projected) + newest ``{r}_pending`` (0 when there is no such series)
The look-ahead only ever raises the request: a rising trend asks for capacity before it is
needed (new machines take minutes to join), a falling one waits for the allocation to actually
drop. A resource with no ``{r}_allocated`` data gets no opinion.
Parameters: ``lookahead_minutes`` (default 10; 0 turns the look-ahead off).
"""

from __future__ import annotations

from collections.abc import Sequence

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources

RESOURCES = ("cpus", "mem", "disk", "gpus")
DEFAULT_LOOKAHEAD_MINUTES = 10.0


def trend_slope(series: Sequence[Sequence[float]]) -> float:
    """Least-squares slope (value per second); 0 for fewer than two distinct timestamps."""
    n = len(series)
    if n < 2:
        return 0.0
    mean_t = sum(float(p[0]) for p in series) / n
    mean_v = sum(float(p[1]) for p in series) / n
    var = sum((float(p[0]) - mean_t) ** 2 for p in series)
    if var == 0:
        return 0.0
    cov = sum((float(p[0]) - mean_t) * (float(p[1]) - mean_v) for p in series)
    return cov / var


class MostRecentResources(BaseSignal):
    def value(self) -> SignalResources:
        lookahead_seconds = float(self.parameters.get("lookahead_minutes", DEFAULT_LOOKAHEAD_MINUTES)) * 60
        request: dict[str, float | None] = {}
        for r in RESOURCES:
            allocated = self.metrics_cache.get(f"{r}_allocated") or []
            if not allocated:
                request[r] = None
                continue
            latest = float(allocated[-1][1])
            projected = latest + trend_slope(allocated) * lookahead_seconds
            pending_series = self.metrics_cache.get(f"{r}_pending") or []
            pending = float(pending_series[-1][1]) if pending_series else 0.0
            request[r] = max(latest, projected) + max(pending, 0.0)
        return SignalResources(**request)

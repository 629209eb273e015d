"""Replay a demand series from a metrics file as a simulated workload, faster than real time.

Wiring between two adapters (a metrics file and the simulated scheduler), used for simulated pools by
``make run`` as well as by the simulator, so it sits with the rest of the wiring, below both.

The series (e.g. ``cpus_allocated``) is a step function of simulated time; each real second moves
``speedup`` simulated seconds, and the series loops when it ends. The demand is run as identical
tasks (``DemandTrace``): as many as the most demanding resource of the series needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusterman.cluster.simulated_scheduler import DemandTrace
from clusterman.cluster.simulated_scheduler import WorkItem
from clusterman.core.config_schema import ConfigError
from clusterman.core.resources import RESOURCE_NAMES
from clusterman.core.resources import Resources
from clusterman.datastore.datafile import read_metrics_file
from clusterman.datastore.generate import generate
from clusterman.datastore.generate import load_design
from clusterman.datastore.store import split_key


class ReplayedTrace:
    def __init__(
        self, series: Sequence[tuple[float, float]], task: Resources, resource: str = "cpus", speedup: float = 1.0
    ) -> None:
        if not series:
            raise ValueError("replayed trace: the series is empty")
        if resource not in RESOURCE_NAMES:
            raise ValueError(f"replayed trace: unknown resource {resource!r}")
        self.start = float(series[0][0])
        self.span = float(series[-1][0]) - self.start + 60.0  # the last point lasts one minute
        self.speedup = speedup
        points = [(float(t), Resources(**{resource: max(0.0, float(v))})) for t, v in series]
        self._trace = DemandTrace(points, task, id_prefix="trace")  # beside other demand, never the same ids
        self._real_start: float | None = None

    def trace_time(self, now: float) -> float:
        if self._real_start is None:
            self._real_start = now
        return self.start + ((now - self._real_start) * self.speedup) % self.span

    def changes(self, now: float) -> tuple[list[WorkItem], list[str]]:
        return self._trace.changes(self.trace_time(now))


def load_trace(path: Path, metric: str, task: Resources, speedup: float) -> ReplayedTrace:
    resource, series = trace_series(path, metric)
    return ReplayedTrace(series, task, resource, speedup)


def trace_series(path: Path, metric: str) -> tuple[str, list[tuple[float, float]]]:
    """The resource (``cpus`` for ``cpus_allocated``) and the first series of the file whose key is
    ``metric`` or whose name part is ``metric``.

    The file is a metrics file, or a ``generate-data`` design (``.yaml``), generated on the spot
    (designs are seeded, so the same design always replays the same workload).
    """
    data = generate(load_design(path)) if path.suffix in (".yaml", ".yml") else read_metrics_file(path)
    resource = metric.split("_", 1)[0]
    for _metric_type, series_by_key in sorted(data.items(), key=lambda kv: kv[0].value):
        for key in sorted(series_by_key):
            if key == metric or split_key(key)[0] == metric:
                numbers = [(float(t), float(v)) for t, v in series_by_key[key] if isinstance(v, (int, float))]
                return (resource if resource in RESOURCE_NAMES else "cpus"), numbers
    raise ConfigError(str(path), metric, "no such series in the metrics file")

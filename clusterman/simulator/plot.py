"""The run as a picture: capacity against demand over time, and what it cost (a PNG, matplotlib Agg).

Top: CPUs. Demand (what the workload asked for: running + pending) in black; allocated (running)
in blue, with the shortfall between them shaded red; joined capacity (nodes in the scheduler) in
green; paid capacity (every instance, also those still joining) dashed grey. The gap between
green and blue is capacity paid for and idle; between grey and green, capacity still joining.
Bottom: the pool's cost in dollars per hour.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from clusterman.errors import UserError
from clusterman.simulator.costs import Timeline


class NoPlotter(UserError):
    """matplotlib is not installed (the plain wheel, the image without the extra)."""


def write_plot(path: str | os.PathLike[str], timeline: Timeline, title: str, *, small: bool = False) -> None:
    """``small``: a picture for the docs (under 100 KB for a week by the minute)."""
    # The object API with the Agg canvas: no pyplot, no global backend, nothing left open.
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.dates import AutoDateLocator
        from matplotlib.dates import ConciseDateFormatter
        from matplotlib.figure import Figure
    except ImportError as e:
        raise NoPlotter(
            "matplotlib is not installed (pip install 'clusterman[simulator]', or the image built with "
            "--build-arg EXTRAS=kubernetes,simulator)"
        ) from e

    times = [datetime.datetime.fromtimestamp(t, datetime.UTC) for t in timeline["time"]]
    demand, allocated = timeline["demand_cpus"], timeline["allocated_cpus"]
    figure = Figure(figsize=(10, 5) if small else (12, 7), dpi=64 if small else 100, layout="constrained")
    FigureCanvasAgg(figure)
    cpus, cost = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    step: dict[str, Any] = {"where": "post", "linewidth": 0.7 if small else 1}
    cpus.step(times, timeline["paid_cpus"], color="0.55", linestyle="--", label="paid (incl. joining)", **step)
    cpus.step(times, timeline["joined_cpus"], color="tab:green", label="joined capacity", **step)
    cpus.step(times, allocated, color="tab:blue", label="allocated", **step)
    cpus.step(times, demand, color="black", label="demand", **step)
    short = [d > a + 1e-9 for d, a in zip(demand, allocated, strict=True)]
    if any(short):
        cpus.fill_between(times, allocated, demand, where=short, step="post", color="tab:red", alpha=0.35,
                          linewidth=0, label="shortfall")  # fmt: skip
    cpus.set_ylabel("CPUs")
    cpus.set_ylim(bottom=0)
    cpus.legend(loc="upper left", ncols=5, fontsize="small")
    cpus.set_title(title, fontsize="medium")
    cost.step(times, timeline["cost_per_hour"], color="tab:orange", **step)
    cost.set_ylabel("$ per hour")
    cost.set_ylim(bottom=0)
    locator = AutoDateLocator()
    cost.xaxis.set_major_locator(locator)
    cost.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    cost.set_xlabel("time (UTC)")
    for axes in (cpus, cost):
        axes.grid(alpha=0.3)
    figure.savefig(path, format="png", metadata={"Software": None})

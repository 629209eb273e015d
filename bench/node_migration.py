"""Node migration in the simulator (docs/measured_decision.md, "Node migration"): the real
cycle, the shipped decision and the scoreboard's simulated pool (``bench/scoreboard.py``), each
run beside the same run without the migration (its baseline, in the same process).

  replace     about 115 nodes (m5.2xlarge, 8 CPUs; the ``noisy`` trace at 2.6 times its CPUs)
              whose launch template gets a new version after 6 hours: every node drifts, and
              ``trigger.drift`` with ``rate: 5``, ``prescaling: 2%`` and ``expected_duration: 3h``
              replaces them. How long it
              took against ``expected_duration``, the unmet CPU-minutes while it ran against the
              baseline's over the same minutes, the extra cost of the day, and the most nodes
              disrupted (tainted) at once against the disruption budget at that run
  max_uptime  the scoreboard's pool (m5.2xlarge) over 35 days of the ``diurnal`` trace with
              ``max_uptime: 30d``: the oldest node any run saw against 30 days plus one
              ``health_check_interval``, and the extra cost (``--quick``: 1 day over 3 days)

``python -m bench node_migration`` prints the JSON; the figures are in docs/measured_decision.md.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import scoreboard
from bench._traces import trace
from clusterman.config.loader import load_main_config
from clusterman.core.config import MetricType
from clusterman.core.durations import parse_duration
from clusterman.core.model import NodeState
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.store import system_key
from clusterman.run.report import RunReport
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.simulation import SimulationResult
from clusterman.simulator.simulation import simulate

REPLACE_AT_MINUTES = 360
REPLACE = {
    "trigger": {"drift": True},
    "strategy": {"rate": 5, "prescaling": "2%", "bootstrap_wait": "3m", "bootstrap_timeout": "10m"},
    "expected_duration": "3h",
}


class Watch:
    """Per autoscaler run: whether a migration runs, the nodes tainted against the budget, the oldest node."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.migrating: list[float] = []  # the times of the runs a migration ran in
        self.disrupted = 0  # the most nodes tainted at once
        self.budget_then = 0  # the budget at that run
        self.over_budget = 0  # runs with more nodes tainted than the budget
        self.oldest = 0.0  # seconds

    def __call__(self, report: RunReport) -> None:
        snapshot = report.snapshot
        if snapshot is None:
            return
        if report.migration:
            self.migrating.append(report.now)
        joined = [n for n in snapshot.nodes if n.state in (NodeState.READY, NodeState.TAINTED)]
        tainted = sum(1 for n in joined if n.state is NodeState.TAINTED)
        budget = max(1, int(self.share * len(joined)))
        if tainted > budget:
            self.over_budget += 1
        if tainted > self.disrupted:
            self.disrupted, self.budget_then = tainted, budget
        ages = [report.now - n.launched_at for n in joined if n.launched_at > 0]
        self.oldest = max(self.oldest, *ages) if ages else self.oldest


def scenario(workdir: Path, name: str, shape: str, days: float, scale: float, instance_type: str, edit: Any) -> Any:
    """The scoreboard's pool and shipped main file for ``shape`` (its CPUs times ``scale``), edited."""
    points: list[tuple[int, float | dict[str, float]]] = [(t, v * scale) for t, v in trace(shape, days)]
    data = workdir / f"{name}.json.gz"
    key = system_key("cpus_allocated", "bench", "web.kubernetes")
    write_metrics_file(data, {MetricType.SYSTEM_METRICS: {key: points}})
    main = load_main_config(scoreboard.main_config(workdir, "new"))
    cpus = {"m5.xlarge": 4, "m5.2xlarge": 8}[instance_type]
    initial = max(1, math.ceil(trace(shape, days)[0][1] * scale / (cpus * main.autoscaling.setpoint)))
    path = scoreboard.pool_file(workdir, "new", shape, initial)
    pool = yaml.safe_load(path.read_text())
    pool["simulation"]["instance_type"] = instance_type
    edit(pool)
    own = workdir / name / "web.kubernetes"
    own.parent.mkdir(exist_ok=True)
    own.write_text(yaml.safe_dump(pool))
    return load_scenario(main, Request(own, [data]))


def play(s: Any) -> tuple[SimulationResult, Watch, float]:
    watch = Watch(float(s.setup.policy.consolidation.max_disrupted_share))
    started = time.perf_counter()
    result = simulate(s, on_run=watch)
    return result, watch, time.perf_counter() - started


def unmet(result: SimulationResult, start: float, end: float) -> float:
    """Unmet CPU-minutes in [start, end]."""
    t = result.timeline
    return math.fsum(
        max(0.0, d - a) for at, d, a in zip(t["time"], t["demand_cpus"], t["allocated_cpus"], strict=True)
        if start <= at <= end
    )  # fmt: skip


def replace_figures(workdir: Path) -> dict[str, Any]:
    def migrating(pool: dict[str, Any]) -> None:
        pool["node_migration"] = REPLACE
        pool["simulation"]["new_template_at_minutes"] = [REPLACE_AT_MINUTES]

    days = 1.0
    args = ("noisy", days, 2.6, "m5.2xlarge")
    base, _, base_seconds = play(scenario(workdir, "replace-baseline", *args, lambda pool: None))
    moved, watch, seconds = play(scenario(workdir, "replace", *args, migrating))
    if not watch.migrating:
        raise AssertionError("no migration ran")
    start, end = watch.migrating[0], watch.migrating[-1]
    window = (start, end + 600)  # and the ten minutes after its last step, while the pool settles
    pool_nodes = max(1, round(moved.timeline["joined_cpus"][int((start - moved.timeline["time"][0]) // 60)] / 8))
    expected = parse_duration(REPLACE["expected_duration"])
    base_unmet, moved_unmet = unmet(base, *window), unmet(moved, *window)
    return {
        "pool_nodes_at_start": pool_nodes,
        "migration_minutes": round((end - start) / 60, 1),
        "expected_duration_minutes": expected / 60,
        "within_expected_duration": end - start <= expected,
        "unmet_cpu_minutes_during": round(moved_unmet, 1),
        "unmet_cpu_minutes_baseline": round(base_unmet, 1),
        "unmet_vs_baseline": round(moved_unmet / base_unmet, 3) if base_unmet else None,
        "extra_cost_ratio": round(moved.totals.cost / base.totals.cost, 4),
        "most_disrupted_at_once": watch.disrupted,
        "budget_at_that_run": watch.budget_then,
        "runs_over_budget": watch.over_budget,
        "seconds": round(seconds, 1),
        "baseline_seconds": round(base_seconds, 1),
    }


def uptime_figures(workdir: Path, quick: bool) -> dict[str, Any]:
    limit, days = ("1d", 3.0) if quick else ("30d", 35.0)
    block = {"trigger": {"max_uptime": limit}, "strategy": {"rate": 5}}

    def recycled(pool: dict[str, Any]) -> None:
        pool["node_migration"] = block

    args = ("diurnal", days, 1.0, "m5.2xlarge")
    base, base_watch, base_seconds = play(scenario(workdir, "uptime-baseline", *args, lambda pool: None))
    recycled_result, watch, seconds = play(scenario(workdir, "uptime", *args, recycled))
    interval = 120.0  # health_check_interval's default
    return {
        "days": days,
        "max_uptime_days": parse_duration(limit) / 86400,
        "oldest_node_days": round(watch.oldest / 86400, 3),
        "bound_days": round((parse_duration(limit) + interval) / 86400, 3),
        "within_bound": watch.oldest <= parse_duration(limit) + interval,
        "oldest_node_days_baseline": round(base_watch.oldest / 86400, 3),
        "extra_cost_ratio": round(recycled_result.totals.cost / base.totals.cost, 4),
        "unmet_cpu_minutes": round(recycled_result.totals.unmet_cpu_minutes, 1),
        "unmet_cpu_minutes_baseline": round(base.totals.unmet_cpu_minutes, 1),
        "seconds": round(seconds, 1),
        "baseline_seconds": round(base_seconds, 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        workdir = Path(tmp)
        out = {"replace": replace_figures(workdir), "max_uptime": uptime_figures(workdir, quick)}
    print(out, file=sys.stderr)
    return out

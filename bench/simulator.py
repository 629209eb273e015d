"""The simulator's scoreboard and speed.

Quality: five workload traces (steady, diurnal, spike, ramp, noisy; ``generate-data`` designs)
replayed with the shipped default signal and settings (``config/clusterman.yaml``; the
decision-quality scoreboard is ``bench/scoreboard.py``) on a Kubernetes-like pool of m5.large
whose limits never bind, instances joining 180 s (± 30 s) after launch. Each reports its cost ÷
the oracle's (``simulator/costs.py``: exactly the instances the demand needs each minute,
launched one join delay ahead), computed in the same run, and its unmet demand.

Speed: 30 simulated days by the minute of a pool of about 1,000 nodes (goal: under 60 s), next to
the pool alone (the same minutes of the simulated groups, scheduler and ledger, without the
autoscaler: the part a faster autoscaler cannot remove; measured by running ``simulate`` with the
cycle's run replaced, in the same run); and how the time grows with days (1, 3, 10, 30 at ~1,000
nodes) and with nodes (~100, ~300, ~1,000 for 3 days). Every pool starts sized for its first
minute's demand at the setpoint.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

from clusterman.config.loader import load_main_config
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.generate import generate
from clusterman.datastore.generate import parse_design
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.report import summary
from clusterman.simulator.simulation import Scenario
from clusterman.simulator.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "config" / "clusterman.yaml"
NODE_CPUS = 2  # m5.large
SETPOINT = load_main_config(MAIN).autoscaling.setpoint
POOL = """
resource_groups:
  - simulated: {{tag: bench-a}}
scaling_limits: {{min_capacity: 1, max_capacity: 100000, max_weight_to_add: 100000, max_weight_to_remove: 100000}}
simulation:
  instance_type: m5.large
  join_delay_seconds: 180
  join_delay_stdev_seconds: 30
  initial_capacity: {initial}
"""

# CPUs allocated over time; m5.large has 2 CPUs.
TRACES: dict[str, list[dict[str, Any]]] = {
    "steady": [{"steady": {"value": 120}}, {"noise": {"stddev": 1}}],
    "diurnal": [{"steady": {"value": 120}}, {"diurnal": {"amplitude": 80, "peak": "15h"}}, {"noise": {"stddev": 2}}],
    "spike": [
        {"steady": {"value": 80}},
        {"spike": {"at": "10h", "duration": "30m", "value": 120}},
        {"spike": {"at": "34h", "duration": "90m", "value": 60}},
    ],
    "ramp": [{"steady": {"value": 20}}, {"ramp": {"at": "4h", "duration": "36h", "value": 200}}],
    "noisy": [{"steady": {"value": 120}}, {"noise": {"stddev": 15}}, {"random_walk": {"stddev": 1.5}}],
}


def design(shape: list[dict[str, Any]], days: float, seed: int = 1) -> dict[str, Any]:
    return {
        "seed": seed,
        "start": "2024-03-04T00:00:00Z",
        "duration": f"{int(days * 24 * 60)}m",
        "interval": "1m",
        "cluster": "bench",
        "pool": "web",
        "scheduler": "kubernetes",
        "series": [{"name": "cpus_allocated", "shape": shape, "decimals": 2}],
    }


def scenario(workdir: Path, name: str, shape: list[dict[str, Any]], days: float) -> Scenario:
    """The trace as a metrics file, and the pool sized for the first minute's demand at the setpoint."""
    data = workdir / f"{name}.json.gz"
    metrics = generate(parse_design(design(shape, days), name))
    write_metrics_file(data, metrics)
    first = next(iter(next(iter(metrics.values())).values()))[0][1]
    assert isinstance(first, float)
    pool = workdir / f"{name}" / "web.kubernetes"
    pool.parent.mkdir(exist_ok=True)
    pool.write_text(POOL.format(initial=max(1, math.ceil(first / (NODE_CPUS * SETPOINT)))))
    return load_scenario(load_main_config(MAIN), Request(pool, [data]))


def timed(s: Scenario) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    result = simulate(s)
    return time.perf_counter() - started, summary(result, "pool", ["trace"])


def pool_only_seconds(s: Scenario) -> float:
    """The same minutes with the autoscaler's run skipped: the simulated world and the ledger alone."""
    import clusterman.simulator.simulation as engine

    real = engine.Cycle.run_once

    def skip(self: engine.Cycle, now: float) -> Any:
        return engine.RunReport(now, engine.Outcome.PAUSED, "bench: pool only")

    engine.Cycle.run_once = skip  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        simulate(s)
        return time.perf_counter() - started
    finally:
        engine.Cycle.run_once = real  # type: ignore[method-assign]


def big_shape(cpus: float) -> list[dict[str, Any]]:
    """About ``cpus / (2 × setpoint)`` nodes on average, ± a fifth over the day."""
    return [{"steady": {"value": cpus}}, {"diurnal": {"amplitude": cpus / 5, "peak": "15h"}}, {"noise": {"stddev": 5}}]


def run(quick: bool) -> dict[str, Any]:
    days = 1 if quick else 2
    out: dict[str, Any] = {"scoreboard": {}, "speed": {}}
    with tempfile.TemporaryDirectory(prefix="bench-simulator-") as tmp:
        workdir = Path(tmp)
        for name, shape in TRACES.items():
            seconds, s = timed(scenario(workdir, name, shape, days))
            out["scoreboard"][name] = {
                "days": days,
                "cost_vs_oracle": s["cost"]["vs_oracle"],
                "cost_dollars": s["cost"]["total_dollars"],
                "oracle_dollars": s["cost"]["oracle_dollars"],
                "unmet_cpu_minutes": s["unmet_demand"]["cpu_minutes"],
                "unmet_share_of_demand": s["unmet_demand"]["share_of_demand"],
                "minutes_with_shortfall": s["unmet_demand"]["minutes_with_shortfall"],
                "scaling_actions": s["scaling"]["actions"],
                "seconds": round(seconds, 2),
            }

        big_days = 1 if quick else 30
        big = scenario(workdir, "big", big_shape(1400), big_days)
        seconds, s = timed(big)
        floor = pool_only_seconds(big)
        out["speed"]["headline"] = {
            "days": big_days,
            "minutes": s["inputs"]["minutes"],
            "peak_instances": s["capacity"]["peak_instances"],
            "mean_instances": round(s["capacity"]["instance_hours"] / (s["inputs"]["minutes"] / 60), 1),
            "seconds": round(seconds, 2),
            "pool_only_seconds": round(floor, 2),
            "ratio_to_pool_only": round(seconds / floor, 2),
            "microseconds_per_minute": round(seconds / s["inputs"]["minutes"] * 1e6, 1),
            "goal_under_60s": seconds < 60 if big_days == 30 else None,
        }
        if not quick:
            out["speed"]["by_days"] = {}
            for d in (1, 3, 10):
                took, _ = timed(scenario(workdir, f"days{d}", big_shape(1400), d))
                out["speed"]["by_days"][str(d)] = {"seconds": round(took, 2), "per_day": round(took / d, 3)}
            out["speed"]["by_days"]["30"] = {"seconds": round(seconds, 2), "per_day": round(seconds / 30, 3)}
            out["speed"]["by_nodes"] = {}
            for nodes in (100, 300, 1000):
                took, s = timed(scenario(workdir, f"nodes{nodes}", big_shape(nodes * 1.4), 3))
                out["speed"]["by_nodes"][str(nodes)] = {
                    "seconds": round(took, 2),
                    "mean_instances": round(s["capacity"]["instance_hours"] / 72, 1),
                    "microseconds_per_minute": round(took / 4320 * 1e6, 1),
                }
    return out

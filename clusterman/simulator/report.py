"""A run's summary: the JSON document (byte-identical for the same inputs and seed) and its text.

Numbers are rounded (dollars and CPU figures to 6 decimals) and keys sorted, and nothing depends
on the wall clock or the machine, so two runs of the same inputs write the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from clusterman.core.timestamps import format_time
from clusterman.simulator.simulation import SimulationResult

FORMAT = "clusterman-simulation/1"


def summary(result: SimulationResult, pool_config: str, metrics_files: Sequence[str]) -> dict[str, Any]:
    sc = result.scenario
    sim = sc.setup.pool.simulation
    t, h = result.totals, result.history
    demand_cpu_minutes = t.demand_cpu_hours * 60
    return {
        "format": FORMAT,
        "inputs": {
            "pool": str(sc.setup.identity),
            "pool_config": pool_config,
            "metrics_files": list(metrics_files),
            "start": format_time(sc.steps.start),
            "end": format_time(sc.steps.end),
            "minutes": len(result.timeline) * sc.steps.step_seconds // 60,
            "period_minutes": _n(sc.setup.period_seconds / 60),
            "seed": sim.seed,
            "join_delay_seconds": {"mean": sim.join_delay_seconds, "stdev": sim.join_delay_stdev_seconds},
            "signals": "internal" if sc.setup.internal else sc.signals.value,
            "demand_task": {r: _n(amount) for r, amount in sc.demand_task.items()},
            "demand_mix": [
                {
                    "weight": _n(p.weight),
                    **{r: _n(getattr(p, r)) for r in ("cpus", "mem", "disk", "gpus") if getattr(p, r)},
                }
                for p in sim.demand_mix
            ],
            "departures": sim.departures,
            "placement": sim.placement,
            "task_lifetime_minutes": sim.task_lifetime_minutes,
            "spot_priced_markets": [f"{kind}, {zone}" for kind, zone in result.spot_priced],
        },
        "cost": {
            "total_dollars": _n(t.cost),
            "per_cpu_hour": _n(t.cost_per_cpu_hour),
            "per_allocated_cpu_hour": _n(t.cost_per_allocated_cpu_hour),
            "unused_capacity_dollars": _n(t.unused_cost),
            "unused_capacity_share": _ratio(t.unused_cost, t.cost),
            "oracle_dollars": _n(result.oracle_cost),
            "vs_oracle": _ratio(t.cost, result.oracle_cost),
        },
        "unmet_demand": {
            "cpu_minutes": _n(t.unmet_cpu_minutes),
            "minutes_with_shortfall": _n(t.shortfall_minutes),
            "share_of_demand": _ratio(t.unmet_cpu_minutes, demand_cpu_minutes),
        },
        "capacity": {
            "paid_cpu_hours": _n(t.paid_cpu_hours),
            "allocated_cpu_hours": _n(t.allocated_cpu_hours),
            "demand_cpu_hours": _n(t.demand_cpu_hours),
            "instance_hours": _n(t.instance_hours),
            "peak_instances": t.peak_instances,
            "instances_launched": t.instances_launched,
            "instances_terminated": t.instances_terminated,
        },
        "scaling": {
            "actions": h.scaling_actions,
            "scale_ups": h.scale_ups,
            "scale_downs": h.scale_downs,
            "nodes_tainted": h.tainted,
            "nodes_untainted": h.untainted,
            "nodes_terminated": h.terminated,
            "evictions": h.evictions,
            "nodes_consolidated": h.consolidated,
            "runs": h.runs,
            "outcomes": dict(h.outcomes),
            "decisions_by_reason": dict(h.reasons),
            "apply_errors": h.errors,
        },
    }


def to_json(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n"


def text(document: dict[str, Any]) -> str:
    i, c, u, s = document["inputs"], document["cost"], document["unmet_demand"], document["scaling"]
    oracle = f" (oracle ${c['oracle_dollars']:,.2f}: {c['vs_oracle']:.2f}x)" if c["vs_oracle"] is not None else ""
    share = c["unused_capacity_share"]
    lines = [
        f"simulated {i['pool']} from {i['start']} to {i['end']} ({i['minutes']:g} minutes, seed {i['seed']}, "
        f"signals {i['signals']})",
        f"cost                ${c['total_dollars']:,.2f}{oracle}",
        f"per CPU-hour        ${c['per_cpu_hour']:.4f} paid for, ${c['per_allocated_cpu_hour']:.4f} allocated",
        f"unused capacity     ${c['unused_capacity_dollars']:,.2f}" + (f" ({share:.0%} of the cost)" if share else ""),
        f"unmet demand        {u['cpu_minutes']:,.1f} CPU-minutes; {u['minutes_with_shortfall']:g} minutes with a "
        "shortfall",
        f"scaling actions     {s['actions']} ({s['scale_ups']} up, {s['scale_downs']} down); "
        f"{s['nodes_terminated']} nodes terminated",
        f"decided by          {decided_by(s['decisions_by_reason'], s['runs'])}",
    ]
    return "\n".join(lines) + "\n"


def decided_by(reasons: dict[str, int], runs: int) -> str:
    """Which rule or limit set the target, how often: ``max_capacity`` deciding nearly every run
    says the pool is capped, not scaled."""
    if not reasons:
        return f"no decision in {runs:,} runs"
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{reason} {count:,}" for reason, count in ranked) + f" of {runs:,} runs"


def _n(value: float, places: int = 6) -> float | None:
    """Rounded, so float noise never reaches the file; None for a figure that has no finite value."""
    return round(value, places) + 0.0 if math.isfinite(value) else None


def _ratio(a: float, b: float) -> float | None:
    return _n(a / b) if b and math.isfinite(b) else None

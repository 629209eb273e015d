"""Decision quality: the scoreboard of issue 13, on week-long traces (``bench/_traces.py``).

Each trace is replayed by ``clusterman simulate``'s engine on one simulated group of m5.2xlarge
(8 CPUs), instances joining 180 ± 30 s after launch, limits that never bind, draining on, demand
run as pods of 0.5, 1, 2 and 4 CPUs that leave at random and live four hours on average (so
scale-down meets fragmented nodes), for five configurations:
  old        the default before ForecastHeadroom: MostRecentResources (look-ahead 5 minutes over
             10-minute windows), setpoint 0.7, margin 5%
  new        the shipped default: ``config/clusterman.yaml`` as it is (consolidation on, packing
             only a pool ``surplus`` units above its demand; docs/consolidation.md)
  unconsolidated  the shipped default with consolidation off (the default until issue 25)
  eager      the shipped default packing whatever the budget allows (``surplus`` 0)
  escalator  no signal (``internal: true``: running + pending pods, as Escalator counts them) with
             Escalator's thresholds, tuned on these traces (``ESCALATOR``)
  perfect    the shipped decision settings with a signal that knows the trace's
             future (``bench/_perfect_forecast.py``): the cost of the decision itself, without
             forecast error
Per trace and configuration: cost ÷ the oracle's (``simulator/costs.py``: exactly the instances the
demand needs each minute, launched one join delay ahead), unmet CPU-minutes, minutes with any
shortfall, target changes per day, pods evicted per day (each one restarts) and nodes consolidated
per day. Each run is also set beside the frontier (``_frontier.py``): the least cost any
autoscaler whose nodes join in 3 minutes pays, on average, at no more unmet demand than the
run's. With
``CLUSTERMAN_BENCH_PLOTS=DIR`` the new default's run of each trace is drawn as
``DIR/scoreboard-<trace>.png``.

The signal's own cost is measured too: one run of the default signal over a window of 1,500
points of each of its metrics, next to MostRecentResources over the same window.

For iterating on one part, ``python -m bench.scoreboard --traces batch --days 2 --variants new
--set hold_minutes=10 --set setpoint=0.95 --episodes`` runs a subset, overrides a signal parameter
or an ``autoscaling`` key of the new default, and lists each stretch of shortfall; ``--breakdown``
says where the capacity above the demand goes (``CostSplit``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import _frontier as frontier
from bench import _perfect_forecast as perfect_forecast
from bench._peers import ClusterAutoscaler
from bench._peers import Karpenter
from bench._timing import median_of
from bench._traces import TRACES
from bench._traces import trace
from clusterman.config.loader import load_main_config
from clusterman.core.config import CONSOLIDATION_PLACEMENTS
from clusterman.core.config import PLACEMENTS
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricType
from clusterman.core.config import SignalConfig
from clusterman.core.model import NodeState
from clusterman.datastore.datafile import write_metrics_file
from clusterman.datastore.store import system_key
from clusterman.decision.decide import decide
from clusterman.run.cycle import Decider
from clusterman.run.report import RunReport
from clusterman.simulator.inputs import Request
from clusterman.simulator.inputs import load_scenario
from clusterman.simulator.plot import write_plot
from clusterman.simulator.report import summary
from clusterman.simulator.simulation import simulate

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "config" / "clusterman.yaml"
NODE_CPUS = 8
POOL: dict[str, Any] = {
    "resource_groups": [{"simulated": {"tag": "bench-a"}}],
    "scaling_limits": {
        "min_capacity": 1,
        "max_capacity": 100000,
        "max_weight_to_add": 100000,
        "max_weight_to_remove": 100000,
    },
    "draining_enabled": True,
    "simulation": {
        "instance_type": "m5.2xlarge",
        "join_delay_seconds": 180,
        "join_delay_stdev_seconds": 30,
        "departures": "random",
        "task_lifetime_minutes": 240,
        "demand_mix": [
            {"weight": 4, "cpus": 0.5},
            {"weight": 4, "cpus": 1},
            {"weight": 2, "cpus": 2},
            {"weight": 1, "cpus": 4},
        ],
    },
}
OLD_METRICS = ("cpus_allocated", "mem_allocated", "disk_allocated", "gpus_allocated", "cpus_pending", "mem_pending")
OLD_SIGNAL: dict[str, Any] = {
    "name": "MostRecentResources",
    "branch_or_tag": "local",
    "period_minutes": 1,
    "parameters": [{"lookahead_minutes": 5}],
    "required_metrics": [{"name": name, "type": "system_metrics", "minute_range": 10} for name in OLD_METRICS],
}
OLD_AUTOSCALING: dict[str, Any] = {
    "setpoint": 0.7,
    "target_capacity_margin": 0.05,
    "scale_up_hedge": 0,
    "consolidation": {"enabled": False},
}
# Escalator's knobs, tuned on these traces (2 days each): of seven settings tried (scale up above
# 80-90%, taint bands 65-80% / 45-60%, removal rates 1-2 and 3-8 nodes a minute), the one with the
# lowest worst cost (1.18 x oracle) whose unmet demand stayed within a fifth of the least found.
ESCALATOR: dict[str, Any] = {
    "scale_up_threshold_percent": 88,
    "taint_upper_capacity_threshold_percent": 78,
    "taint_lower_capacity_threshold_percent": 55,
    "slow_node_removal_rate": 2,
    "fast_node_removal_rate": 6,
    "soft_delete_grace_period": "1m",
    "hard_delete_grace_period": "10m",
    "scale_up_hedge": 0,
    "consolidation": {"enabled": False},
}


def _nothing(raw: dict[str, Any]) -> None:
    """A row that keeps a file as it is."""


@dataclass(frozen=True)
class Row:
    """One configuration the scoreboard scores on every trace: how its main file (a copy of
    ``config/clusterman.yaml``) and its pool file differ from the shipped ones, and the decision its
    runs make. A workstream adds its rows with ``row`` (``ROWS``), each in a function of its own."""

    name: str
    main: Callable[[dict[str, Any]], None] = _nothing  # edits the main file's dict
    pool: Callable[[dict[str, Any]], None] = _nothing  # edits the pool file's dict
    decider: Callable[[], Decider] | None = None  # another autoscaler's rules, a fresh one per run
    perfect: bool = False  # the pool's signal knows the trace (bench/_perfect_forecast.py)
    tunable: bool = False  # --set applies to it
    fill: float | None = None  # utilisation the pool starts at; None: its setpoint


ROWS: dict[str, Row] = {}


def row(r: Row) -> Row:
    ROWS[r.name] = r
    return r


def _consolidation(**keys: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["autoscaling"]["consolidation"] = {**raw["autoscaling"].get("consolidation", {}), **keys}

    return edit


def _old(raw: dict[str, Any]) -> None:
    raw["autoscale_signal"] = OLD_SIGNAL
    raw["autoscaling"] = {**raw["autoscaling"], **OLD_AUTOSCALING}


def _internal(autoscaling: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A pool with no signal (running + pending pods) and these ``autoscaling`` keys."""

    def edit(pool: dict[str, Any]) -> None:
        pool["autoscale_signal"] = {"internal": True, "period_minutes": 1}
        pool["autoscaling"] = autoscaling

    return edit


# a peer's rules are its own (bench/_peers.py): the pool's keys only keep clusterman's out of it
PEER_AUTOSCALING: dict[str, Any] = {"scale_up_hedge": 0, "consolidation": {"enabled": False}}


def _spare(raw: dict[str, Any]) -> None:
    """One spare sized from measured risk (docs/scaling.md): the signal's newsvendor quantile, kept
    by the decision as whole places and as its band; no setpoint, margin, reserve or packing of
    its own."""
    raw["autoscaling"] |= {"setpoint": 1.0, "target_capacity_margin": 0, "slot_reserve": 1,
                           "slot_reserve_fraction": 0, "slot_reserve_band": 1, "spare": True,
                           "consolidation": {"enabled": False}}  # fmt: skip
    raw["autoscale_signal"]["parameters"].append({"shortfall_price": 20})


def _spare_places(raw: dict[str, Any]) -> None:
    """The shipped default with the slot reserve made of the spare (docs/scaling.md): places for
    the share of the signals' spare that comes as large pods, at least 2, and its band."""
    raw["autoscaling"] |= {"slot_reserve": 2, "slot_reserve_fraction": 0, "slot_reserve_band": 1, "spare": True}


row(Row("old", main=_old))
row(Row("new", tunable=True))
row(Row("unconsolidated", main=_consolidation(enabled=False), tunable=True))
row(Row("eager", main=_consolidation(enabled=True, surplus=0), tunable=True))
row(Row("escalator", pool=_internal(ESCALATOR), fill=ESCALATOR["scale_up_threshold_percent"] / 100))
row(Row("perfect", perfect=True, tunable=True))
row(Row("spare", main=_spare, tunable=True))
row(Row("spare-places", main=_spare_places, tunable=True))
row(Row("ca", pool=_internal(PEER_AUTOSCALING), decider=ClusterAutoscaler, fill=1.0))
row(Row("karpenter", pool=_internal(PEER_AUTOSCALING), decider=Karpenter, fill=1.0))


def _migration_rows() -> None:
    """Node migration's rows (docs/node_lifecycle.md): **migrating** is the shipped default whose
    group's launch template gets a new version after a day, so every node drifts and is replaced
    (rate 5, prescaling 2%); **recycled** keeps every node younger than 2 days (max_uptime, rate 5)."""

    def migrating(pool: dict[str, Any]) -> None:
        pool["node_migration"] = {"trigger": {"drift": True}, "strategy": {"rate": 5, "prescaling": "2%"}}
        pool["simulation"]["new_template_at_minutes"] = [24 * 60]

    def recycled(pool: dict[str, Any]) -> None:
        pool["node_migration"] = {"trigger": {"max_uptime": "2d"}, "strategy": {"rate": 5}}

    row(Row("migrating", pool=migrating))
    row(Row("recycled", pool=recycled))


_migration_rows()


def _interruption_rows() -> None:
    """Spot interruptions' rows (docs/simulator.md, "Spot interruptions"): the shipped default on a
    Spot pool interrupted once per 100 instance-hours, with the warnings handled (**spot**: the node
    drained and replaced in the run that reads the warning), without (**spot-unhandled**: it just
    goes and its pods are lost), and the same pool never interrupted (**spot-calm**): what the
    interruptions cause is each row's unmet demand and cost beside it."""

    def spot(rate: float, handling: bool) -> Callable[[dict[str, Any]], None]:
        def edit(pool: dict[str, Any]) -> None:
            pool["simulation"] |= {"interruptions_per_node_hour": rate, "interruption_handling": handling}

        return edit

    row(Row("spot", pool=spot(0.01, True)))
    row(Row("spot-unhandled", pool=spot(0.01, False)))
    row(Row("spot-calm", pool=spot(0.0, True)))


_interruption_rows()

# the rows a board runs unless told: consolidation's own variants only when asked for
BOARD = ("old", "new", "perfect", "escalator", "ca", "karpenter", "migrating")
# the simulated scheduler's placements the old and new defaults are also scored under (docs/simulator.md)
OTHER_PLACEMENTS = ("most_allocated", "least_allocated")
INTEGER_CONSOLIDATION_KEYS = ("drains_per_run", "evictions_per_hour")
AUTOSCALING_KEYS = ("setpoint", "target_capacity_margin", "slot_reserve", "slot_reserve_band", "slot_reserve_fraction",
                    "scale_up_hedge", "spare")  # fmt: skip

# The pods a trace's demand runs as: the mix of four sizes, or pods of one size. A trace named
# "<shape>" runs the mix, "<shape>-<pods>" the pods named.
PODS: dict[str, list[dict[str, float]]] = {
    "mix": POOL["simulation"]["demand_mix"],
    "1cpu": [{"weight": 1, "cpus": 1}],
    "4cpu": [{"weight": 1, "cpus": 4}],
}
SEEDS = (1, 2, 3)  # each trace drawn three times: one week holds few crowds and bursts
BOARD_TRACES = (
    *TRACES,
    *(f"{shape}-1cpu" for shape in ("diurnal", "flash", "batch", "walk")),
    *(f"{shape}-4cpu" for shape in ("diurnal", "flash", "batch")),
)


def shape_of(name: str) -> tuple[str, str]:
    """(the demand's shape, its pods) of a trace's name."""
    shape, _, pods = name.partition("-")
    if shape not in TRACES or (pods or "mix") not in PODS:
        raise ValueError(f"no trace {name!r}: a shape of {', '.join(TRACES)}, then -{' or -'.join(PODS)} or nothing")
    return shape, pods or "mix"


def trace_names() -> list[str]:
    return [*TRACES, *(f"{shape}-{pods}" for shape in TRACES for pods in PODS if pods != "mix")]


def main_config(workdir: Path, variant: str, overrides: dict[str, Any] | None = None) -> Path:
    """The main file for a row: the shipped one as the row edits it; ``overrides`` (the tunable
    rows) set signal parameters or ``autoscaling`` keys."""
    raw = yaml.safe_load(MAIN.read_text())
    r = ROWS[variant]
    r.main(raw)
    if r.tunable and overrides:
        for key, value in overrides.items():
            if key.startswith("consolidation."):
                block = raw["autoscaling"].setdefault("consolidation", {})
                name = key.partition(".")[2]
                block[name] = int(value) if name in INTEGER_CONSOLIDATION_KEYS else value
            elif key in AUTOSCALING_KEYS:
                raw["autoscaling"][key] = int(value) if key in ("slot_reserve", "slot_reserve_band") else value
            else:
                params = [p for p in raw["autoscale_signal"]["parameters"] if key not in p]
                raw["autoscale_signal"]["parameters"] = [*params, {key: value}]
    raw["cluster_config_directory"] = str(MAIN.parent / raw.get("cluster_config_directory", "clusterman-clusters"))
    raw["state_directory"] = str(workdir / "state")
    path = workdir / f"main-{variant}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def pool_file(
    workdir: Path,
    variant: str,
    name: str,
    initial: int,
    signal: dict[str, Any] | None = None,
    placement: str = "first_fit",
) -> Path:
    """The pool file; ``signal``: the pool's own ``autoscale_signal``, if any; ``placement``: the
    simulated scheduler's (``docs/simulator.md``), which consolidation is told, as an operator
    would; a scheduler that spreads pods undoes any packing, so there it is off (docs/scoreboard.md)."""
    pods = PODS[shape_of(name)[1]]
    simulation = {**POOL["simulation"], "initial_capacity": initial, "placement": placement, "demand_mix": pods}
    pool: dict[str, Any] = {**POOL, "simulation": simulation}
    if placement in CONSOLIDATION_PLACEMENTS:
        pool["autoscaling"] = {"consolidation": {"placement": placement}}
    else:
        pool["autoscaling"] = {"consolidation": {"enabled": False}}
    ROWS[variant].pool(pool)
    if signal is not None:
        pool["autoscale_signal"] = signal
    path = workdir / f"{variant}-{name}" / "web.kubernetes"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(pool))
    return path


def metrics_file(workdir: Path, name: str, days: float, seed: int = 1) -> tuple[Path, float]:
    """The trace's demand as the pool's ``cpus_allocated`` (the same file for every kind of pods)."""
    shape = shape_of(name)[0]
    points = trace(shape, days, seed)
    path = workdir / f"{shape}-{seed}.json.gz"
    key = system_key("cpus_allocated", "bench", "web.kubernetes")
    write_metrics_file(path, {MetricType.SYSTEM_METRICS: {key: [(t, float(v)) for t, v in points]}})
    return path, points[0][1]


def score(
    workdir: Path,
    variant: str,
    name: str,
    data: Path,
    first: float,
    days: float,
    overrides: dict[str, Any] | None = None,
    episodes: bool = False,
    placement: str = "first_fit",
    breakdown: bool = False,
    seed: int = 1,
) -> dict[str, Any]:
    """One row's run of one trace (``data``, drawn with ``seed``)."""
    r = ROWS[variant]
    shape, pods = shape_of(name)
    main = load_main_config(main_config(workdir, variant, overrides))
    setpoint = OLD_AUTOSCALING["setpoint"] if variant == "old" else main.autoscaling.setpoint
    initial = max(1, math.ceil(first / (NODE_CPUS * (r.fill or setpoint))))
    signal = None
    if r.perfect:  # looking as far ahead as the shipped signal's horizon
        horizon = shipped_signal(main).parameters["horizon_minutes"]
        signal = perfect_forecast.pool_signal(shape, days, horizon, seed)
    scenario = load_scenario(main, Request(pool_file(workdir, variant, name, initial, signal, placement), [data]))
    split = CostSplit(max(p["cpus"] for p in PODS[pods])) if breakdown else None
    started = time.perf_counter()
    result = simulate(scenario, on_run=split, decider=r.decider() if r.decider else decide)
    seconds = time.perf_counter() - started
    plots = os.environ.get("CLUSTERMAN_BENCH_PLOTS")
    if plots and variant == "new":
        write_plot(Path(plots) / f"scoreboard-{name}.png", result.timeline, f"{name}: the default", small=True)
    s = summary(result, "pool", [name])
    print(f"  {name} {variant}: {seconds:.1f} s", file=sys.stderr)
    out: dict[str, Any] = {}
    if shape == "flash":
        out["crowds"] = crowd_floor(result.timeline)
    out["bound"] = bound(shape, days, s["unmet_demand"]["cpu_minutes"], seed)
    if result.interruptions is not None:
        out["interruptions"] = result.interruptions.as_json()
    if episodes:
        if shape == "flash":
            print(f"    crowds: {out['crowds']}", file=sys.stderr)
        print(shortfalls(result.timeline), file=sys.stderr)
        t = result.timeline
        means = {k: math.fsum(t[k]) / len(t) for k in ("demand_cpus", "allocated_cpus", "joined_cpus", "paid_cpus")}
        print("    mean CPUs: " + ", ".join(f"{k} {v:.1f}" for k, v in means.items()), file=sys.stderr)
    if split is not None:
        t = result.timeline
        paid = math.fsum(t["paid_cpus"]) / len(t)
        out["breakdown"] = {
            "oracle": round(paid / s["cost"]["vs_oracle"], 1),
            "paid": round(paid, 1),
            "joining": round(paid - math.fsum(t["joined_cpus"]) / len(t), 1),
            **split.means(),
        }
        print("    where (mean CPUs): " + ", ".join(f"{k} {v}" for k, v in out["breakdown"].items()), file=sys.stderr)
    return {
        **out,
        "cost_vs_oracle": s["cost"]["vs_oracle"],
        "unmet_cpu_minutes": round(s["unmet_demand"]["cpu_minutes"], 1),
        "minutes_short": s["unmet_demand"]["minutes_with_shortfall"],
        "target_changes_per_day": round(s["scaling"]["actions"] / days, 1),
        "evictions_per_day": round(s["scaling"]["evictions"] / days, 1),
        "consolidated_per_day": round(s["scaling"]["nodes_consolidated"] / days, 1),
        "seconds": round(seconds, 2),
    }


class CostSplit:
    """Where the capacity above the demand goes, averaged over the runs, in CPUs: what the signals
    asked for above the demand (``signal``), the ready nodes' free room as whole places for the
    largest pod (``places``) and as pieces smaller than one (``fragments``), and the free room on
    tainted nodes (``draining``). Paid above the oracle is these, less what the oracle itself pays
    above the demand, plus nodes still joining."""

    KEYS = ("demand", "signal", "places", "fragments", "draining")

    def __init__(self, slot_cpus: float = 4.0) -> None:
        self.slot_cpus = slot_cpus  # the largest pod: a whole free place
        self.runs = 0
        self.sums = dict.fromkeys(self.KEYS, 0.0)

    def __call__(self, report: RunReport) -> None:
        snapshot, decision = report.snapshot, report.decision
        if snapshot is None or decision is None:
            return
        demand = math.fsum(t.requests.cpus for n in snapshot.nodes for t in n.tasks if not t.daemon)
        demand += math.fsum(t.requests.cpus for t in snapshot.pending)
        add = dict.fromkeys(self.KEYS, 0.0)
        add["demand"] = demand
        add["signal"] = float(decision.demand.get("cpus", demand)) - demand
        for node in snapshot.nodes:
            free = node.allocatable.cpus - node.usage.allocated_reserved.cpus - node.usage.allocated_unreserved.cpus
            if node.state is NodeState.READY:
                whole = math.floor(free / self.slot_cpus + 1e-9) * self.slot_cpus
                add["places"] += whole
                add["fragments"] += free - whole
            elif node.state is NodeState.TAINTED:
                add["draining"] += free
        self.runs += 1
        for key, value in add.items():
            self.sums[key] += value

    def means(self) -> dict[str, float]:
        return {k: round(v / max(self.runs, 1), 1) for k, v in self.sums.items()}


@functools.cache
def _frontier(name: str, days: float, seed: int) -> list[frontier.Point]:
    return frontier.frontier(name, days, seed=seed)


def bound(name: str, days: float, unmet: float, seed: int = 1) -> dict[str, float] | None:
    """The least cost ÷ oracle any autoscaler pays at no more than ``unmet`` CPU-minutes unmet, and
    the spare that takes (``_frontier.py``); None when the frontier always leaves more, or does
    not know the trace's law."""
    if name not in frontier.SHAPES:
        return None
    best = frontier.cheapest(_frontier(name, days, seed), unmet)
    if best is None:
        return None
    return {"cost_vs_oracle": round(best.cost_vs_oracle, 3), "spare_cpus": round(best.spare, 1)}


def shipped_signal(main: MainConfig) -> SignalConfig:
    """The main file's default signal (``config/clusterman.yaml`` names one)."""
    if main.autoscale_signal is None:
        raise ValueError(f"{MAIN}: no autoscale_signal")
    return main.autoscale_signal


def signal_cost(points: int = 1500) -> dict[str, Any]:
    """One run of the default signal over ``points`` points of each metric it reads."""
    from clusterman_signals.clusterman import ForecastHeadroom
    from clusterman_signals.clusterman import MostRecentResources

    names = [m.name for m in shipped_signal(load_main_config(MAIN)).required_metrics]
    window = {n: [[1_700_000_000 + 60 * k, 100.0 + (k % 37)] for k in range(points)] for n in names}
    new = ForecastHeadroom("c", "p", {})
    old = MostRecentResources("c", "p", {"lookahead_minutes": 5})
    now = window[names[0]][-1][0]
    new.evaluate(window, now)  # the refresh (period and headroom), every refresh_minutes
    refresh = median_of(lambda: ForecastHeadroom("c", "p", {}).evaluate(window, now), 3)
    steady = median_of(lambda: new.evaluate(window, now), 20)
    baseline = median_of(lambda: old.evaluate(window, now), 20)
    return {
        "points_per_metric": points,
        "metrics": len(names),
        "run_ms": round(steady * 1e3, 3),
        "refresh_run_ms": round(refresh * 1e3, 2),
        "most_recent_resources_ms": round(baseline * 1e3, 3),
    }


def shortfalls(timeline: Any) -> str:
    """Each stretch of minutes with a shortfall: its start (hours into the run), minutes, CPU-minutes."""
    times, demand, allocated = timeline["time"], timeline["demand_cpus"], timeline["allocated_cpus"]
    out, start, unmet = [], -1, 0.0
    for k in range(len(times) + 1):
        short = demand[k] - allocated[k] if k < len(times) else 0.0
        if short > 1e-6:
            if start < 0:
                start, unmet = k, 0.0
            unmet += short
        elif start >= 0:
            out.append(f"    at {(times[start] - times[0]) / 3600:6.2f} h: {k - start:3d} min, {unmet:7.0f} CPU-min")
            start = -1
    return "\n".join(out) or "    no shortfall"


def crowd_floor(timeline: Any, join_minutes: int = 3, jump: float = 100.0) -> dict[str, float]:
    """What this run could not have avoided at the crowds (rises of more than ``jump`` CPUs in a
    minute), given the capacity it had joined the minute before: the demand above it over the next
    ``join_minutes`` (capacity launched when the crowd is first seen joins no sooner). With the
    spare it carried then, mean over the crowds."""
    d, joined = timeline["demand_cpus"], timeline["joined_cpus"]
    spares, floor = [], 0.0
    for t in range(1, len(d)):
        if d[t] - d[t - 1] > jump:
            spares.append(joined[t - 1] / d[t - 1] - 1 if d[t - 1] > 0 else 0.0)
            floor += math.fsum(max(0.0, v - joined[t - 1]) for v in d[t : t + join_minutes])
    return {
        "count": len(spares),
        "mean_spare_before": round(math.fsum(spares) / len(spares), 3) if spares else 0.0,
        "unavoidable_cpu_minutes": round(floor, 1),
    }


# the rises no forecast sees, in CPUs within a minute: flash's crowds, steps' jumps, and batch's
# waves while no period is in the history yet (its first two; every later one is foreseen)
SURPRISES: dict[str, tuple[float, int | None]] = {"flash": (100.0, None), "steps": (40.0, None), "batch": (60.0, 2)}


def surprise_bound(
    shape: str, spare: float, days: float = 7.0, seed: int = 1, join_minutes: int = 3
) -> tuple[int, int, float]:
    """What no policy avoids on a trace's surprises (``SURPRISES``) when it sees one at the
    earliest in the minute it starts and carries ``spare`` × the demand as free capacity: what it
    launches then joins ``join_minutes`` later, and until then the demand above (1 + spare) × the
    demand of the minute before is unmet. (Free capacity split over nodes only adds to it.) A rise
    over several minutes running is one surprise. Returns (surprises, minutes short, unmet
    CPU-minutes)."""
    jump, first = SURPRISES[shape]
    d = [v for _, v in trace(shape, days, seed)]
    starts = [t for t in range(1, len(d)) if d[t] - d[t - 1] > jump and not d[t - 1] - d[t - 2] > jump]
    starts = starts[:first] if first else starts
    minutes, unmet = 0, 0.0
    for t in starts:
        room = (1 + spare) * d[t - 1]
        short = [v - room for v in d[t : t + join_minutes] if v > room]
        minutes += len(short)
        unmet += math.fsum(short)
    return len(starts), minutes, unmet


def flash_bound(spare: float, days: float = 7.0) -> tuple[int, float]:
    """``surprise_bound`` of the flash trace (seed 1): (crowds, unmet CPU-minutes)."""
    crowds, _, unmet = surprise_bound("flash", spare, days)
    return crowds, unmet


def run(
    quick: bool,
    days: float | None = None,
    traces: tuple[str, ...] = BOARD_TRACES,
    variants: tuple[str, ...] = BOARD,
    overrides: dict[str, Any] | None = None,
    episodes: bool = False,
    placement: str = "first_fit",
    breakdown: bool = False,
    seeds: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """The scoreboard; run whole (``make bench``), also the old and new defaults under the
    simulated scheduler's other placements (``OTHER_PLACEMENTS``). With several ``seeds`` each
    trace is drawn once per seed, and the board is their mean (``mean_board``); one week holds
    only four flash crowds and 41 diurnal bursts, so one draw can move a figure more than a
    change of setting does."""
    days = days or (1.5 if quick else 7.0)
    seeds = seeds or ((1,) if quick else SEEDS)
    whole = variants == BOARD and traces == BOARD_TRACES
    with tempfile.TemporaryDirectory(prefix="bench-scoreboard-") as tmp:
        workdir = Path(tmp)
        out: dict[str, Any] = {"days": days, "placement": placement}
        boards, drawn = {}, {}
        for seed in seeds:
            drawn[seed] = files = {name: metrics_file(workdir, name, days, seed) for name in traces}
            boards[seed] = board(workdir, days, files, variants, overrides, episodes, placement, breakdown, seed)
            if len(seeds) > 1:
                print(f"seed {seed}:\n" + table({"days": days, **boards[seed]}), file=sys.stderr)
        if len(seeds) == 1:
            out |= boards[seeds[0]]
        else:
            out["seeds"] = {str(seed): boards[seed] for seed in seeds}
            out |= mean_board([boards[seed] for seed in seeds])
            print(f"mean over seeds {', '.join(map(str, seeds))}:", file=sys.stderr)
            print(spreads(out), file=sys.stderr)
        print(table(out), file=sys.stderr)
        if whole:
            out["signal_cost"] = signal_cost()
            out["placements"] = {}
            for other in OTHER_PLACEMENTS:
                mixed = {name: f for name, f in drawn[seeds[0]].items() if name in TRACES}
                scores = board(workdir, days, mixed, ("old", "new"), None, False, other, seed=seeds[0])
                out["placements"][other] = scores
                print(f"placement {other}:\n" + table({"days": days, **scores}), file=sys.stderr)
    return out


def board(
    workdir: Path,
    days: float,
    files: dict[str, tuple[Path, float]],
    variants: tuple[str, ...],
    overrides: dict[str, Any] | None,
    episodes: bool,
    placement: str,
    breakdown: bool = False,
    seed: int = 1,
) -> dict[str, Any]:
    """Every trace (its ``metrics_file``, drawn with ``seed``) under every variant, and the totals
    per variant."""
    out: dict[str, Any] = {"traces": {}}
    for name, (data, first) in files.items():
        out["traces"][name] = {
            v: score(workdir, v, name, data, first, days, overrides, episodes, placement, breakdown, seed)
            for v in variants
        }
        for v, r in out["traces"][name].items():
            if r.get("bound"):
                b = r["bound"]
                at = f"at ≤ {r['unmet_cpu_minutes']:,.0f} unmet CPU-minutes"
                least = f"{b['cost_vs_oracle']:.3f} × the oracle (spare {b['spare_cpus']:g} CPUs)"
                who = "no pool whose nodes join in 3 minutes"
                print(f"  {name} {v}: {at} {who} costs less than {least}", file=sys.stderr)
    out["totals"] = totals(out["traces"], variants)
    return out


def totals(traces: dict[str, dict[str, Any]], variants: tuple[str, ...]) -> dict[str, Any]:
    """Per variant over all traces: the worst cost, and the sums of the rest."""
    out = {}
    for v in variants:
        rows = [by_variant[v] for by_variant in traces.values()]
        out[v] = {
            "worst_cost_vs_oracle": max(r["cost_vs_oracle"] for r in rows),
            "unmet_cpu_minutes": round(sum(r["unmet_cpu_minutes"] for r in rows), 1),
            "minutes_short": sum(r["minutes_short"] for r in rows),
            "target_changes_per_day": round(sum(r["target_changes_per_day"] for r in rows), 1),
            "evictions_per_day": round(sum(r["evictions_per_day"] for r in rows), 1),
            "consolidated_per_day": round(sum(r["consolidated_per_day"] for r in rows), 1),
        }
    return out


MEANS = ("cost_vs_oracle", "unmet_cpu_minutes", "minutes_short", "target_changes_per_day", "evictions_per_day",
         "consolidated_per_day", "seconds")  # fmt: skip


def mean_board(boards: list[dict[str, Any]]) -> dict[str, Any]:
    """Each cell the mean of its figures over the boards, with the least and most cost and unmet
    seen (``cost_range``, ``unmet_range``) and the frontier's mean cost where every draw has one."""
    traces: dict[str, dict[str, Any]] = {}
    for name, by_variant in boards[0]["traces"].items():
        traces[name] = {}
        for v in by_variant:
            cells = [b["traces"][name][v] for b in boards]
            cell: dict[str, Any] = {k: round(math.fsum(c[k] for c in cells) / len(cells), 3) for k in MEANS}
            for key, figure in (("cost_range", "cost_vs_oracle"), ("unmet_range", "unmet_cpu_minutes")):
                cell[key] = [min(c[figure] for c in cells), max(c[figure] for c in cells)]
            if all(c.get("bound") for c in cells):
                least = math.fsum(c["bound"]["cost_vs_oracle"] for c in cells) / len(cells)
                cell["bound"] = {"cost_vs_oracle": round(least, 3)}
            traces[name][v] = cell
    variants = tuple(next(iter(traces.values())))
    return {"traces": traces, "totals": totals(traces, variants)}


def spreads(out: dict[str, Any]) -> str:
    """One line per trace and variant: the range of cost and unmet over the draws, and the frontier."""
    lines = []
    for name, by_variant in out["traces"].items():
        for v, c in by_variant.items():
            least = f", frontier {c['bound']['cost_vs_oracle']:.3f} at each draw's unmet" if "bound" in c else ""
            lines.append(
                f"  {name} {v}: cost {c['cost_range'][0]:.3f}-{c['cost_range'][1]:.3f}, unmet "
                f"{c['unmet_range'][0]:,.0f}-{c['unmet_range'][1]:,.0f} CPU-minutes{least}"
            )
    return "\n".join(lines)


def table(out: dict[str, Any]) -> str:
    lines = [
        f"scoreboard ({out['days']:g} days per trace): cost/oracle | unmet CPU-min | minutes short | changes/day"
        " | evictions/day | consolidated nodes/day",
        f"{'trace':<10}" + "".join(f"{v:>48}" for v in out["totals"]),
    ]
    rows = [
        *out["traces"].items(),
        ("all", {v: {**t, "cost_vs_oracle": t["worst_cost_vs_oracle"]} for v, t in out["totals"].items()}),
    ]
    for name, by_variant in rows:
        cells = []
        for v in out["totals"]:
            r = by_variant[v]
            cells.append(
                f"{r['cost_vs_oracle']:>7.3f} {r['unmet_cpu_minutes']:>9.0f} {r['minutes_short']:>6.0f} "
                f"{r['target_changes_per_day']:>7.1f} {r['evictions_per_day']:>6.0f} "
                f"{r['consolidated_per_day']:>5.0f}   "
            )
        lines.append(f"{name:<10}" + "".join(f"{c:>48}" for c in cells))
    return "\n".join(lines)


def plot_board(out: dict[str, Any], path: Path) -> None:
    """Each trace's rows as points: cost ÷ oracle against unmet CPU-minutes (docs/scaling.md)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(out["traces"])
    figure = Figure(figsize=(3.2 * len(names), 3.0))
    FigureCanvasAgg(figure)
    for k, name in enumerate(names):
        ax = figure.add_subplot(1, len(names), k + 1)
        for v, r in out["traces"][name].items():
            ax.scatter(r["unmet_cpu_minutes"] + 1, r["cost_vs_oracle"], s=18)
            ax.annotate(v, (r["unmet_cpu_minutes"] + 1, r["cost_vs_oracle"]), fontsize=7)
        ax.set_xscale("log")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("unmet CPU-minutes + 1", fontsize=8)
        ax.tick_params(labelsize=7)
        if k == 0:
            ax.set_ylabel("cost ÷ oracle", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scoreboard")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--traces", nargs="+", default=list(BOARD_TRACES), choices=trace_names())
    parser.add_argument("--variants", nargs="+", default=list(BOARD), choices=list(ROWS))
    tunable = " and ".join(r.name for r in ROWS.values() if r.tunable)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=f"{tunable} only")
    parser.add_argument("--episodes", action="store_true", help="list each stretch of shortfall")
    parser.add_argument("--breakdown", action="store_true", help="where the capacity above the demand goes")
    parser.add_argument("--placement", default="first_fit", choices=PLACEMENTS, help="the simulated scheduler's")
    parser.add_argument("--bound", nargs="*", type=float, metavar="SPARE", help="only the surprises' lower bounds")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="draw each trace once per seed; the mean")
    parser.add_argument("--plot", type=Path, help="draw each trace's rows, cost against unmet demand, as a PNG")
    parser.add_argument("--json", type=Path, help="write the board as JSON (make bench's document) here")
    args = parser.parse_args(argv)
    if args.bound is not None:
        for spare in args.bound or (0.0, 0.1, 0.14, 0.2, 0.3, 0.43, 0.5):
            crowds, unmet = flash_bound(spare, args.days)
            print(f"spare {spare:.2f}: {crowds} crowds, at least {unmet:,.0f} unmet CPU-minutes")
            for shape in SURPRISES:
                found = [surprise_bound(shape, spare, args.days, seed) for seed in args.seeds]
                print(f"  {shape}, seeds {' '.join(map(str, args.seeds))}: at least "
                      f"{', '.join(str(m) for _, m, _ in found)} minutes short")  # fmt: skip
        return 0
    overrides = {k: _value(v) for k, _, v in (item.partition("=") for item in args.set)}
    out = run(
        False,
        args.days,
        tuple(args.traces),
        tuple(args.variants),
        overrides,
        args.episodes,
        args.placement,
        args.breakdown,
        tuple(args.seeds),
    )
    if args.plot:
        plot_board(out, args.plot)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _value(text: str) -> Any:
    """A --set value: true or false, a number, else the string (a placement's name)."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


if __name__ == "__main__":
    sys.exit(main())

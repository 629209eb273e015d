"""The programs the benchmarks run as baselines still run: a renamed import must not surface only in `make bench`."""

from __future__ import annotations

import bisect
import itertools
import math
import subprocess
import sys

import pytest

from bench.cli_startup import EAGER
from bench.cli_startup import ROOT


def test_the_eager_cli_baseline_still_builds_every_command():
    done = subprocess.run(
        [sys.executable, "-c", EAGER, "signal", "evaluate", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--metrics" in done.stdout


def test_the_perfect_forecast_asks_for_the_largest_demand_of_the_next_horizon():
    from bench._perfect_forecast import PerfectForecast
    from bench._traces import START
    from bench._traces import trace

    demand = [v for _, v in trace("batch", 0.1)]
    signal = PerfectForecast("c", "p", {"trace": "batch", "days": 0.1, "horizon_minutes": 4})
    assert signal.value({}, START + 60 * 25 + 30).cpus == max(demand[25:30])
    assert signal.value({}, START + 60 * 10_000).cpus == demand[-1]  # past the end: the last minute


def test_the_scoreboard_replays_the_shipped_decision_with_the_perfect_forecast(tmp_path):
    from bench import scoreboard

    data, first = scoreboard.metrics_file(tmp_path, "batch", 0.1)
    new = scoreboard.score(tmp_path, "new", "batch", data, first, 0.1)
    perfect = scoreboard.score(tmp_path, "perfect", "batch", data, first, 0.1)
    # the first wave (minute 30) comes during the default's warm-up: only a forecast that knows it
    # has the capacity there when it starts
    assert new["unmet_cpu_minutes"] > 0
    assert perfect["unmet_cpu_minutes"] == 0
    # the scheduler's placement reaches the simulated pool: spreading costs more than first fit
    spread = scoreboard.score(tmp_path, "new", "batch", data, first, 0.1, placement="least_allocated")
    assert spread["cost_vs_oracle"] > new["cost_vs_oracle"]


def test_the_scoreboard_scores_consolidation_beside_the_shipped_default(tmp_path):
    from bench import scoreboard
    from clusterman.config.loader import load_main_config

    def consolidation(variant: str) -> tuple[bool | None, float | None]:
        c = load_main_config(scoreboard.main_config(tmp_path, variant)).autoscaling.consolidation
        return c.enabled, c.surplus

    shipped = load_main_config(scoreboard.MAIN).autoscaling.consolidation
    assert consolidation("new") == consolidation("perfect") == (shipped.enabled, shipped.surplus)
    assert consolidation("unconsolidated")[0] is False and consolidation("old")[0] is False
    assert consolidation("eager") == (True, 0)


def test_every_module_make_bench_runs_is_a_benchmark():
    # python -m bench runs every module of bench/ not starting with "_": a helper named like a
    # benchmark stops `make bench` halfway (bench/_perfect_forecast.py once did)
    import importlib

    from bench.__main__ import discover

    assert all(callable(getattr(importlib.import_module(f"bench.{name}"), "run", None)) for name in discover())


def test_the_breakdown_splits_free_room_into_places_and_fragments():
    from fractions import Fraction

    from bench.scoreboard import CostSplit
    from clusterman.core.model import Node
    from clusterman.core.model import NodeState
    from clusterman.core.model import PoolSnapshot
    from clusterman.core.model import Task
    from clusterman.core.resources import Resources
    from clusterman.decision.result import Action
    from clusterman.decision.result import Decision
    from clusterman.run.report import Outcome
    from clusterman.run.report import RunReport

    def node(name: str, state: NodeState, *used: float) -> Node:
        tasks = tuple(Task(f"{name}-{k}", Resources(cpus=c)) for k, c in enumerate(used))
        return Node(name, state, Resources(cpus=8), tasks=(*tasks, Task(f"{name}-d", Resources(cpus=1), daemon=True)))

    # free (a daemon is part of the node, as for the decision): 8 - 2 = 6 (a place and 2),
    # 8 - 3.5 = 4.5 (a place and 0.5), tainted 8 - 4 = 4; demand 2 + 3.5 + 4 running and 2 pending
    nodes = (node("a", NodeState.READY, 1, 1), node("b", NodeState.READY, 3, 0.5), node("c", NodeState.TAINTED, 4))
    snapshot = PoolSnapshot(0.0, nodes, pending=(Task("p", Resources(cpus=2)),))
    decision = Decision(Action.NONE, Fraction(2), Fraction(2), Fraction(2), {}, "", demand={"cpus": Fraction(20)})
    split = CostSplit()
    split(RunReport(0.0, Outcome.ACTED, snapshot=snapshot, decision=decision))
    split(RunReport(60.0, Outcome.NO_DEMAND, snapshot=snapshot))  # no decision: not a run that counts
    assert split.means() == {"demand": 11.5, "signal": 8.5, "places": 8.0, "fragments": 2.5, "draining": 4.0}


def test_collecting_a_traces_surprises_leaves_the_trace_as_it_was():
    import random

    from bench._traces import TRACES
    from bench._traces import surprises

    for name in ("diurnal", "flash"):
        events: list = []
        with_events = TRACES[name](2880, random.Random(f"{name}-1"), events)
        assert with_events == TRACES[name](2880, random.Random(f"{name}-1"))
        assert events == surprises(name, 2) and events, name
        for start, adds in events:  # each event is part of its minutes' demand
            assert all(with_events[start + k] >= cpus for k, cpus in enumerate(adds))
    bursts = surprises("diurnal", 7)  # the frontier carries no spare while one is under way
    assert all(b[0] >= a[0] + len(a[1]) for a, b in itertools.pairwise(bursts))
    assert surprises("walk", 2) == []


def test_the_frontier_takes_the_cheapest_nodes_for_each_price_of_unmet_demand():
    from bench import _frontier

    minute = _frontier._Minute(mean=100.0, spread=6.0, chance=0.01, sizes=(20.0, 35.0))
    lo, saved = _frontier._savings(minute)
    for weight in (1.0, 30.0, 5000.0):
        chosen = lo + bisect.bisect_left(saved, -1 / weight)
        best = min(range(40), key=lambda n: n + weight * _frontier._short(minute, n))
        assert chosen == best
    assert abs(_frontier._above(0.0, 6.0) - 6.0 / math.sqrt(2 * math.pi)) < 1e-12


def test_the_frontier_is_a_convex_hull_and_unmet_demand_costs_along_it():
    from bench._frontier import cheapest
    from bench._frontier import frontier

    points = frontier("diurnal", 1)
    assert len(points) >= 3
    for a, b in itertools.pairwise(points):  # least unmet first: each step leaves more for less
        assert a.unmet < b.unmet and a.cost_vs_oracle > b.cost_vs_oracle
    rates = [(a.cost_vs_oracle - b.cost_vs_oracle) / (b.unmet - a.unmet) for a, b in itertools.pairwise(points)]
    assert rates == sorted(rates, reverse=True)  # each step saves less per CPU-minute than the last
    assert cheapest(points, points[0].unmet - 1) is None
    middle = cheapest(points, (points[0].unmet + points[1].unmet) / 2)
    assert middle is not None and points[1].cost_vs_oracle < middle.cost_vs_oracle < points[0].cost_vs_oracle
    # burst-free growth needs far less spare for no unmet demand than diurnal's bursts do
    growth = cheapest(frontier("growth", 1), 0.0)
    assert growth is not None and growth.spare < cheapest(points, points[0].unmet).spare


def test_a_board_over_several_draws_is_the_mean_of_each_draws_figures():
    from bench import scoreboard

    def cell(cost: float, unmet: float, least: float | None) -> dict:
        figures = dict.fromkeys(scoreboard.MEANS, 1.0) | {"cost_vs_oracle": cost, "unmet_cpu_minutes": unmet}
        return figures | ({"bound": {"cost_vs_oracle": least}} if least else {"bound": None})

    boards = [
        {"traces": {"flash": {"new": cell(1.10, 1500.0, 1.05)}, "batch": {"new": cell(1.20, 10.0, 1.0)}}},
        {"traces": {"flash": {"new": cell(1.14, 2100.0, 1.07)}, "batch": {"new": cell(1.22, 30.0, None)}}},
    ]
    mean = scoreboard.mean_board(boards)
    flash, batch = mean["traces"]["flash"]["new"], mean["traces"]["batch"]["new"]
    assert flash["cost_vs_oracle"] == 1.12 and flash["unmet_cpu_minutes"] == 1800.0
    assert flash["cost_range"] == [1.10, 1.14] and flash["unmet_range"] == [1500.0, 2100.0]
    assert flash["bound"] == {"cost_vs_oracle": 1.06}
    assert "bound" not in batch  # one draw had no frontier point at its unmet: no mean of it
    assert mean["totals"]["new"]["worst_cost_vs_oracle"] == 1.21
    assert mean["totals"]["new"]["unmet_cpu_minutes"] == 1820.0
    assert "flash new: cost 1.100-1.140, unmet 1,500-2,100 CPU-minutes, frontier 1.060" in scoreboard.spreads(mean)


def test_a_seed_draws_another_week_of_the_same_trace_and_the_frontier_follows_it():
    from bench._frontier import frontier
    from bench._perfect_forecast import PerfectForecast
    from bench._traces import START
    from bench._traces import trace

    first, other = trace("batch", 1), trace("batch", 1, seed=2)
    assert first == trace("batch", 1, seed=1) and first != other
    signal = PerfectForecast("c", "p", {"trace": "batch", "days": 1, "horizon_minutes": 0, "seed": 2})
    assert signal.value({}, START + 60 * 100).cpus == other[100][1]
    assert frontier("diurnal", 1, seed=2) != frontier("diurnal", 1)


def test_a_measuring_process_reports_its_own_peak_not_its_large_parents():
    """``make bench`` starts the Kubernetes measurements from a process of several GB."""
    held = bytearray(300 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # resident, not only reserved
    child = "from bench._memory import peak_rss_mb; print(peak_rss_mb())"
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, check=True)
    assert float(done.stdout) < 150
    assert len(held) == 300 * 2**20  # held while the child ran


def test_a_reset_peak_forgets_what_the_process_held_before():
    from bench._memory import peak_rss_mb
    from bench._memory import reset_peak
    from bench._memory import rss_mb

    before = rss_mb()
    held = bytearray(200 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])
    del held
    assert peak_rss_mb() >= 200
    assert reset_peak()
    assert peak_rss_mb() < before + 100


def test_make_bench_runs_each_benchmark_in_a_fresh_process():
    """What one benchmark leaves in memory must not count in the next one's figures."""
    from bench.__main__ import _in_own_process

    held = bytearray(300 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])
    (size,) = _in_own_process("mesos_snapshot", quick=True)["sizes"]
    assert size["agents"] == 300
    assert size["rss_before_mb"] < 150
    assert len(held) == 300 * 2**20


def test_the_node_migration_bench_builds_its_pools_on_the_scoreboard_s(tmp_path):
    from bench import node_migration

    def migrating(pool):
        pool["node_migration"] = node_migration.REPLACE
        pool["simulation"]["new_template_at_minutes"] = [node_migration.REPLACE_AT_MINUTES]

    scenario = node_migration.scenario(tmp_path, "replace", "noisy", 0.1, 2.6, "m5.2xlarge", migrating)
    pool = scenario.setup.pool
    assert pool.node_migration.trigger.drift and pool.node_migration.strategy.rate.of(100) == 5
    assert pool.simulation.new_template_at_minutes == (360,) and pool.simulation.instance_type == "m5.2xlarge"
    assert 80 <= pool.simulation.initial_capacity <= 130  # about a hundred nodes (115 when it is replaced)


def test_the_surprises_bound_counts_the_minutes_before_capacity_launched_at_a_rise_joins():
    from bench._traces import trace
    from bench.scoreboard import surprise_bound

    # flash: four crowds, each above (1 + spare) × the minute before for all 3 minutes of the join
    assert surprise_bound("flash", 0.2, days=7)[:2] == (4, 12)
    # batch: only its first two waves (6 hours apart), each rising over 3 minutes, counted once
    d = [v for _, v in trace("batch", 7)]
    rises = [t for t in range(1, len(d)) if d[t] - d[t - 1] > 60]
    starts = [t for k, t in enumerate(rises) if k == 0 or t - rises[k - 1] > 60][:2]
    assert starts[1] - starts[0] > 5 * 60
    room = {t: 1.2 * d[t - 1] for t in starts}
    expected = math.fsum(v - room[t] for t in starts for v in d[t : t + 3] if v > room[t])
    waves, minutes, unmet = surprise_bound("batch", 0.2, days=7)
    assert (waves, minutes) == (2, 6) and unmet == pytest.approx(expected)
    # a larger spare never leaves more
    assert surprise_bound("steps", 0.5, days=2)[1] <= surprise_bound("steps", 0.2, days=2)[1]

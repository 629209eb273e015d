"""Demand as pods of several sizes that leave at random (and live a while), beside the old mode."""

import pytest

from clusterman.cluster.simulated_scheduler import DemandTrace
from clusterman.core.config import SimulationConfig
from clusterman.core.config_schema import ConfigError
from clusterman.core.config_schema import parse
from clusterman.core.resources import Resources

ONE = Resources(cpus=1)
MIX = [(4, Resources(cpus=0.5)), (4, Resources(cpus=1)), (2, Resources(cpus=2)), (1, Resources(cpus=4))]


def run(trace, times):
    running, sizes = set(), {}
    for t in times:
        arrivals, departures = trace.changes(t)
        for item in arrivals:
            running.add(item.id)
            sizes[item.id] = item.requests.cpus
        for task_id in departures:
            running.remove(task_id)
    return running, sizes


def test_the_old_mode_removes_the_newest_tasks():
    trace = DemandTrace([(0, Resources(cpus=10)), (60, Resources(cpus=4))], ONE)
    arrivals, _ = trace.changes(0)
    assert len(arrivals) == 10
    _, departures = trace.changes(60)
    assert departures == [a.id for a in reversed(arrivals[4:])]


def test_random_departures_leave_tasks_from_everywhere():
    trace = DemandTrace([(0, Resources(cpus=100)), (60, Resources(cpus=50))], ONE, departures="random", seed=1)
    arrivals, _ = trace.changes(0)
    _, departures = trace.changes(60)
    assert len(departures) == 50
    order = {a.id: k for k, a in enumerate(arrivals)}
    assert min(order[d] for d in departures) < 25  # some of the oldest leave, not only the newest


def test_a_mix_follows_demand_within_half_a_task_and_is_seeded():
    points = [(60 * k, Resources(cpus=200 + (k % 7) * 13.0)) for k in range(60)]
    for t, demand in points[::7]:
        trace = DemandTrace(points, ONE, mix=MIX, departures="random", seed=3)
        running, sizes = run(trace, [p[0] for p in points if p[0] <= t])
        assert abs(sum(sizes[i] for i in running) - demand.cpus) <= 2.0
    again = DemandTrace(points, ONE, mix=MIX, departures="random", seed=3)
    first = DemandTrace(points, ONE, mix=MIX, departures="random", seed=3)
    assert run(again, [p[0] for p in points]) == run(first, [p[0] for p in points])
    _, sizes = run(DemandTrace(points, ONE, mix=MIX, seed=3), [0])
    assert set(sizes.values()) == {0.5, 1, 2, 4}


def test_tasks_with_a_lifetime_end_and_are_replaced():
    trace = DemandTrace([(0, Resources(cpus=50))], ONE, lifetime_seconds=600, seed=2)
    first, _ = trace.changes(0)
    arrivals, departures = trace.changes(3600)
    assert len(departures) > 40 and len(arrivals) == len(departures)
    assert {a.id for a in first} & set(departures)


def test_the_block_names_a_bad_departure_mode_and_refuses_both_task_shapes():
    with pytest.raises(ConfigError, match=r"simulation\.departures: must be one of newest, random"):
        parse(SimulationConfig, {"departures": "oldest"}, "pool.yaml", "simulation")
    with pytest.raises(ConfigError, match=r"simulation\.placement: must be one of first_fit, most_allocated"):
        parse(SimulationConfig, {"placement": "best_fit"}, "pool.yaml", "simulation")
    with pytest.raises(ConfigError, match="demand_task or demand_mix"):
        parse(SimulationConfig, {"demand_task": {"cpus": 1}, "demand_mix": [{"weight": 1, "cpus": 1}]}, "p", "")
    sim = parse(SimulationConfig, {"demand_mix": [{"weight": 2, "cpus": 0.5}], "departures": "random"}, "p", "")
    assert sim.demand_mix[0].cpus == 0.5 and sim.departures == "random"


def test_asking_again_at_the_same_time_changes_nothing():
    """The pool is read more than once a minute (the collector, then the decision): the running
    tasks must be those of one read, or demand would depend on how often it is read."""
    points = [(60 * k, Resources(cpus=200 + (k % 7) * 13.0)) for k in range(60)]
    once = DemandTrace(points, ONE, mix=MIX, departures="random", seed=3)
    twice = DemandTrace(points, ONE, mix=MIX, departures="random", seed=3)
    for t, _ in points:
        assert twice.changes(t) == once.changes(t)
        assert twice.changes(t) == ([], [])

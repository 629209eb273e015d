"""One spare sized from measured risk (clusterman/decision/spare.py, the signal's shortfall_price)."""

import random

import pytest

from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman_signals.clusterman import ForecastHeadroom
from tests.scaling_builders import node
from tests.scaling_builders import pods
from tests.scaling_builders import policy
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot
from tests.test_forecast_headroom import ask
from tests.test_slots import fragmented


def test_the_spare_is_the_newsvendor_quantile_of_the_errors_and_the_price_moves_it():
    rng = random.Random(5)
    values = [100 + rng.gauss(0, 4) for _ in range(900)]
    cheap = ask(ForecastHeadroom("c", "p", {"shortfall_price": 4, "hold_minutes": 1}), values)
    dear = ask(ForecastHeadroom("c", "p", {"shortfall_price": 100, "hold_minutes": 1}), values)
    # q = 0.8 and 0.99 of the largest of the next 4 minutes above the level now: a dearer
    # shortfall buys more spare; with noise of 4 that draws anew each minute, the 0.99 quantile
    # of (max of 4 draws − 1 draw) is about 4 × 4 above
    assert values[-1] < cheap < dear
    assert 12 < dear - values[-1] < 20
    signal = ForecastHeadroom("c", "p", {"shortfall_price": 20})
    assert signal.quantile() == pytest.approx(20 / 21)


def test_the_spare_keeps_whole_places_for_the_share_that_comes_as_large_pods():
    # 10 nodes of 8 CPUs, 3 free on each (30 free CPUs, no 4-CPU place)
    large = [node(f"n{i}", cpus=8, mem=0, tasks=(Task(f"b{i}", Resources(cpus=4)), *pods(1, cpus=1, mem=0)))
             for i in range(10)]  # fmt: skip
    # four fifths of the pods' CPUs are 4-CPU pods: of a spare of 12 CPUs, 9.6 come as 4-CPU
    # pods: 3 whole places; the two new nodes hold 4
    d = run(snapshot(large), request(cpus=50 + 12), policy(setpoint=1, spare=True))
    assert d.target_capacity == 12
    assert "slot reserve: 0 free 4-CPU slots < 3" in d.explanation
    # one 4-CPU pod among 1-CPU pods (8% of the CPUs): one place, one new node; the rest of the
    # spare fits in the pieces
    few = run(snapshot(fragmented(10)), request(cpus=50 + 12), policy(setpoint=1, spare=True))
    assert few.target_capacity == 11
    assert "slot reserve: 0 free 4-CPU slots < 1" in few.explanation
    # without it, utilisation alone: ceil(62 / 8) = 8 nodes, their free room in pieces
    assert run(snapshot(fragmented(10)), request(cpus=62), policy(setpoint=1)).target_capacity == 8


def test_a_scale_down_waits_while_the_target_is_within_the_spare_above_what_is_asked():
    nodes = [node(f"n{i}", cpus=8, mem=0, tasks=pods(4, cpus=1, mem=0)) for i in range(10)]
    snap = snapshot(nodes)  # 40 CPUs of pods on 80
    # asked 40 + 16: 7 nodes; the target 10 is 3 units above, the spare 16 CPUs is 2 units: down
    down = run(snap, request(cpus=56), policy(setpoint=1, spare=True))
    assert down.target_capacity == 7
    # asked 40 + 24 (8 nodes): 2 units above, within the spare's 3: keep 10
    kept = run(snap, request(cpus=64), policy(setpoint=1, spare=True))
    assert kept.target_capacity == 10
    assert "within the spare's band (24 cpus) of target 10: keep 10" in kept.explanation
    # a pool that sets the margin keeps Clusterman's meaning as well
    assert run(snap, request(cpus=56), policy(setpoint=1, target_capacity_margin=0.5)).target_capacity == 10

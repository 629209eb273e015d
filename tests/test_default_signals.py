import pytest

from clusterman_signals.base_signal import SignalResources
from clusterman_signals.clusterman import ConstantSignal
from clusterman_signals.clusterman import MostRecentResources
from clusterman_signals.clusterman.most_recent_resources import trend_slope


def test_constant_signal():
    signal = ConstantSignal("c", "p", {"cpus": 3, "gpus": 1})
    assert signal.evaluate({}, 0) == SignalResources(cpus=3.0, gpus=1.0)


def test_trend_slope():
    assert trend_slope([[0, 1], [60, 2], [120, 3]]) == pytest.approx(1 / 60)
    assert trend_slope([[0, 5]]) == 0
    assert trend_slope([[0, 5], [0, 6]]) == 0


def test_most_recent_looks_ahead_only_upwards():
    rising = {"cpus_allocated": [[0, 10], [60, 11], [120, 12]], "cpus_pending": [[120, 3]]}
    signal = MostRecentResources("c", "p", {"lookahead_minutes": 10})
    # latest 12, +1/minute for 10 minutes = 22, plus 3 pending
    assert signal.evaluate(rising, 120).cpus == pytest.approx(25)
    falling = {"cpus_allocated": [[0, 12], [60, 11], [120, 10]]}
    assert signal.evaluate(falling, 120).cpus == pytest.approx(10)


def test_most_recent_no_data_is_no_opinion():
    result = MostRecentResources("c", "p", {}).evaluate({"mem_allocated": [[0, 100]]}, 0)
    assert result == SignalResources(mem=100.0)

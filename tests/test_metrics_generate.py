"""Synthetic metrics: each shape's numbers, determinism, and clear errors for bad designs."""

from __future__ import annotations

import math
import statistics

import pytest

from clusterman.core.config import MetricType
from clusterman.core.config_schema import ConfigError
from clusterman.datastore.generate import generate
from clusterman.datastore.generate import parse_design
from clusterman.datastore.generate import whole_seconds
from clusterman.datastore.generate import whole_unix_seconds

START = 1_709_510_400  # 2024-03-04T00:00:00Z
SYS = MetricType.SYSTEM_METRICS
KEY = "m|cluster=local-dev,pool=default.simulated"


def one_series(*shape, duration="1d", interval="1m", seed=0, **extra):
    raw = {
        "seed": seed,
        "start": START,
        "duration": duration,
        "interval": interval,
        "series": [{"name": "m", "shape": list(shape), "min": -1e9, **extra}],
    }
    data = generate(parse_design(raw, "design.yaml"))
    return dict(data[SYS if "type" not in extra else MetricType(extra["type"])].popitem()[1])


def test_durations_and_times():
    assert [whole_seconds(v) for v in (90, "90s", "15m", "6h", "2d", "1h30m", "0.5h")] == [
        90, 90, 900, 21600, 172800, 5400, 1800,
    ]  # fmt: skip
    for bad in ("soon", "15 fortnights", "1h and a bit", True, None):
        with pytest.raises(ValueError, match="expected a duration"):
            whole_seconds(bad)
    assert (
        whole_unix_seconds("2024-03-04T00:00:00Z")
        == START
        == whole_unix_seconds("2024-03-04T01:00:00+01:00")
        == whole_unix_seconds(START)
    )
    assert whole_unix_seconds("2024-03-04") == START


def test_steady_covers_the_range_at_each_interval():
    series = one_series({"steady": {"value": 12.5}}, duration="1h", interval="5m")
    assert list(series) == [START + 300 * i for i in range(12)]
    assert set(series.values()) == {12.5}


def test_diurnal_peaks_at_its_hour_and_bottoms_out_half_a_period_later():
    series = one_series({"steady": {"value": 10}}, {"diurnal": {"amplitude": 4, "peak": "15h"}})
    assert series[START + 15 * 3600] == 14.0
    assert series[START + 3 * 3600] == 6.0
    assert series[START + 9 * 3600] == pytest.approx(10.0, abs=1e-3)
    assert max(series.values()) == 14.0 and min(series.values()) == 6.0


def test_step_spike_and_ramp():
    step = one_series({"step": {"at": "2h", "value": 5}})
    assert step[START + 2 * 3600 - 60] == 0 and step[START + 2 * 3600] == 5
    spike = one_series({"spike": {"at": "1h", "duration": "10m", "value": 9}})
    assert [t - START for t, v in spike.items() if v] == [3600 + 60 * i for i in range(10)]
    ramp = one_series({"ramp": {"at": "1h", "duration": "1h", "value": 60}})
    assert ramp[START + 3600] == 0 and ramp[START + 3600 + 900] == 15 and ramp[START + 7200] == 60
    assert ramp[START + 20 * 3600] == 60


def test_random_walk_and_noise_are_seeded():
    walk = one_series({"random_walk": {"stddev": 2}}, seed=3)
    assert walk == one_series({"random_walk": {"stddev": 2}}, seed=3)
    assert walk != one_series({"random_walk": {"stddev": 2}}, seed=4)
    steps = [b - a for a, b in zip(list(walk.values()), list(walk.values())[1:], strict=False)]
    assert statistics.stdev(steps) == pytest.approx(2, rel=0.1)
    noise = list(one_series({"noise": {"stddev": 3}}, seed=3).values())
    assert abs(statistics.mean(noise)) < 0.5 and statistics.stdev(noise) == pytest.approx(3, rel=0.1)


def test_clamping_rounding_and_split_mappings():
    series = one_series({"steady": {"value": -5}}, {"noise": {"stddev": 1}}, min=0)
    assert set(series.values()) == {0.0}
    split = one_series(
        {"steady": {"value": 10}}, type="metadata", decimals=1, split={"<m5.large, a>": 2, "<m5.large, b>": 1}
    )
    assert set(map(str, split.values())) == {str({"<m5.large, a>": 6.7, "<m5.large, b>": 3.3})}


def test_keys_for_each_metric_type():
    raw = {
        "start": START,
        "duration": "2m",
        "cluster": "norcal",
        "pool": "batch",
        "scheduler": "mesos",
        "series": [
            {"name": "cpus_allocated", "shape": [{"steady": {"value": 1}}]},
            {"name": "queue", "type": "app_metrics", "app": "seagull", "shape": [{"steady": {"value": 1}}]},
            {"name": "x", "key": "spot_prices|AZ=a", "type": "metadata", "shape": [{"steady": {"value": 1}}]},
        ],
    }
    data = generate(parse_design(raw, "d"))
    assert list(data[SYS]) == ["cpus_allocated|cluster=norcal,pool=batch.mesos"]
    assert list(data[MetricType.APP_METRICS]) == ["seagull,queue"]
    assert list(data[MetricType.METADATA]) == ["spot_prices|AZ=a"]


@pytest.mark.parametrize(
    ("series", "where", "problem"),
    [
        ([], "series", "non-empty list"),
        ([{"name": "m"}], "series[0].shape", "non-empty list"),
        ([{"name": "m", "shape": [{"wave": {}}]}], "series[0].shape[0]", "unknown shape 'wave'"),
        ([{"name": "m", "shape": [{"steady": {}}]}], "series[0].shape[0].steady.value", "required key is missing"),
        ([{"name": "m", "shape": [{"ramp": {"at": "1h", "duration": 0, "value": 1}}]}],
         "series[0].shape[0].ramp.duration", "greater than 0"),
        ([{"name": "m", "shape": [{"noise": {"stddev": 1, "mean": 2}}]}],
         "series[0].shape[0].noise.mean", "unknown key"),
        ([{"name": "m", "type": "app_metrics", "shape": [{"steady": {"value": 1}}]}], "series[0]", "needs `app`"),
        ([{"name": "m", "shape": [{"steady": {"value": 1}}]}] * 2, "series", "designed more than once"),
    ],
)  # fmt: skip
def test_bad_designs_name_the_key(series, where, problem):
    with pytest.raises(ConfigError) as e:
        parse_design({"start": START, "duration": "1h", "series": series}, "design.yaml")
    assert e.value.source == "design.yaml" and e.value.key == where and problem in e.value.problem


def test_bad_top_level_values():
    series = [{"name": "m", "shape": [{"steady": {"value": 1}}]}]
    with pytest.raises(ConfigError, match=r"design\.yaml: start: must be Unix seconds or an ISO 8601 time"):
        parse_design({"start": "tuesday", "duration": "1h", "series": series}, "design.yaml")
    with pytest.raises(ConfigError, match=r"design\.yaml: duration: required key is missing"):
        parse_design({"start": 0, "series": series}, "design.yaml")


def test_no_value_is_negative_zero_or_not_finite():
    series = one_series({"diurnal": {"amplitude": 1e-9}}, min=0)
    assert all(math.copysign(1, v) == 1 and math.isfinite(v) for v in series.values())

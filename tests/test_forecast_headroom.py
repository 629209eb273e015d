"""The default signal, ForecastHeadroom: measured headroom, hold, seasonality, ramp (short series)."""

import random

import pytest

from clusterman_signals.clusterman import ForecastHeadroom
from clusterman_signals.clusterman.forecast_headroom import NARROW
from clusterman_signals.clusterman.forecast_headroom import Demand
from clusterman_signals.clusterman.forecast_headroom import Rule
from clusterman_signals.clusterman.forecast_headroom import find_period
from clusterman_signals.clusterman.forecast_headroom import sliding_max

T0 = 1_700_000_000


def series(values, start=T0):
    return [[start + 60 * k, float(v)] for k, v in enumerate(values)]


def ask(signal, values, pending=None, **extra):
    metrics = {"cpus_allocated": series(values), **extra}
    if pending is not None:
        metrics["cpus_pending"] = series(pending)
    return signal.evaluate(metrics, T0 + 60 * (len(values) - 1)).cpus


def noisy(n, level, stddev, seed=3):
    rng = random.Random(seed)
    return [level + rng.gauss(0, stddev) for _ in range(n)]


def test_no_data_is_no_opinion_and_short_history_gets_the_warmup_headroom():
    signal = ForecastHeadroom("c", "p", {})
    result = signal.evaluate({"mem_allocated": [[T0, 100.0]]}, T0)
    assert result.cpus is None and result.mem == pytest.approx(110.0)
    assert ask(ForecastHeadroom("c", "p", {}), [50.0] * 30) == pytest.approx(55.0)


def test_in_warm_up_a_rise_is_asked_at_once_and_a_fall_held_or_let_go_as_later():
    signal = ForecastHeadroom("c", "p", {})
    assert ask(signal, [50.0] * 10 + [100.0]) == pytest.approx(110.0)
    assert ask(signal, [100.0] * 10 + [80.0] * 15) == pytest.approx(110.0)  # noise-sized: held 20 minutes
    assert ask(signal, [100.0] * 10 + [80.0] * 20) == pytest.approx(88.0)
    # a fall of more than 3 headrooms (10% of the level standing for one) is let go after 5 minutes
    assert ask(signal, [100.0] * 10 + [50.0] * 4) == pytest.approx(110.0)
    assert ask(signal, [100.0] * 10 + [50.0] * 5) == pytest.approx(55.0)


def test_headroom_follows_the_noise_it_measured():
    calm = ask(ForecastHeadroom("c", "p", {}), noisy(600, 100, 1))
    rough = ask(ForecastHeadroom("c", "p", {}), noisy(600, 100, 8))
    assert 100 < calm < 106
    assert rough > calm + 10


def test_scales_up_at_once_and_down_only_after_the_hold():
    base = noisy(400, 100, 2)
    signal = ForecastHeadroom("c", "p", {"hold_minutes": 20, "release_headrooms": 100})
    up = ask(signal, [*base, 110.0])
    assert up >= 110
    # back to 104 (not far beyond the noise for this signal): the request holds for 20 minutes
    assert ask(signal, [*base, 110.0, *[104.0] * 10]) >= 110
    assert ask(signal, [*base, 110.0, *[104.0] * 25]) < 110
    # with the default, a fall far beyond the noise (a wave over) is let go after release_minutes (5)
    assert ask(ForecastHeadroom("c", "p", {}), [*base, *[300.0] * 30, *[100.0] * 6]) < 120


def test_a_step_is_not_extrapolated_but_a_sustained_rise_is():
    base = noisy(400, 100, 0.5)
    jump = ask(ForecastHeadroom("c", "p", {}), [*base, 101, 102, 160, 220, 280])
    assert 280 <= jump < 300  # no 2x overshoot from a three-minute jump
    ramp = ask(ForecastHeadroom("c", "p", {}), [*base, *[100 + 5 * k for k in range(1, 8)]])
    assert ramp >= 135 + 4 * 5  # five per minute, four minutes ahead


def test_a_period_is_found_and_the_next_wave_is_asked_for_ahead_of_time():
    rng = random.Random(5)
    values = []
    for m in range(900):
        into = m % 180
        values.append(100 + (200 if 60 <= into < 90 else 0) + rng.gauss(0, 1))
    assert find_period(values, 30, 0.3) == 180
    signal = ForecastHeadroom("c", "p", {})
    # the third wave starts at minute 780: three minutes before it the request already holds it
    assert ask(signal, values[:778]) > 290
    assert ask(ForecastHeadroom("c", "p", {"seasonal": 0}), values[:778]) < 120


def test_pending_that_did_not_fit_is_asked_for_twice_over_for_an_hour():
    base = noisy(400, 100, 0.5)
    calm = ask(ForecastHeadroom("c", "p", {}), base, pending=[0.0] * 400)
    # a 4-CPU pod evicted from a drained node finds no room: demand is flat, 4 of it pending
    signal = ForecastHeadroom("c", "p", {})
    evicted = ask(signal, [*base[:-1], base[-1] - 4], pending=[0.0] * 399 + [4.0])
    assert evicted == pytest.approx(calm + 2 * 4, abs=0.5)
    later = [*base, *[base[-1]] * 30]
    assert ask(signal, later, pending=[0.0] * 430) == pytest.approx(calm + 8, abs=1.0)  # remembered
    assert ask(signal, [*later, *[base[-1]] * 40], pending=[0.0] * 470) < calm + 4  # an hour on: forgotten
    # demand rising past what was asked for is not a packing problem: no extra
    rising = ask(ForecastHeadroom("c", "p", {}), base, pending=[0.0] * 399 + [30.0])
    assert rising < base[-1] + 30 + 8


def waves(minutes, period=360, start=30, jitter=(), seed=7):
    """150 CPUs and a +350 wave every ``period`` minutes for 40 minutes (the k-th shifted by jitter[k])."""
    rng = random.Random(seed)
    out = []
    for m in range(minutes):
        level = 150.0
        for k in range(minutes // period + 1):
            into = m - (k * period + start + (jitter[k] if k < len(jitter) else 0))
            level += 350 if 0 <= into < 40 else 0
        out.append(level + rng.gauss(0, 1))
    return out


def test_a_repeating_wave_is_a_period_after_its_second_occurrence():
    # two waves (minutes 30 and 390) in 480 minutes: two whole periods were not seen yet
    values = waves(480)
    assert find_period(values, 30, 0.3) == 360
    # noise alone has no period, however long the lag may be
    assert find_period(noisy(480, 150, 3), 30, 0.3) == 0
    # so the third wave (minute 750) is asked for before it starts
    assert ask(ForecastHeadroom("c", "p", {}), waves(746)) > 480


def test_a_wave_asked_for_ahead_of_time_is_held_when_it_comes_late():
    # the fourth wave comes 4 minutes later than one period after the third
    values = waves(1200, jitter=(0, 0, 0, 4))
    signal = ForecastHeadroom("c", "p", {})
    asked = [ask(signal, values[:m]) for m in range(1105, 1116)]
    assert min(asked) > 480  # from 6 minutes before its usual time (1110) until it has come (1114)


def test_with_three_waves_seen_the_next_is_asked_for_at_the_earliest_start_less_horizon_and_2():
    # waves at minutes 30, 390, 750: the fourth (1110) is asked for from minute 1104 (4 + 2
    # before), not from 1100 (the horizon and 6 minutes past the third's start a period later)
    values = waves(1200)
    late = [ask(ForecastHeadroom("c", "p", {}), values[: t + 1]) for t in (1101, 1103, 1104)]
    assert late[0] < 200 and late[1] < 200 and late[2] > 480
    # the second wave came 2 minutes early (388): every period seen counts, so from minute 1102
    values = waves(1200, jitter=(0, -2, 0, 0))
    early = [ask(ForecastHeadroom("c", "p", {}), values[: t + 1]) for t in (1101, 1102)]
    assert early[0] < 200 and early[1] > 480


def test_min_spare_is_a_floor_on_the_spare_and_held_like_the_rest():
    base = noisy(400, 100, 0.5)
    assert ask(ForecastHeadroom("c", "p", {}), base) < 106
    assert ask(ForecastHeadroom("c", "p", {"min_spare": 0.4}), base) >= 140
    signal = ForecastHeadroom("c", "p", {"min_spare": 0.4, "release_headrooms": 100})
    assert ask(signal, [*base, *[80.0] * 10]) >= 140  # the hold keeps it after a fall


def test_a_wave_that_came_earlier_than_an_old_one_is_not_asked_for_again():
    # the first wave came 6 minutes late (36): a period after it, the fourth wave (1110) has come
    # by the time the first's start a period later (1116) is in view; what rose here since the
    # horizon and lead before is that rise, not another one to ask for on top
    values = waves(1200, jitter=(6, 0, 0, 0))
    signal = ForecastHeadroom("c", "p", {})
    asked = [ask(signal, values[:m]) for m in range(1104, 1130)]
    assert min(asked[4:]) > 480  # the wave is asked for
    assert max(asked) < 560  # and not twice (it asked for about 850)


def test_a_period_that_scores_barely_better_is_not_used(monkeypatch):
    # diurnal demand with bursts finds lags of 70 or 285 minutes that score within 0.2% of no
    # period: chance, not a season
    values = waves(1200)
    signal = ForecastHeadroom("c", "p", {})
    scores = {0: 100.0, 360: 99.0}
    monkeypatch.setattr(signal, "_headroom", lambda _values, rule, _seen: (5.0, scores[rule.period]))
    assert signal.refresh(values, 60.0, T0).period == 0
    scores[360] = 97.0
    assert signal.refresh(values, 60.0, T0).period == 360


def test_a_steady_fall_may_be_followed_and_a_step_down_is_not():
    # the early release off, to see the hold alone: 2 CPUs a minute for 20 minutes, 360 now
    base, held = noisy(400, 400, 4), {"release_headrooms": 100}
    fading = [*base, *[400 - 2.0 * k for k in range(1, 21)]]
    assert ask(ForecastHeadroom("c", "p", held), fading) >= 395  # the level of 20 minutes ago
    followed = ask(ForecastHeadroom("c", "p", {**held, "follow_falls": 1}), fading)
    assert 360 <= followed < 370  # about the level now, and the headroom
    # the same 40 CPUs lost in one step: no steady fall, the hold stays
    step = [*base, *[400.0] * 10, *[360.0] * 10]
    assert ask(ForecastHeadroom("c", "p", {**held, "follow_falls": 1}), step) >= 395


@pytest.mark.parametrize("period", [0, 1, 3, 5, 10, 11, 37, 100])
def test_every_points_base_at_once_is_each_points_base_to_the_bit(period):
    # a refresh reads every point's base from sliding windows; the per-point rule is the reference
    rng = random.Random(period)
    signal = ForecastHeadroom("c", "p", {})
    for n, noise in ((5, 0.0), (150, 0.5), (400, 2.0)):
        values = [float(rng.randint(0, 20)) for _ in range(n // 2)] + noisy(n - n // 2, 60, 5, seed=n)
        rule = Rule(signal, 60.0, period, noise)
        assert [b.hex() for b in rule.bases(values)] == [rule.base(values, j).hex() for j in range(n)]


@pytest.mark.parametrize("width", [2, 5, NARROW, NARROW + 1, 20])
def test_a_sliding_window_picks_each_windows_own_largest_and_least(width):
    rng = random.Random(width)
    for n in (1, width - 1, width, 3 * width + 2):
        values = [round(rng.uniform(0, 50), 1) for _ in range(n)]  # ties included
        for pick in (max, min):
            behind = [pick(values[max(0, j - width + 1) : j + 1]) for j in range(n)]
            ahead = [pick(values[j : j + width]) for j in range(n)]
            assert sliding_max(values, width, ahead=False, pick=pick) == behind
            assert sliding_max(values, width, ahead=True, pick=pick) == ahead


@pytest.mark.parametrize("kept", [0, 1, 7, 30])
def test_demand_reads_a_shorter_pending_window_as_by_timestamp(kept):
    rng = random.Random(kept)
    allocated = [[T0 + 60 * k, float(rng.randint(0, 40))] for k in range(30)]
    pending = [[t, float(rng.randint(-2, 9))] for t, _ in allocated[30 - kept :]]  # the collector's tail
    by_time = {t: v for t, v in pending}
    expected = [a + max(by_time.get(t, 0.0), 0.0) for t, a in allocated]
    d = Demand(allocated, pending)
    assert [d[j] for j in range(30)] == expected and [d[j] for j in range(-30, 0)] == expected
    for start in range(30):
        assert d[start:30] == expected[start:] and d[start : start + 5] == expected[start : start + 5]
    shifted = [[t + 30, v] for t, v in pending]  # not the same minutes: read by timestamp (none match)
    assert Demand(allocated, shifted)[0:30] == [a for _, a in allocated]

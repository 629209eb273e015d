"""The pool file's scaling_limits and autoscaling blocks: Clusterman's names, Escalator's aliases."""

import math
from fractions import Fraction

import pytest

from clusterman.config import ConfigError
from clusterman.core.config import AutoscalingDefaults
from clusterman.core.config import PoolAutoscaling
from clusterman.core.config import ScalingLimits
from clusterman.core.config_schema import parse
from clusterman.core.durations import parse_duration
from clusterman.decision import ScalingPolicy

LIMITS = {"min_capacity": 1, "max_capacity": 30, "max_weight_to_add": 5, "max_weight_to_remove": 2}


def load(autoscaling=None, limits=None, defaults=None):
    lim = parse(ScalingLimits, LIMITS if limits is None else limits, "pool.kubernetes", "scaling_limits")
    auto = parse(PoolAutoscaling, autoscaling or {}, "pool.kubernetes", "autoscaling")
    main = parse(AutoscalingDefaults, defaults or {}, "clusterman.yaml", "autoscaling")
    return ScalingPolicy.from_config(lim, auto, main, "pool.kubernetes")


def test_escalator_names_bring_their_numbers():
    pol = load(
        {
            "scale_up_threshold_percent": 70,
            "taint_upper_capacity_threshold_percent": 40,
            "taint_lower_capacity_threshold_percent": 10,
            "slow_node_removal_rate": 2,
            "fast_node_removal_rate": 5,
            "soft_delete_grace_period": "1m",
            "hard_delete_grace_period": "10m",
            "scale_up_cool_down_period": "2m",
            "scale_up_failure_threshold": 3,
            "scale_up_failure_cooldown": "5m30s",
        },
        {"min_nodes": 1, "max_nodes": 30, "max_weight_to_add": 5, "max_weight_to_remove": 2},
    )
    assert pol.setpoint == Fraction(7, 10)
    assert pol.escalator_removal is not None
    assert (pol.escalator_removal.lower, pol.escalator_removal.upper) == (Fraction(1, 10), Fraction(2, 5))
    assert (pol.escalator_removal.slow, pol.escalator_removal.fast) == (2, 5)
    assert (pol.soft_delete_grace_period_seconds, pol.hard_delete_grace_period_seconds) == (60, 600)
    assert pol.scale_up_cool_down_period_seconds == 120
    assert (pol.scale_up_failure_threshold, pol.scale_up_failure_cooldown_seconds) == (3, 330)
    assert (pol.min_capacity, pol.max_capacity) == (1, 30)


def test_escalator_thresholds_above_100_percent():
    """Escalator's rules are > 0 and lower < upper < scale-up: over-committed pools use more than 100."""
    pol = load({"scale_up_threshold_percent": 170})
    assert pol.setpoint == Fraction(17, 10)
    pol = load(
        {
            "scale_up_threshold_percent": 150,
            "taint_upper_capacity_threshold_percent": 120,
            "taint_lower_capacity_threshold_percent": 60,
            "slow_node_removal_rate": 1,
            "fast_node_removal_rate": 2,
        }
    )
    assert pol.escalator_removal is not None
    assert (pol.setpoint, pol.escalator_removal.upper) == (Fraction(3, 2), Fraction(6, 5))


def test_clusterman_defaults_and_main_file_fallback():
    pol = load(defaults={"setpoint": 0.8, "target_capacity_margin": 0.05, "instance_loss_threshold": 2})
    assert (pol.setpoint, pol.target_capacity_margin) == (Fraction(4, 5), Fraction(1, 20))
    assert pol.instance_loss_threshold == 2 and pol.escalator_removal is None
    assert pol.max_tasks_to_kill == 0 and pol.hard_delete_grace_period_seconds == math.inf
    assert pol.orphan_instance_uptime_threshold_seconds == 1800
    assert load({"setpoint": 0.6}, defaults={"setpoint": 0.8}).setpoint == Fraction(3, 5)
    assert load(limits={**LIMITS, "max_tasks_to_kill": "inf"}).max_tasks_to_kill == math.inf


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(90, 90), (1.5, 1.5), ("45", 45), ("90s", 90), ("2m", 120), ("1h30m", 5400), ("1.5h", 5400), ("250ms", 0.25)],
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("block", "raw", "key", "problem"),
    [
        ("autoscaling", {"scale_up_threshold": 70}, "autoscaling.scale_up_threshold", "unknown key"),
        ("autoscaling", {"scale_up_threshold_percent": 0}, "autoscaling.scale_up_threshold_percent", "greater than 0"),
        ("autoscaling", {"setpoint": 1.7}, "autoscaling.setpoint", "(0, 1]"),  # Clusterman's spelling: a fraction
        ("autoscaling", {"taint_lower_capacity_threshold_percent": 0},
         "autoscaling.taint_lower_capacity_threshold_percent", "greater than 0"),
        ("autoscaling", {"scale_up_threshold_percent": 110, "taint_upper_capacity_threshold_percent": 120,
                         "taint_lower_capacity_threshold_percent": 10, "slow_node_removal_rate": 1,
                         "fast_node_removal_rate": 2}, "autoscaling", "must be below the setpoint"),
        ("autoscaling", {"setpoint": 0.7, "scale_up_threshold_percent": 70}, "autoscaling.scale_up_threshold_percent",
         "given twice"),
        ("autoscaling", {"soft_delete_grace_period": "2 fortnights"}, "autoscaling.soft_delete_grace_period",
         "such as 90s"),
        ("autoscaling", {"hard_delete_grace_period": -1}, "autoscaling.hard_delete_grace_period", ">= 0"),
        ("autoscaling", {"taint_upper_capacity_threshold_percent": 40}, "autoscaling", "needs all four"),
        ("autoscaling", {"taint_upper_capacity_threshold_percent": 10, "taint_lower_capacity_threshold_percent": 20,
                         "slow_node_removal_rate": 1, "fast_node_removal_rate": 2}, "autoscaling", "must be below"),
        ("autoscaling", {"taint_upper_capacity_threshold": 0.4, "taint_lower_capacity_threshold": 0.1,
                         "slow_node_removal_rate": 3, "fast_node_removal_rate": 2}, "autoscaling", "greater than fast"),
        ("autoscaling", {"soft_delete_grace_period": "10m", "hard_delete_grace_period": "1m"}, "autoscaling",
         "shorter than soft"),
        ("autoscaling", {"excluded_resources": ["cpu"]}, "autoscaling", "unknown resource(s) cpu"),
        ("scaling_limits", {**LIMITS, "max_tasks_to_kill": 1.5}, "scaling_limits.max_tasks_to_kill", "whole number"),
        ("scaling_limits", {**LIMITS, "max_nodes": 3}, "scaling_limits.max_nodes", "given twice"),
    ],
)  # fmt: skip
def test_bad_values_name_the_key(block, raw, key, problem):
    cls = PoolAutoscaling if block == "autoscaling" else ScalingLimits
    with pytest.raises(ConfigError) as err:
        parse(cls, raw, "pool.kubernetes", block)
    assert err.value.key == key
    assert problem in err.value.problem


def test_taint_threshold_above_a_setpoint_from_the_main_file():
    taint = {"taint_upper_capacity_threshold_percent": 75, "taint_lower_capacity_threshold_percent": 10,
             "slow_node_removal_rate": 1, "fast_node_removal_rate": 2}  # fmt: skip
    with pytest.raises(ConfigError, match=r"autoscaling\.taint_upper_capacity_threshold: must be below the setpoint"):
        load(taint, defaults={"setpoint": 0.7})


def test_consolidation_keys_come_one_by_one_from_the_pool_file_else_the_main_file():
    main = {"consolidation": {"enabled": True, "placement": "most_allocated", "evictions_per_hour": 30}}
    pol = load({"consolidation": {"consolidate_after": "5m", "evictions_per_hour": 10}}, defaults=main).consolidation
    assert (pol.enabled, pol.placement, pol.consolidate_after_seconds, pol.evictions_per_hour) == (
        True, "most_allocated", 300.0, 10
    )  # fmt: skip
    assert (pol.max_disrupted_share, pol.drains_per_run, pol.evict_local_storage) == (Fraction(1, 10), 1, False)
    assert not load().consolidation.enabled  # off unless a file says so
    with pytest.raises(ConfigError, match=r"consolidation\.placement: must be one of first_fit, most_allocated"):
        load({"consolidation": {"placement": "least_allocated"}})


@pytest.mark.parametrize(
    ("scheduler", "draining", "on"),
    [("kubernetes", True, True), ("simulated", True, True), ("kubernetes", False, False), ("mesos", True, False)],
)
def test_consolidation_stays_off_where_pods_cannot_move_by_a_drain(tmp_path, scheduler, draining, on):
    from clusterman.core.config import MainConfig
    from clusterman.core.config import PoolConfig
    from clusterman.core.config import PoolIdentity
    from clusterman.core.config import Scheduler
    from clusterman.wiring.setup import PoolSetup

    main = parse(MainConfig, {"autoscaling": {"consolidation": {"enabled": True}}}, "clusterman.yaml")
    pool = parse(PoolConfig, {"scaling_limits": LIMITS, "draining_enabled": draining}, "web.pool")
    setup = PoolSetup(main, PoolIdentity("c", "web", Scheduler(scheduler)), pool)
    assert setup.policy.consolidation.enabled is on
    # configured on and off here: every decision says why (the plan, the line, status)
    why = {(False, "kubernetes"): "draining is disabled for this pool", (True, "mesos"): "a Mesos drain moves no task"}
    assert setup.policy.consolidation.off_because == ("" if on else why[draining, scheduler])
    if not on:
        from tests.scaling_builders import node
        from tests.scaling_builders import request
        from tests.scaling_builders import run
        from tests.scaling_builders import snapshot

        decision = run(snapshot([node("n1")]), request(cpus=0.5), setup.policy)
        assert f"consolidation off: {why[draining, scheduler]}" in decision.explanation
        assert decision.consolidation.as_json() == {
            "chosen": [],
            "note": f"consolidation off: {why[draining, scheduler]}",
        }

"""The settings one pool's decision uses, resolved from its config file over the main file's defaults.

A value, built once per config load and passed to ``decide``: capacities in weight units and
fractions exact (``Fraction``), times in seconds, ``math.inf`` for "never" and "no limit".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace
from fractions import Fraction
from typing import Any

from clusterman.core.config import AutoscalingDefaults
from clusterman.core.config import ConsolidationConfig
from clusterman.core.config import DrainingConfig
from clusterman.core.config import PoolAutoscaling
from clusterman.core.config import ScalingLimits
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.core.resources import Resources
from clusterman.decision.drains import DrainPolicy
from clusterman.decision.exact import exact


@dataclass(frozen=True)
class EscalatorRemoval:
    """Escalator's scale-down: below ``upper`` utilisation remove ``slow`` weight units a run, below
    ``lower`` remove ``fast`` (never past what keeps utilisation at or under the setpoint)."""

    lower: Fraction
    upper: Fraction
    slow: Fraction
    fast: Fraction


@dataclass(frozen=True)
class ConsolidationPolicy:
    """Packing the pool within a disruption budget (consolidate.py, docs/consolidation.md).

    ``placement`` is the pool scheduler's rule the prediction follows; the budget: at most
    ``max_disrupted_share`` of the pool's nodes tainted at once (at least one), ``drains_per_run``
    nodes with pods chosen per run, ``evictions_per_hour`` pods over the last hour, each node a
    candidate for ``consolidate_after_seconds`` first; pods with local storage move only when
    ``evict_local_storage``; it packs only a pool at least ``surplus`` weight units above what the
    signals ask for and the slot reserve's room."""

    enabled: bool = False
    placement: str = "first_fit"
    consolidate_after_seconds: float = 600.0
    max_disrupted_share: Fraction = Fraction(1, 10)
    drains_per_run: int = 1
    evictions_per_hour: int = 60
    evict_local_storage: bool = False
    surplus: Fraction = Fraction(3)
    # why it is off although the configuration turns it on ("" otherwise): said in every decision
    off_because: str = ""

    @staticmethod
    def resolve(pool: ConsolidationConfig, main: ConsolidationConfig) -> ConsolidationPolicy:
        """Each key from the pool file, else the main file, else the default."""
        d = ConsolidationPolicy()

        def pick(name: str) -> Any:
            for block in (pool, main):
                value = getattr(block, name)
                if value is not None:
                    return value
            return getattr(d, name)

        return ConsolidationPolicy(
            enabled=bool(pick("enabled")),
            placement=str(pick("placement")),
            consolidate_after_seconds=float(pick("consolidate_after_seconds")),
            max_disrupted_share=exact(pick("max_disrupted_share")),
            drains_per_run=int(pick("drains_per_run")),
            evictions_per_hour=int(pick("evictions_per_hour")),
            evict_local_storage=bool(pick("evict_local_storage")),
            surplus=exact(pick("surplus")),
        )


@dataclass(frozen=True)
class ScalingPolicy:
    min_capacity: Fraction
    max_capacity: Fraction
    max_weight_to_add: Fraction
    max_weight_to_remove: Fraction
    setpoint: Fraction = Fraction(7, 10)
    target_capacity_margin: Fraction = Fraction(1, 10)
    slot_reserve: int = 0  # free places for the largest pod kept after scaling (slots.py)
    slot_reserve_band: int = 0  # more places a scale-down keeps: hysteresis against reserve churn
    slot_reserve_fraction: Fraction = Fraction(0)  # at least this fraction of the pool's places kept free
    scale_up_hedge: Fraction = Fraction(0)  # more asked for pending pods, as a share of what they need (joining.py)
    # the spare the signals ask above the pods is kept as whole places, and a scale-down waits
    # while the free room stays within it above what is asked (spare.py)
    spare: bool = False
    max_tasks_to_kill: float = 0  # math.inf: no limit
    min_node_scalein_uptime_seconds: float = 0.0
    excluded_resources: frozenset[str] = frozenset()
    # None: the default scale-down (the target follows utilisation down to the setpoint)
    escalator_removal: EscalatorRemoval | None = None
    soft_delete_grace_period_seconds: float = 0.0
    hard_delete_grace_period_seconds: float = math.inf
    orphan_instance_uptime_threshold_seconds: float = 1800.0
    scale_up_cool_down_period_seconds: float = 0.0
    scale_up_failure_threshold: int = 0  # 0: no breaker
    scale_up_failure_cooldown_seconds: float = 300.0
    prevent_scale_down_after_capacity_loss: bool = False
    instance_loss_threshold: int = 0
    # resources of one weight unit, for sizing a pool with no ready nodes when the groups do not say
    unit_resources: Resources = Resources()
    consolidation: ConsolidationPolicy = ConsolidationPolicy()
    draining: DrainPolicy = DrainPolicy()

    @staticmethod
    def from_config(
        limits: ScalingLimits,
        autoscaling: PoolAutoscaling,
        defaults: AutoscalingDefaults | None = None,
        source: str = "pool config",
    ) -> ScalingPolicy:
        """Resolve the pool's blocks over the main file's ``autoscaling`` defaults.

        Raises ConfigError for a combination only visible after merging (a taint threshold above
        a setpoint that comes from the main file).
        """
        d = defaults or AutoscalingDefaults()
        a = autoscaling
        setpoint = exact(a.setpoint if a.setpoint is not None else d.setpoint)
        removal = None
        if a.taint_upper_capacity_threshold is not None:
            assert a.taint_lower_capacity_threshold is not None  # PoolAutoscaling checks all four
            assert a.slow_node_removal_rate is not None and a.fast_node_removal_rate is not None
            removal = EscalatorRemoval(
                lower=exact(a.taint_lower_capacity_threshold),
                upper=exact(a.taint_upper_capacity_threshold),
                slow=exact(a.slow_node_removal_rate),
                fast=exact(a.fast_node_removal_rate),
            )
            if not removal.upper < setpoint:
                raise ConfigError(
                    source,
                    "autoscaling.taint_upper_capacity_threshold",
                    f"must be below the setpoint ({float(setpoint):g}), got {float(removal.upper):g}",
                )
        hard = a.hard_delete_grace_period_seconds
        return ScalingPolicy(
            min_capacity=exact(limits.min_capacity),
            max_capacity=exact(limits.max_capacity),
            max_weight_to_add=exact(limits.max_weight_to_add),
            max_weight_to_remove=exact(limits.max_weight_to_remove),
            setpoint=setpoint,
            target_capacity_margin=exact(
                a.target_capacity_margin if a.target_capacity_margin is not None else d.target_capacity_margin
            ),
            slot_reserve=a.slot_reserve if a.slot_reserve is not None else d.slot_reserve,
            slot_reserve_band=a.slot_reserve_band if a.slot_reserve_band is not None else d.slot_reserve_band,
            slot_reserve_fraction=exact(
                a.slot_reserve_fraction if a.slot_reserve_fraction is not None else d.slot_reserve_fraction
            ),
            scale_up_hedge=exact(a.scale_up_hedge if a.scale_up_hedge is not None else d.scale_up_hedge),
            spare=a.spare if a.spare is not None else d.spare,
            max_tasks_to_kill=limits.max_tasks_to_kill,
            min_node_scalein_uptime_seconds=float(limits.min_node_scalein_uptime_seconds),
            excluded_resources=frozenset(
                a.excluded_resources if a.excluded_resources is not None else d.excluded_resources
            ),
            escalator_removal=removal,
            soft_delete_grace_period_seconds=a.soft_delete_grace_period_seconds,
            hard_delete_grace_period_seconds=math.inf if hard is None else hard,
            orphan_instance_uptime_threshold_seconds=float(a.orphan_instance_uptime_threshold_seconds),
            scale_up_cool_down_period_seconds=a.scale_up_cool_down_period_seconds,
            scale_up_failure_threshold=a.scale_up_failure_threshold,
            scale_up_failure_cooldown_seconds=a.scale_up_failure_cooldown_seconds,
            prevent_scale_down_after_capacity_loss=(
                a.prevent_scale_down_after_capacity_loss
                if a.prevent_scale_down_after_capacity_loss is not None
                else d.prevent_scale_down_after_capacity_loss
            ),
            instance_loss_threshold=(
                a.instance_loss_threshold if a.instance_loss_threshold is not None else d.instance_loss_threshold
            ),
            unit_resources=Resources(cpus=d.cpus_per_weight or 0.0),
            consolidation=ConsolidationPolicy.resolve(a.consolidation, d.consolidation),
        )


def consolidates(draining_enabled: bool, scheduler: Scheduler) -> bool:
    """Consolidation moves pods by draining nodes: a pool that does not drain (Clusterman's
    ``draining_enabled: false``) would kill them, and a scheduler may have no eviction a disruption
    budget can refuse (Mesos: docs/consolidation.md): for those it stays off, whatever the config."""
    return draining_enabled and not scheduler.traits.no_consolidation


def pool_policy(
    limits: ScalingLimits,
    autoscaling: PoolAutoscaling,
    defaults: AutoscalingDefaults,
    draining_enabled: bool,
    draining: DrainingConfig,
    scheduler: Scheduler,
    source: str,
) -> ScalingPolicy:
    """A pool's policy from its blocks (and the main file's ``autoscaling`` defaults), as the
    autoscaler runs it: the pool's and ``clusterman plan``'s documents alike."""
    policy = ScalingPolicy.from_config(limits, autoscaling, defaults, source)
    if policy.consolidation.enabled and not consolidates(draining_enabled, scheduler):
        why = scheduler.traits.no_consolidation if draining_enabled else "draining is disabled for this pool"
        policy = replace(policy, consolidation=replace(policy.consolidation, enabled=False, off_because=why))
    return replace(
        policy,
        draining=DrainPolicy(
            threshold_seconds=draining.draining_time_threshold_seconds,
            redrain_seconds=draining.redraining_delay_seconds,
            force_terminate=draining.force_terminate,
        ),
    )

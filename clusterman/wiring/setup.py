"""One pool's configuration, resolved: the main file, which pool, its file, and what follows from them."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path

from clusterman.config.loader import load_pool_config
from clusterman.config.loader import pool_config_path
from clusterman.core.config import AutoscalingDefaults
from clusterman.core.config import DrainingConfig
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolAutoscaling
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import ScalingLimits
from clusterman.core.config import Scheduler
from clusterman.decision.drains import DrainPolicy
from clusterman.decision.policy import ScalingPolicy


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


@dataclass(frozen=True)
class PoolSetup:
    main: MainConfig
    identity: PoolIdentity
    pool: PoolConfig

    @property
    def policy(self) -> ScalingPolicy:
        return pool_policy(
            self.pool.scaling_limits, self.pool.autoscaling, self.main.autoscaling, self.pool.draining_enabled,
            self.pool.draining, self.identity.scheduler, f"{self.identity} config",
        )  # fmt: skip

    @property
    def consolidates(self) -> bool:
        return consolidates(self.pool.draining_enabled, self.identity.scheduler)

    @property
    def period_seconds(self) -> float:
        """How often the pool is scaled: its shortest signal period (the default signal's when it has none)."""
        signals = [s for s in (self.pool.autoscale_signal, *self.pool.app_signals.values()) if s is not None]
        if not signals and self.main.autoscale_signal is not None:
            signals = [self.main.autoscale_signal]
        return 60.0 * min((s.period_minutes for s in signals), default=1)

    @property
    def internal(self) -> bool:
        return self.pool.autoscale_signal is not None and self.pool.autoscale_signal.internal


@dataclass(frozen=True)
class PoolTarget:
    """The main config and which pool, before the pool's own file is read (it may be broken)."""

    main: MainConfig
    identity: PoolIdentity
    cluster_config_directory: str

    @property
    def pool_file(self) -> Path:
        return pool_config_path(self.cluster_config_directory, self.identity)

    def setup(self) -> PoolSetup:
        """The pool's file read and checked; ``Reported`` (one line naming the file) when it is not valid."""
        return PoolSetup(
            self.main, self.identity, load_pool_config(self.main, self.identity, self.cluster_config_directory)
        )

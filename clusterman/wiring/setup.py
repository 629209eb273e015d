"""One pool's configuration, resolved: the main file, which pool, its file, and what follows from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clusterman.config.loader import load_pool_config
from clusterman.config.loader import pool_config_path
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.decision.policy import ScalingPolicy
from clusterman.decision.policy import pool_policy


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

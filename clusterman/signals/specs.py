"""Which signals a pool runs: the default signal, and one per application that has its own."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterman.core.config import MainConfig
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import SignalConfig
from clusterman.core.config_schema import ConfigError
from clusterman.signals.client import SignalAddress

DEFAULT_APP = "__default__"


VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def check_version(version: str) -> str:
    """A signal version names an S3 key, a directory and a list entry: no spaces, slashes or dots first."""
    if not VERSION_PATTERN.fullmatch(version):
        raise ValueError(
            f"signal version {version!r} is not usable: use letters, digits and . _ + - "
            "(at most 128, not starting with . _ + or -)"
        )
    return version


@dataclass(frozen=True)
class SignalSpec:
    app: str
    namespace: str
    config: SignalConfig

    @property
    def name(self) -> str:
        assert self.config.name is not None  # only internal signals have none, and they get no spec
        return self.config.name

    @property
    def version(self) -> str:
        assert self.config.branch_or_tag is not None
        return self.config.branch_or_tag

    @property
    def address(self) -> SignalAddress:
        return SignalAddress(self.namespace, self.name, self.app)

    @property
    def is_default(self) -> bool:
        return self.app == DEFAULT_APP


def default_signal_spec(main: MainConfig) -> SignalSpec:
    signal = main.autoscale_signal
    if signal is None or signal.internal:
        raise ConfigError("clusterman.yaml", "autoscale_signal", "the main file must define the default signal")
    return SignalSpec(DEFAULT_APP, signal.namespace or main.autoscaling.default_signal_role, signal)


def app_signal_specs(pool: PoolConfig, identity: PoolIdentity) -> list[SignalSpec]:
    """The pool's own signal (app = pool name) and any ``app_signals``; internal signals run no process."""
    specs = []
    if pool.autoscale_signal is not None and not pool.autoscale_signal.internal:
        specs.append(SignalSpec(identity.pool, pool.autoscale_signal.namespace or identity.pool, pool.autoscale_signal))
    for app, signal in sorted(pool.app_signals.items()):
        specs.append(SignalSpec(app, signal.namespace or app, signal))
    return specs

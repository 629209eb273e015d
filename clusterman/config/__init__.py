"""srv-configs: loading (``loader``), the typed model (``model``) and validation (``schema``).

The names below are imported on first use: the pure decision imports ``clusterman.config.model``,
and must not pull in the loader's staticconf and YAML with it (importing this package runs this file).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from clusterman.config.loader import list_pools
    from clusterman.config.loader import load_main_config
    from clusterman.config.loader import load_pool_config
    from clusterman.config.model import MainConfig
    from clusterman.config.model import MetricType
    from clusterman.config.model import PoolConfig
    from clusterman.config.model import PoolIdentity
    from clusterman.config.model import RequiredMetric
    from clusterman.config.model import Scheduler
    from clusterman.config.model import SignalConfig
    from clusterman.config.schema import ConfigError

_WHERE = {
    "ConfigError": "schema",
    "MainConfig": "model",
    "MetricType": "model",
    "PoolConfig": "model",
    "PoolIdentity": "model",
    "RequiredMetric": "model",
    "Scheduler": "model",
    "SignalConfig": "model",
    "list_pools": "loader",
    "load_main_config": "loader",
    "load_pool_config": "loader",
}

__all__ = [
    "ConfigError",
    "MainConfig",
    "MetricType",
    "PoolConfig",
    "PoolIdentity",
    "RequiredMetric",
    "Scheduler",
    "SignalConfig",
    "list_pools",
    "load_main_config",
    "load_pool_config",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""srv-configs: loading (``loader``), the typed model (``model``) and validation (``schema``)."""

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

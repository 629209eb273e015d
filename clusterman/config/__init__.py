"""srv-configs from YAML files: the loader; the typed values it returns live in ``clusterman.core.config``."""

from clusterman.config.loader import list_pools
from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricType
from clusterman.core.config import PoolConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import RequiredMetric
from clusterman.core.config import Scheduler
from clusterman.core.config import SignalConfig
from clusterman.core.config_schema import ConfigError

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

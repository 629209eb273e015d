"""The default-signal namespace (``autoscaling.default_signal_role: clusterman``)."""

from clusterman_signals.clusterman.constant import ConstantSignal
from clusterman_signals.clusterman.forecast_headroom import ForecastHeadroom
from clusterman_signals.clusterman.most_recent_resources import MostRecentResources

__all__ = ["ConstantSignal", "ForecastHeadroom", "MostRecentResources"]

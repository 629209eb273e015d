"""Adapters built from srv-configs: this is the only place that turns config into connections."""

"""A signal that always asks for the same resources: for tests, acceptance runs and pinning a pool."""

from __future__ import annotations

from typing import Any

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources

RESOURCES = ("cpus", "mem", "disk", "gpus")


class ConstantSignal(BaseSignal):
    """Returns the parameters ``cpus``, ``mem``, ``disk``, ``gpus``; one left out is "no opinion"."""

    def value(self) -> SignalResources:
        amounts: dict[str, Any] = {r: self.parameters.get(r) for r in RESOURCES}
        return SignalResources(**{r: None if v is None else float(v) for r, v in amounts.items()})

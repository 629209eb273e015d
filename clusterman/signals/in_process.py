"""A signal imported and called in this process, behind the same interface as a runner's socket.

The simulator evaluates a pool's signals every simulated minute; a round trip to a runner process
costs more than most signals' ``value()``. ``InProcessSignal`` loads
``clusterman_signals.<namespace>.<Name>`` from this environment, builds it from the same init
message ``SignalClient`` sends (the pool's parameters plus ``cluster`` and ``pool``), and answers
with the runner's own code (``clusterman_signals.serving``), then validates the reply with the
client's ``parse_reply``. So a signal that answers badly fails here as it would over the socket,
and the evaluator falls back the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterman.core.resources import ResourceRequest
from clusterman.signals.client import SignalAddress
from clusterman.signals.protocol import SignalError
from clusterman.signals.protocol import parse_reply
from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.serving import SignalFailure
from clusterman_signals.serving import answer
from clusterman_signals.serving import build_signal
from clusterman_signals.serving import load_signal_class
from clusterman_signals.wire import init_message


class InProcessSignal:
    def __init__(
        self, address: SignalAddress, cluster: str, pool: str, parameters: Mapping[str, Any] | None = None
    ) -> None:
        self.address = address
        self.init_message = init_message(cluster, pool, parameters)
        self._signal: BaseSignal | None = None

    def load(self) -> None:
        """Import and build the signal now; SignalError naming it when it cannot be."""
        try:
            cls = load_signal_class(self.address.namespace, self.address.name)
            self._signal = build_signal(cls, self.init_message)
        except SignalFailure as e:
            raise SignalError(f"signal {self.address}: {e}") from e

    def evaluate(self, metrics: Mapping[str, Any], timestamp: float, timeout: float | None = None) -> ResourceRequest:
        """``timeout`` is not kept: a signal run in this process cannot be stopped."""
        if self._signal is None:
            self.load()
        assert self._signal is not None
        try:
            return parse_reply(answer(self._signal, metrics, timestamp))
        except SignalError as e:
            raise SignalError(f"signal {self.address}: {e}") from e

    def close(self) -> None:
        """Nothing to release; the signal is built again on the next use, as after a reconnect."""
        self._signal = None

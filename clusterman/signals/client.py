"""Talk to one signal process over its abstract Unix socket (the protocol: ``clusterman_signals.wire``).

``connect`` retries while the process is still starting or its queue is full; ``evaluate`` sends
one metrics window and returns the validated request. Every read and write has a deadline. A
timeout, EOF or reset reconnects once and retries; the second failure raises ``SignalError``
naming the signal. A connection the runner closed while idle is replaced before use, quietly.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusterman.core.resources import ResourceRequest
from clusterman.signals.protocol import ProtocolError
from clusterman.signals.protocol import SignalError
from clusterman.signals.protocol import SignalTimeout
from clusterman.signals.protocol import SignalUnanswered
from clusterman.signals.protocol import parse_reply
from clusterman_signals import wire
from clusterman_signals.wire import ALLOWED_UIDS_ENV as ALLOWED_UIDS_ENV
from clusterman_signals.wire import allowed_uids_from_env as allowed_uids_from_env
from clusterman_signals.wire import parse_uids as parse_uids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignalAddress:
    namespace: str
    name: str
    app: str
    prefix: str | None = None  # None: $CMAN_SIGNAL_SOCKET_PREFIX when the socket is used

    @property
    def socket_name(self) -> str:
        try:
            return wire.socket_name(self.namespace, self.name, self.app, self.prefix)
        except wire.AddressError as e:
            raise SignalError(f"signal {self}: {e}") from e

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name} (app {self.app})"


class SignalClient:
    def __init__(
        self,
        address: SignalAddress,
        cluster: str,
        pool: str,
        parameters: Mapping[str, Any] | None = None,
        read_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        allowed_uids: Iterable[int] | None = None,
        traceback: bool = False,
    ) -> None:
        """``traceback``: ask the runner for the traceback of a failing signal (``SignalError.traceback``)."""
        self.address = address
        self.init_message = wire.init_message(cluster, pool, parameters, traceback)
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.allowed_uids = set(allowed_uids) if allowed_uids is not None else {os.getuid()}
        self._wire: wire.Client | None = None

    def _client(self) -> wire.Client:
        if self._wire is None:
            self._wire = wire.Client(self.address.socket_name, self.init_message, self.allowed_uids)
        return self._wire

    def connect(self) -> None:
        """Connect and send the init message, retrying while nobody listens yet."""
        try:
            self._client().connect(self.connect_timeout, wire.Deadline(self.read_timeout))
        except (wire.WireError, OSError) as e:
            self.close()
            raise SignalError(f"signal {self.address}: {_reason(e)}") from e

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()

    def evaluate(self, metrics: Mapping[str, Any], timestamp: float, timeout: float | None = None) -> ResourceRequest:
        try:
            payload = wire.encode_payload(metrics, timestamp)
        except wire.WireError as e:
            raise SignalError(f"signal {self.address}: {e}") from e
        return self.evaluate_payload(payload, timeout=timeout)

    def evaluate_payload(
        self,
        payload: bytes | bytearray | memoryview,
        meanwhile: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> ResourceRequest:
        """Send an already encoded ``{"metrics": ..., "timestamp": T}`` (bytes passed through as
        they are). ``meanwhile`` runs while the runner works on them; see ``wire.Client``.
        ``timeout``: both attempts together wait at most this long (each at most ``read_timeout``)."""
        end = math.inf if timeout is None else time.monotonic() + timeout
        if end <= time.monotonic():
            raise SignalError(f"signal {self.address}: not asked: no time left in the run")
        client = self._client()
        pending = [meanwhile] if meanwhile is not None else []

        def once() -> None:  # a retry sends the payload again, but the check need not run twice
            while pending:
                pending.pop()()

        for attempt in (1, 2):
            budget = wire.Deadline(min(self.read_timeout, end - time.monotonic()))
            try:
                stream = client.ready(min(self.connect_timeout, budget.seconds), budget)
                return parse_reply(client.round_trip(stream, payload, budget, once))
            except SignalError as e:
                if isinstance(e, ProtocolError):
                    self.close()  # the stream may be out of step: start clean next time
                raise SignalError(f"signal {self.address}: {e}", e.traceback) from e
            except wire.ProtocolError as e:
                self.close()
                raise ProtocolError(f"signal {self.address}: {e}") from e
            except (wire.WireError, OSError) as e:
                self.close()
                if isinstance(e, (wire.PeerRefused, wire.AddressError)):
                    raise SignalError(f"signal {self.address}: {_reason(e)}") from e
                final = SignalTimeout if isinstance(e, TimeoutError) else SignalUnanswered
                if attempt == 2:
                    raise final(f"signal {self.address}: {_reason(e)} (after one reconnect)") from e
                if time.monotonic() >= end:
                    raise final(f"signal {self.address}: {_reason(e)} (no time left to reconnect)") from e
                log.warning("signal %s: %s; reconnecting once", self.address, _reason(e))
        raise AssertionError("unreachable")

    def __enter__(self) -> SignalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(e: BaseException) -> str:
    return str(e) or type(e).__name__

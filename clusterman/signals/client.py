"""Talk to one signal process over its abstract Unix socket.

``connect`` retries while the process is still starting; ``evaluate`` sends one metrics window
and returns the validated request. A timeout, EOF or broken pipe reconnects once and retries;
the second failure raises ``SignalError`` naming the signal.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import time
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusterman.resources import ResourceRequest
from clusterman.signals.protocol import LENGTH
from clusterman.signals.protocol import Connection
from clusterman.signals.protocol import Deadline
from clusterman.signals.protocol import ProtocolError
from clusterman.signals.protocol import SignalError
from clusterman.signals.protocol import check_ack
from clusterman.signals.protocol import encode_metrics
from clusterman.signals.protocol import parse_reply

log = logging.getLogger(__name__)

RETRYABLE = (TimeoutError, EOFError, BrokenPipeError, ConnectionResetError, ConnectionRefusedError)


@dataclass(frozen=True)
class SignalAddress:
    namespace: str
    name: str
    app: str

    @property
    def socket_name(self) -> str:
        return f"\0{self.namespace}-{self.name}-{self.app}-socket"

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name} (app {self.app})"


ALLOWED_UIDS_ENV = "CMAN_SIGNAL_ALLOWED_UIDS"


def parse_uids(text: str, source: str = f"${ALLOWED_UIDS_ENV}") -> set[int]:
    """Uids written comma- or space-separated, as in $CMAN_SIGNAL_ALLOWED_UIDS."""
    uids = set()
    for part in text.replace(",", " ").split():
        if not part.isdigit():
            raise ValueError(f"{source}: {part!r} is not a uid (expected numbers separated by commas or spaces)")
        uids.add(int(part))
    return uids


def allowed_uids_from_env(environ: Mapping[str, str] = os.environ) -> set[int]:
    """Our own uid plus $CMAN_SIGNAL_ALLOWED_UIDS: the same rule the runner applies to its peers."""
    return {os.getuid(), *parse_uids(environ.get(ALLOWED_UIDS_ENV, ""))}


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


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
    ) -> None:
        self.address = address
        # Deployed runners read cluster and pool from inside parameters; ours accept both places.
        self.init_message = {
            "cluster": cluster,
            "pool": pool,
            "parameters": {**(parameters or {}), "cluster": cluster, "pool": pool},
        }
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.allowed_uids = set(allowed_uids) if allowed_uids is not None else {os.getuid()}
        self._conn: Connection | None = None

    def connect(self) -> None:
        """Connect and send the init message, retrying while nobody listens yet."""
        try:
            self._connect()
        except SignalError as e:
            raise SignalError(f"signal {self.address}: {e}") from e

    def _connect(self) -> None:
        self.close()
        deadline = time.monotonic() + self.connect_timeout
        delay = 0.02
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                sock.connect(self.address.socket_name)
                break
            except (ConnectionRefusedError, FileNotFoundError, TimeoutError) as e:
                sock.close()
                if time.monotonic() + delay > deadline:
                    raise SignalError(
                        f"nobody listens on @{self.address.socket_name[1:]} after {self.connect_timeout:g} s"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        uid = peer_uid(sock)
        if uid not in self.allowed_uids:
            sock.close()
            raise SignalError(f"the process on the socket runs as uid {uid}, which is not allowed")
        conn = Connection(sock)
        conn.send(json.dumps(self.init_message).encode(), Deadline(self.read_timeout))
        self._conn = conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def evaluate(self, metrics: Mapping[str, Any], timestamp: float) -> ResourceRequest:
        payload = encode_metrics(metrics, timestamp)
        for attempt in (1, 2):
            try:
                if self._conn is None:
                    self._connect()
                assert self._conn is not None
                return self._round_trip(self._conn, payload)
            except SignalError as e:
                if isinstance(e, ProtocolError):
                    self.close()  # the stream may be out of step: start clean next time
                raise SignalError(f"signal {self.address}: {e}") from e
            except (*RETRYABLE, OSError) as e:
                self.close()
                reason = str(e) or type(e).__name__
                if attempt == 2:
                    raise SignalError(f"signal {self.address}: {reason} (after one reconnect)") from e
                log.warning("signal %s: %s; reconnecting once", self.address, reason)
        raise AssertionError("unreachable")

    def _round_trip(self, conn: Connection, payload: bytes) -> ResourceRequest:
        deadline = Deadline(self.read_timeout)
        conn.send(LENGTH.pack(len(payload)), deadline)
        check_ack(conn.read_byte(deadline), "payload length")
        conn.send(payload, deadline)
        check_ack(conn.read_byte(deadline), "metrics data")
        return parse_reply(conn.read_json(deadline))

    def __enter__(self) -> SignalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

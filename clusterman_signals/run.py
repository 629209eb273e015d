"""Serve one signal on its abstract Unix socket: ``python -m clusterman_signals.run NS NAME APP``.

One connection at a time, one after another (the autoscaler reconnects after restarts). Per
connection: an unframed init JSON object, then any number of evaluations, each a 4-byte length,
ACK, the metrics JSON, ACK (or NACK when it is malformed), and the JSON reply. A signal that
cannot be loaded, or whose ``value()`` raises, is answered with ``{"Error": ...}`` so the client
sees the failure instead of hanging; a ``value()`` that runs past ``--max-eval-seconds`` makes
the process exit, so that its supervisor restarts it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import signal as signals
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources
from clusterman_signals.wire import ACK
from clusterman_signals.wire import DEFAULT_MAX_PAYLOAD_BYTES
from clusterman_signals.wire import LENGTH
from clusterman_signals.wire import NACK
from clusterman_signals.wire import BufferedSocket
from clusterman_signals.wire import Closed
from clusterman_signals.wire import PeerRefused
from clusterman_signals.wire import allowed_uids_from_env
from clusterman_signals.wire import check_peer
from clusterman_signals.wire import socket_name

log = logging.getLogger("clusterman_signals.run")
RESOURCE_NAMES = ("cpus", "mem", "disk", "gpus")
EXIT_HUNG = 75


class SignalFailure(Exception):
    """The signal could not answer; the message goes back to the client as ``{"Error": ...}``."""


def load_signal_class(namespace: str, name: str) -> type[BaseSignal]:
    try:
        module = importlib.import_module(f"clusterman_signals.{namespace}")
    except Exception as e:
        raise SignalFailure(f"cannot import namespace clusterman_signals.{namespace}: {type(e).__name__}: {e}") from e
    cls = getattr(module, name, None)
    if cls is None:
        raise SignalFailure(f"clusterman_signals.{namespace} has no signal named {name}")
    if not (isinstance(cls, type) and issubclass(cls, BaseSignal)):
        raise SignalFailure(f"clusterman_signals.{namespace}.{name} is not a BaseSignal subclass")
    return cls


def build_signal(cls: type[BaseSignal], init: Any) -> BaseSignal:
    """Deployed clients send ``cluster``/``pool`` inside ``parameters``; the seed puts them on top."""
    if not isinstance(init, Mapping):
        raise SignalFailure(f"init message must be a JSON object, got {type(init).__name__}")
    parameters = init.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise SignalFailure("init message: parameters must be a JSON object")
    cluster = init.get("cluster", parameters.get("cluster", ""))
    pool = init.get("pool", parameters.get("pool", ""))
    try:
        return cls(str(cluster), str(pool), dict(parameters))
    except Exception as e:
        raise SignalFailure(f"{cls.__name__}(...) raised {type(e).__name__}: {e}") from e


def resources_to_json(result: Any) -> dict[str, float | None]:
    """Check what ``value()`` returned: SignalResources (or a mapping) of finite numbers >= 0."""
    if isinstance(result, SignalResources) or hasattr(result, "_asdict"):
        values = dict(result._asdict())
    elif isinstance(result, Mapping):
        values = dict(result)
    else:
        raise SignalFailure(f"value() returned {type(result).__name__}, expected SignalResources")
    unknown = set(values) - set(RESOURCE_NAMES)
    if unknown:
        raise SignalFailure(f"value() returned unknown resource(s): {', '.join(sorted(unknown))}")
    out: dict[str, float | None] = {}
    for name in RESOURCE_NAMES:
        v = values.get(name)
        if v is None:
            out[name] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SignalFailure(f"value() returned {name}={v!r}; expected a finite number >= 0 or None")
        out[name] = float(v)
    return out


class Watchdog:
    """Ends the process if one evaluation runs too long: a hung signal is restarted, not waited on."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Watchdog:
        if self.seconds > 0:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        log.error("value() ran for more than %.0f s; exiting so the supervisor restarts the signal", self.seconds)
        logging.shutdown()
        os._exit(EXIT_HUNG)


class Runner:
    def __init__(
        self,
        namespace: str,
        name: str,
        app: str,
        allowed_uids: set[int],
        max_eval_seconds: float = 300.0,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.app = app
        self.allowed_uids = allowed_uids
        self.max_eval_seconds = max_eval_seconds
        self.max_payload_bytes = max_payload_bytes
        self.label = f"{namespace}.{name} for {app}"

    def listen(self) -> socket.socket:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(socket_name(self.namespace, self.name, self.app))
        except OSError as e:
            server.close()
            raise SystemExit(f"cannot listen on {socket_name(self.namespace, self.name, self.app)[1:]}: {e}") from e
        server.listen(8)
        return server

    def serve_forever(self, server: socket.socket) -> None:
        try:
            signal_class: type[BaseSignal] | SignalFailure = load_signal_class(self.namespace, self.name)
        except SignalFailure as e:
            log.error("%s: %s (every evaluation will be answered with this error)", self.label, e)
            signal_class = e
        log.info("%s listening on @%s", self.label, socket_name(self.namespace, self.name, self.app)[1:])
        while True:
            conn, _ = server.accept()
            with conn:
                try:
                    check_peer(conn, self.allowed_uids)
                except PeerRefused as e:
                    log.warning("%s: refused a connection: %s", self.label, e)
                    continue
                try:
                    self.serve_connection(conn, signal_class)
                except (Closed, ConnectionError) as e:
                    log.info("%s: connection ended: %s", self.label, e)
                except Exception:
                    log.exception("%s: connection failed", self.label)

    def serve_connection(self, conn: socket.socket, signal_class: type[BaseSignal] | SignalFailure) -> None:
        stream = BufferedSocket(conn)
        init = stream.read_json_value()
        signal: BaseSignal | SignalFailure
        try:
            if isinstance(signal_class, SignalFailure):
                raise signal_class
            signal = build_signal(signal_class, init)
        except SignalFailure as e:
            log.error("%s: %s", self.label, e)
            signal = e
        while True:
            try:
                header = stream.read_exact(LENGTH.size)
            except Closed:
                return  # a clean end between evaluations
            (length,) = LENGTH.unpack(header)
            if length == 0 or length > self.max_payload_bytes:
                log.error("%s: refused a payload length of %d bytes; closing the connection", self.label, length)
                conn.sendall(NACK)
                return
            conn.sendall(ACK)
            started = time.monotonic()
            data = stream.read_exact(length)
            try:
                payload = json.loads(data)
                metrics, timestamp = parse_payload(payload)
            except (ValueError, UnicodeDecodeError) as e:
                log.error("%s: malformed metrics payload (%d bytes): %s", self.label, length, e)
                conn.sendall(NACK)
                continue
            conn.sendall(ACK)
            reply = self.evaluate(signal, metrics, timestamp)
            conn.sendall(json.dumps(reply, allow_nan=False).encode())
            outcome = reply.get("Error") or reply.get("Resources")
            log.info(
                "%s: evaluated %d bytes at %s in %.1f ms -> %s",
                self.label,
                length,
                timestamp,
                (time.monotonic() - started) * 1000,
                outcome,
            )

    def evaluate(self, signal: BaseSignal | SignalFailure, metrics: dict[str, Any], timestamp: float) -> dict[str, Any]:
        if isinstance(signal, SignalFailure):
            return {"Error": str(signal)}
        try:
            with Watchdog(self.max_eval_seconds):
                result = signal.evaluate(metrics, timestamp)
            return {"Resources": resources_to_json(result)}
        except SignalFailure as e:
            return {"Error": str(e)}
        except Exception as e:
            log.exception("%s: value() raised", self.label)
            return {"Error": f"value() raised {type(e).__name__}: {e}"}


def parse_payload(payload: Any) -> tuple[dict[str, Any], float]:
    if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), dict):
        raise ValueError('expected {"metrics": {...}, "timestamp": T}')
    timestamp = payload.get("timestamp", time.time())
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise ValueError(f"timestamp must be a number, got {timestamp!r}")
    return payload["metrics"], timestamp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterman_signals.run", description=__doc__.split("\n")[0])
    parser.add_argument("namespace", help="the subpackage of clusterman_signals holding the signal")
    parser.add_argument("signal_name", help="the signal class name")
    parser.add_argument("app", nargs="?", default="__default__", help="the application this signal scales for")
    parser.add_argument("--max-eval-seconds", type=float, default=300.0, help="exit when one value() runs longer")
    parser.add_argument("--allowed-uids", default=None, help="uids allowed to connect besides our own")
    parser.add_argument("--log-level", default=os.environ.get("CMAN_SIGNAL_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    signals.signal(signals.SIGTERM, lambda *_: sys.exit(0))
    runner = Runner(
        args.namespace, args.signal_name, args.app, allowed_uids_from_env(args.allowed_uids), args.max_eval_seconds
    )
    server = runner.listen()
    try:
        runner.serve_forever(server)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

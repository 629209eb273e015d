"""Serve one signal on its abstract Unix socket: ``python -m clusterman_signals.run NS NAME APP``.

Several clients are served at once, one thread each (the autoscaler, ``clusterman signal
evaluate``, a health check), so that an idle, slow or hostile peer never blocks another.

Per connection: an unframed init JSON object, then any number of evaluations. Each is a 4-byte
length, ACK, the metrics JSON, ACK (NACK when it is malformed), and the JSON reply.

Limits:
- every message has a deadline from its first byte: the init ``--init-seconds`` from the
  connection, an evaluation's length and payload ``--message-seconds``, and our reply as long. A
  peer that trickles a byte at a time is dropped then;
- a client idle between evaluations for ``--idle-seconds`` is dropped;
- beyond ``--max-clients`` a newcomer takes the slot of the connection idle longest, else of the
  one whose message started first, never of one whose evaluation is under way. The tree's own uid
  (the autoscaler) outranks the other allowed uids, which hold at most one slot less than the
  limit, so the autoscaler always finds one.

A signal that cannot be loaded, or whose ``value()`` raises, is answered with ``{"Error": ...}``.
One that could not be imported is imported again, at most every ``--reload-seconds``. Its
traceback is logged once per distinct error (``--traceback-seconds``, ``tracebacks.py``). A
``value()`` that runs past ``--max-eval-seconds`` makes the process exit, so that its supervisor
restarts it. ``value()`` calls are serialised: signals need not be thread-safe.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import math
import os
import signal as signals
import socket
import sys
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.serving import SignalFailure
from clusterman_signals.serving import answer
from clusterman_signals.serving import build_signal
from clusterman_signals.serving import load_signal_class
from clusterman_signals.serving import parse_payload
from clusterman_signals.tracebacks import TracebackLog
from clusterman_signals.tracebacks import signal_traceback
from clusterman_signals.wire import ACK
from clusterman_signals.wire import LENGTH
from clusterman_signals.wire import MAX_PAYLOAD_BYTES
from clusterman_signals.wire import NACK
from clusterman_signals.wire import TRACEBACK_REPLY_KEY
from clusterman_signals.wire import Closed
from clusterman_signals.wire import Deadline
from clusterman_signals.wire import PeerRefused
from clusterman_signals.wire import Stall
from clusterman_signals.wire import Stream
from clusterman_signals.wire import WireError
from clusterman_signals.wire import allowed_uids_from_env
from clusterman_signals.wire import check_peer
from clusterman_signals.wire import dumps
from clusterman_signals.wire import loads
from clusterman_signals.wire import peer_uid
from clusterman_signals.wire import socket_name
from clusterman_signals.wire import socket_prefix
from clusterman_signals.wire import wants_traceback

log = logging.getLogger("clusterman_signals.run")
EXIT_HUNG = 75


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


@dataclass(frozen=True)
class Limits:
    """Seconds and counts that keep one peer from holding the runner."""

    init_seconds: float = 10.0  # from accept to a complete init message
    message_seconds: float = 30.0  # from a message's first byte to its last, and for our reply to drain
    idle_seconds: float = 900.0  # between evaluations (the autoscaler evaluates every few minutes)
    max_clients: int = 16
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    max_eval_seconds: float = 300.0
    reload_seconds: float = 30.0  # a signal that could not be imported is tried again at most this often
    traceback_seconds: float = 3600.0  # one distinct error's traceback is logged at most this often

    @property
    def max_other_uids(self) -> int:
        """Connections the other allowed uids may hold together: one slot is the tree's own."""
        return self.max_clients - 1 if self.max_clients > 1 else self.max_clients


class Sparing:
    """Lines about peers, said at most once every ``seconds`` with how many were held back since: a
    flood of peers must not become a flood of lines (nor keep the accept loop writing them)."""

    def __init__(self, logger: logging.Logger, level: int, seconds: float = 10.0) -> None:
        self.logger = logger
        self.level = level
        self.seconds = seconds
        self.quiet_until = -math.inf
        self.held = 0
        self._lock = threading.Lock()

    def log(self, message: str, *args: object) -> None:
        with self._lock:
            now = time.monotonic()
            if now < self.quiet_until:
                self.held += 1
                return
            held, self.held, self.quiet_until = self.held, 0, now + self.seconds
        if held:
            message += f" (and {held} more in the last {self.seconds:g} s)"
        self.logger.log(self.level, message, *args)


IDLE = "idle"  # between evaluations
RECEIVING = "receiving"  # inside the init or an evaluation's length and payload
EVALUATING = "evaluating"  # parsed: waiting for value() or inside it, or replying


@dataclass
class Peer:
    """One connection as the accept loop sees it when it must make room."""

    own_uid: bool  # the tree's own uid (the autoscaler): outranks the other allowed uids
    state: str = RECEIVING
    since: float = field(default_factory=time.monotonic)  # when it entered ``state``

    def rank(self) -> tuple[int, int, float]:
        """Which connection gives way first (the smallest): another uid's before ours, an idle one
        before a slow one, the one idle longest or whose message started first."""
        return (int(self.own_uid), 0 if self.state == IDLE else 1, self.since)


class Runner:
    def __init__(
        self,
        namespace: str,
        name: str,
        app: str,
        allowed_uids: set[int],
        limits: Limits | None = None,
        prefix: str = "",
    ) -> None:
        """``prefix``: the socket name prefix ($CMAN_SIGNAL_SOCKET_PREFIX, read by ``main``)."""
        self.namespace = namespace
        self.name = name
        self.app = app
        self.allowed_uids = allowed_uids
        self.limits = limits or Limits()
        self.label = f"{namespace}.{name} for {app}"
        self.address = socket_name(namespace, name, app, prefix)
        self._evaluating = threading.Lock()
        self._clients_lock = threading.Lock()
        self._clients: dict[socket.socket, Peer] = {}
        self._accept_log = Sparing(log, logging.WARNING)  # refused and dropped peers
        self._ended_log = Sparing(log, logging.INFO)  # connections that ended
        self.signal_class: type[BaseSignal] | SignalFailure = SignalFailure("not loaded")
        self._loading = threading.Lock()
        self._loaded_at = -math.inf  # monotonic: the last try
        self.tracebacks = TracebackLog(log, self.limits.traceback_seconds)

    def listen(self) -> socket.socket:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(self.address)
        except OSError as e:
            server.close()
            taken = " (another runner of this signal and app serves it: a second tree of this pool on this host?)"
            hint = taken if e.errno == errno.EADDRINUSE else ""
            raise SystemExit(f"cannot listen on @{self.address[1:]}: {e}{hint}") from e
        server.listen(64)
        return server

    def load(self) -> None:
        self._loaded_at = time.monotonic()
        try:
            self.signal_class = load_signal_class(self.namespace, self.name)
        except SignalFailure as e:
            log.error(
                "%s: %s (evaluations are answered with this error; tried again every %g s)",
                self.label, e, self.limits.reload_seconds,
            )  # fmt: skip
            self._traceback_of(e)
            self.signal_class = e

    def retry_load(self, init: Any) -> BaseSignal | SignalFailure:
        """For a connection whose signal could not be imported: import it again, at most every
        ``reload_seconds`` over all connections.

        What the module needs at import (a file, a service) may be there now. Nothing else would
        bring the signal back: the runner answers, so no watch restarts it."""
        with self._loading:
            if isinstance(self.signal_class, SignalFailure):
                if time.monotonic() - self._loaded_at < self.limits.reload_seconds:
                    return self.signal_class
                importlib.invalidate_caches()  # a module file that appeared since is found
                self.load()
                if isinstance(self.signal_class, SignalFailure):
                    return self.signal_class
                log.info("%s: imported on a later try", self.label)
        try:
            return build_signal(self.signal_class, init)
        except SignalFailure as e:
            log.error("%s: %s", self.label, e)
            self._traceback_of(e)
            return e

    def _traceback_of(self, failure: SignalFailure) -> None:
        """The traceback of what made the signal fail to import or construct, when there is one."""
        if failure.__cause__ is not None:
            self.tracebacks.failed(self.label, failure.__cause__)

    def serve_forever(self, server: socket.socket) -> None:
        self.load()
        log.info("%s listening on @%s", self.label, self.address[1:])
        own = os.getuid()
        while True:
            conn, _ = server.accept()
            try:
                check_peer(conn, self.allowed_uids, "client")
                peer = Peer(peer_uid(conn) == own)
            except (PeerRefused, OSError) as e:
                self._accept_log.log("%s: refused a connection: %s", self.label, e)
                conn.close()
                continue
            if not self._make_room(conn, peer):
                self._accept_log.log(
                    "%s: %d clients connected, none of them idle or slow; refused one more",
                    self.label, len(self._clients),
                )  # fmt: skip
                conn.close()
                continue
            threading.Thread(target=self._serve_client, args=(conn,), daemon=True).start()

    def _make_room(self, conn: socket.socket, newcomer: Peer) -> bool:
        """Give ``conn`` a slot. At the limit (for the other uids, at theirs) drop the connection
        that gives way first (``Peer.rank``) among those ``newcomer`` outranks or equals and not
        inside an evaluation; False when there is none."""
        limits = self.limits
        with self._clients_lock:
            full = len(self._clients) >= limits.max_clients
            others_full = sum(not p.own_uid for p in self._clients.values()) >= limits.max_other_uids
            if full or (others_full and not newcomer.own_uid):
                victims = [
                    (peer, held)
                    for held, peer in self._clients.items()
                    if peer.state != EVALUATING and (newcomer.own_uid or not peer.own_uid)
                ]
                if not victims:
                    return False
                peer, victim = min(victims, key=lambda v: v[0].rank())
                del self._clients[victim]
            else:
                victim = None
            self._clients[conn] = newcomer
        if victim is not None:
            how = "idle" if peer.state == IDLE else "inside a message"
            self._accept_log.log(
                "%s: %d clients connected; dropping one %s for %.1f s to make room",
                self.label, limits.max_clients, how, time.monotonic() - peer.since,
            )  # fmt: skip
            try:
                victim.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return True

    def _mark(self, conn: socket.socket, state: str) -> None:
        with self._clients_lock:
            peer = self._clients.get(conn)
            if peer is not None:
                peer.state, peer.since = state, time.monotonic()

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            self.serve_connection(conn)
        except (WireError, OSError) as e:
            self._ended_log.log("%s: connection ended: %s", self.label, str(e) or type(e).__name__)
        except Exception:
            log.exception("%s: connection failed", self.label)
        finally:
            with self._clients_lock:
                self._clients.pop(conn, None)
            conn.close()

    def serve_connection(self, conn: socket.socket) -> None:
        stream = Stream(conn)
        try:
            init = stream.read_json_value(Deadline(self.limits.init_seconds))
        except ValueError as e:
            log.error("%s: malformed init message: %s; closing the connection", self.label, e)
            stream.send(NACK, Deadline(self.limits.message_seconds))
            return
        signal: BaseSignal | SignalFailure
        unloaded = isinstance(self.signal_class, SignalFailure)  # not imported: tried again (retry_load)
        traceback_asked = wants_traceback(init)
        try:
            if isinstance(self.signal_class, SignalFailure):
                raise self.signal_class
            signal = build_signal(self.signal_class, init)
        except SignalFailure as e:
            log.error("%s: %s", self.label, e)
            if e is not self.signal_class:  # an import failure's traceback was logged when it failed
                self._traceback_of(e)
            signal = e
        while True:
            self._mark(conn, IDLE)
            try:
                first = stream.read_byte(Stall(self.limits.idle_seconds))
            except Closed:
                return  # a clean end between evaluations
            except TimeoutError:
                log.info("%s: dropping a client idle for %.0f s", self.label, self.limits.idle_seconds)
                return
            self._mark(conn, RECEIVING)
            message = Deadline(self.limits.message_seconds, "the message was not through")  # however it trickles
            (length,) = LENGTH.unpack(bytes([first]) + stream.read_exact(LENGTH.size - 1, message))
            if length == 0 or length > self.limits.max_payload_bytes:
                log.error("%s: refused a payload length of %d bytes; closing the connection", self.label, length)
                stream.send(NACK, message)
                return
            stream.send(ACK, message)
            started = time.monotonic()
            data = stream.read_exact(length, message)
            self._mark(conn, EVALUATING)
            try:
                metrics, timestamp = parse_payload(loads(data))
            except ValueError as e:  # also bad UTF-8, too deep nesting, too long integers, NaN
                log.error("%s: malformed metrics payload (%d bytes): %s", self.label, length, _short(e))
                stream.send(NACK, Deadline(self.limits.message_seconds))
                continue
            finally:
                del data
            stream.send(ACK, Deadline(self.limits.message_seconds))
            if unloaded and isinstance(signal, SignalFailure):
                signal = self.retry_load(init)
            reply, raised = self.evaluate(signal, metrics, timestamp)
            if raised is not None and traceback_asked:
                reply[TRACEBACK_REPLY_KEY] = signal_traceback(raised)
            stream.send(dumps(reply), Deadline(self.limits.message_seconds))
            del metrics  # freeing a large window takes a while: after the reply, not before it
            log.info(
                "%s: evaluated %d bytes at %s in %.1f ms -> %s",
                self.label,
                length,
                timestamp,
                (time.monotonic() - started) * 1000,
                reply.get("Error") or reply.get("Resources"),
            )

    def evaluate(
        self, signal: BaseSignal | SignalFailure, metrics: dict[str, Any], timestamp: float
    ) -> tuple[dict[str, Any], BaseException | None]:
        """The reply, and the exception behind an error reply (for its traceback), if any."""
        raised: list[BaseException] = []
        with self._evaluating, Watchdog(self.limits.max_eval_seconds):
            reply = answer(signal, metrics, timestamp, raised.append)
        if "Error" in reply and not isinstance(signal, SignalFailure):
            log.error("%s: %s", self.label, reply["Error"])
            if raised:
                self.tracebacks.failed(self.label, raised[0])
        return reply, (raised[0] if raised else None)


def _short(e: Exception, limit: int = 200) -> str:
    text = str(e)
    return text if len(text) <= limit else text[:limit] + "..."


class UtcFormatter(logging.Formatter):
    """Records stamped as clusterman stamps its own (ISO 8601 UTC, milliseconds:
    ``2026-11-23T08:41:07.123Z``, ``clusterman.core.timestamps``), with stdlib's knobs only: the
    SDK imports nothing of clusterman."""

    def converter(self, seconds: float | None) -> time.struct_time:
        return time.gmtime(seconds)

    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterman_signals.run", description=__doc__.split("\n")[0])
    parser.add_argument("namespace", help="the subpackage of clusterman_signals holding the signal")
    parser.add_argument("signal_name", help="the signal class name")
    parser.add_argument("app", nargs="?", default="__default__", help="the application this signal scales for")
    parser.add_argument("--max-eval-seconds", type=float, default=300.0, help="exit when one value() runs longer")
    parser.add_argument("--allowed-uids", default=None, help="uids allowed to connect besides our own")
    parser.add_argument("--max-clients", type=int, default=16, help="connections served at once")
    parser.add_argument("--init-seconds", type=float, default=10.0, help="drop a client sending no init by then")
    parser.add_argument(
        "--message-seconds", "--stall-seconds", type=float, default=30.0,
        help="drop a client whose message (or our reply) is not through this long after its first byte",
    )  # fmt: skip
    parser.add_argument("--idle-seconds", type=float, default=900.0, help="drop a client idle between evaluations")
    parser.add_argument(
        "--reload-seconds", type=float, default=30.0, help="import a signal that failed to import again this often"
    )
    parser.add_argument(
        "--traceback-seconds", type=float, default=3600.0, help="log one distinct error's traceback at most this often"
    )
    parser.add_argument("--log-level", default=os.environ.get("CMAN_SIGNAL_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(UtcFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    signals.signal(signals.SIGTERM, lambda *_: sys.exit(0))
    try:
        uids = allowed_uids_from_env(os.environ, args.allowed_uids)
        limits = Limits(
            args.init_seconds, args.message_seconds, args.idle_seconds, max(1, args.max_clients),
            max_eval_seconds=args.max_eval_seconds, reload_seconds=args.reload_seconds,
            traceback_seconds=args.traceback_seconds,
        )  # fmt: skip
        runner = Runner(args.namespace, args.signal_name, args.app, uids, limits, socket_prefix(os.environ))
    except ValueError as e:  # a bad uid list or socket prefix: one line, not a traceback
        print(f"python -m clusterman_signals.run: {e}", file=sys.stderr)
        return 2
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

"""The HTTP endpoints: event history (batch and stream), Prometheus metrics, health.

    GET /ws/v1/events/batch?start=ID&count=N   a page of history (YuniKorn's contract)
    GET /ws/v1/events/batch?last=N             the same, from the N-th newest event
    GET /ws/v1/events/stream?count=N           N recent events, then live ones, as JSON lines

Every event endpoint takes ``type=NODE,DECISION``: only events of those types, filtered before
``count``/``last`` are applied (the 3 newest POOL events, not the POOL events among the 3 newest).
    GET /metrics                               Prometheus text format
    GET /healthz                               200 while events are being stored and the health
                                               checks (the run loop, the bootstrap) find nothing wrong;
                                               its body lists what runs degraded (``degraded``) too

Loopback by default: there is no authentication (as in YuniKorn), so exposing it further is a
deliberate choice in the ``events:`` config. Errors are JSON ``{"status_code", "message",
"description"}``. The stream protocol and its limits are described in docs/events.md.
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST

from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.exporter import AutoscalerMetrics
from clusterman.events.publisher import Closed
from clusterman.events.publisher import EventPublisher
from clusterman.events.publisher import Overflowed
from clusterman.events.publisher import Subscription

log = logging.getLogger(__name__)

BATCH_PATH: Final = "/ws/v1/events/batch"
STREAM_PATH: Final = "/ws/v1/events/stream"
HISTORY_PAGE: Final = 1000  # events read from the ring per lock hold while sending stream history
STREAM_SEND_BUFFER: Final = 64 * 1024  # kernel memory per stream is bounded too
REFUSED_LOG_SECONDS: Final = 60.0  # connections refused over the limits are logged at most this often
_WHOLE_NUMBER: Final = re.compile(r"[0-9]{1,100}")


@dataclass(frozen=True)
class StreamLimits:
    max_total: int = 100  # concurrent streams, all clients
    max_per_client: int = 15  # concurrent streams from one client address
    buffer_size: int = 1000  # live events waiting for one client before it is cut off
    heartbeat_seconds: float = 15.0  # a line every so often when idle, so clients see a live link
    write_timeout_seconds: float = 10.0  # a client that reads nothing for this long is cut off


@dataclass(frozen=True)
class ConnectionLimits:
    """Every connection holds a thread while it is open, whatever it is for: an idle or hostile peer
    must neither pile threads up in the autoscaler's process nor shut other clients out."""

    max_total: int = 256  # open connections, all clients (streams are connections too)
    max_per_client: int = 64  # from one client address
    timeout_seconds: float = 10.0  # to send each piece of a request, or to read each piece of an answer


class BadRequest(Exception):
    def __init__(self, message: str, description: str) -> None:
        super().__init__(message)
        self.message = message
        self.description = description


def whole_number(params: Mapping[str, list[str]], name: str, *, minimum: int) -> int | None:
    """A query parameter as an integer >= ``minimum``; None when absent; BadRequest otherwise."""
    values = params.get(name)
    if values is None:
        return None
    if len(values) != 1:
        raise BadRequest(f"{name} is given {len(values)} times", "give each parameter once")
    text = values[0]
    if text.startswith("-") and _WHOLE_NUMBER.fullmatch(text[1:]):
        raise BadRequest(f"{name} must not be negative, got {text}", f"{name} is a whole number of at least {minimum}")
    if not _WHOLE_NUMBER.fullmatch(text):
        raise BadRequest(
            f"{name} must be a whole number (at most 100 digits), got {text[:40]!r}",
            f"{name} is a whole number of at least {minimum}",
        )
    value = int(text)
    if value < minimum:
        raise BadRequest(
            f"{name} must be at least {minimum}, got {value}", f"{name} is a whole number of at least {minimum}"
        )
    return value


def event_types(params: Mapping[str, list[str]]) -> frozenset[EventType]:
    """The ``type`` parameter: comma-separated type names; absent means every type."""
    values = params.get("type")
    if values is None:
        return frozenset()
    if len(values) != 1:
        raise BadRequest(f"type is given {len(values)} times", "give the types once, separated by commas")
    known = ", ".join(t.name for t in EventType)
    chosen = set()
    for name in (part.strip().upper() for part in values[0].split(",")):
        if name not in EventType.__members__:
            raise BadRequest(f"unknown event type {name[:40]!r}", f"known types: {known}")
        chosen.add(EventType[name])
    return frozenset(chosen)


def check_known(params: Mapping[str, list[str]], known: tuple[str, ...]) -> None:
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise BadRequest(f"unknown parameter(s) {', '.join(unknown)}", f"known parameters: {', '.join(known)}")


class _Slots:
    """Counts what is open (streams, connections), in total and per client address (not the Host
    header)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._lock = threading.Lock()
        self._per_client: dict[str, int] = {}
        self.total = 0

    def acquire(self, client: str, limits: StreamLimits | ConnectionLimits) -> str | None:
        """None when granted, else why not."""
        with self._lock:
            if self.total >= limits.max_total:
                return f"{self.total} {self.what} are open, the limit is {limits.max_total}"
            mine = self._per_client.get(client, 0)
            if mine >= limits.max_per_client:
                return f"{client} has {mine} {self.what} open, the limit per client is {limits.max_per_client}"
            self._per_client[client] = mine + 1
            self.total += 1
            return None

    def release(self, client: str) -> None:
        with self._lock:
            self.total -= 1
            left = self._per_client[client] - 1
            if left:
                self._per_client[client] = left
            else:
                del self._per_client[client]


class EventServer:
    """Serves one publisher's history and one metrics registry; ``start`` binds, ``stop`` ends."""

    def __init__(
        self,
        publisher: EventPublisher,
        metrics: AutoscalerMetrics | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rest_response_size: int = 10_000,
        limits: StreamLimits | None = None,
        connections: ConnectionLimits | None = None,
    ) -> None:
        self.publisher = publisher
        self.metrics = metrics
        self.host = host
        self.requested_port = port
        self.rest_response_size = rest_response_size
        self.limits = limits or StreamLimits()
        self.connections = connections or ConnectionLimits()
        self.slots = _Slots("streams")
        self.connection_slots = _Slots("connections")
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._streams: set[Subscription] = set()
        self._streams_lock = threading.Lock()
        # what else /healthz asks: each returns why the process is not healthy, "" when it is
        self.health_checks: list[Callable[[], str]] = []
        # what /healthz adds to its body without failing it (e.g. apps on their fallback signal)
        self.health_notes: list[Callable[[], Mapping[str, Any]]] = []

    def apply(self, rest_response_size: int, limits: StreamLimits) -> None:
        """New limits from a config reload; open streams keep the buffer they started with."""
        self.rest_response_size = rest_response_size
        self.limits = limits

    @property
    def listening(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the event server is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> EventServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        httpd = _HTTPServer((self.host, self.requested_port), _Handler, family, self)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="event-http", daemon=True
        )
        self._thread.start()
        log.info("event API listening on %s", self.url)
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._streams_lock:
            for sub in self._streams:
                sub.close()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
        self._httpd = None

    def __enter__(self) -> EventServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling (called from handler threads) ------------------------------------

    def batch(self, params: Mapping[str, list[str]]) -> dict[str, Any]:
        check_known(params, ("start", "count", "last", "type"))
        start = whole_number(params, "start", minimum=0)
        count = whole_number(params, "count", minimum=1)
        last = whole_number(params, "last", minimum=1)
        types = event_types(params)
        if start is not None and last is not None:
            raise BadRequest("start and last given together", "give start (an id) or last (a number), not both")
        limit = min(count or self.rest_response_size, self.rest_response_size)
        ring = self.publisher.ring
        if last is None:
            page = ring.read(start, limit, types)
        else:
            first = ring.newest_start(last, types)
            page = ring.read(first, limit if first is not None else 0, types)
        return {
            "InstanceUUID": self.publisher.ring.instance_uuid,
            "LowestID": page.lowest_id,
            "HighestID": page.highest_id,
            "EventRecords": [r.to_json() for r in page.records],
        }

    def health(self) -> tuple[int, dict[str, Any]]:
        ring = self.publisher.ring
        body: dict[str, Any] = {
            "InstanceUUID": ring.instance_uuid,
            "publisher": "running" if self.publisher.running else "stopped",
            "events_stored": len(ring),
            "events_dropped": self.publisher.dropped,
        }
        for note in self.health_notes:
            for key, value in note().items():  # lists from several notes add up
                body[key] = (
                    [*body[key], *value] if isinstance(value, list) and isinstance(body.get(key), list) else value
                )
        problems = [problem for check in self.health_checks if (problem := check())]
        if problems:
            body["problems"] = problems
        return (200 if self.publisher.running and not problems else 503), body

    def stream(self, handler: _Handler, params: Mapping[str, list[str]]) -> None:
        check_known(params, ("count", "type"))
        count = whole_number(params, "count", minimum=0) or 0
        types = event_types(params)
        limits = self.limits
        client = handler.client_address[0]
        refused = self.slots.acquire(client, limits)
        if refused is not None:
            handler.send_json(503, error_body(503, "too many event streams", refused))
            return
        sub = self.publisher.subscribe(limits.buffer_size)
        with self._streams_lock:
            self._streams.add(sub)
        try:
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
            handler.connection.settimeout(limits.write_timeout_seconds)
            handler.send_response(200)
            handler.send_header("Content-Type", "application/x-ndjson")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("Connection", "close")
            handler.end_headers()
            _StreamWriter(handler, self.publisher, sub, limits, types).run(count)
        except TimeoutError:
            self.publisher.cut(sub)
            log.info("event stream to %s cut: it read nothing for %g s", client, limits.write_timeout_seconds)
        except OSError as e:
            log.debug("event stream to %s ended: %s", client, e)
        finally:
            self.publisher.unsubscribe(sub)
            with self._streams_lock:
                self._streams.discard(sub)
            self.slots.release(client)


def error_body(status: int, message: str, description: str) -> dict[str, Any]:
    return {"status_code": status, "message": message, "description": description}


def json_line(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


class _StreamWriter:
    """One stream: header, history up to the subscription point, then live events.

    With a type filter, ``last_sent`` is the last id examined (sent or filtered out), so the
    ``NextID`` and ``LastID`` a client sees let it resume with the same filter and miss nothing.
    """

    def __init__(
        self,
        handler: _Handler,
        publisher: EventPublisher,
        sub: Subscription,
        limits: StreamLimits,
        types: frozenset[EventType] = frozenset(),
    ):
        self.out = handler.wfile
        self.publisher = publisher
        self.sub = sub
        self.limits = limits
        self.types = types
        self.last_sent = sub.lowest_id - 1  # the first id sent is then last_sent + 1

    def run(self, history: int) -> None:
        ring = self.publisher.ring
        if not self.types:
            start = max(self.sub.lowest_id, self.sub.after_id - history + 1)
        else:
            first = ring.newest_start(history, self.types, until=self.sub.after_id) if history else None
            start = self.sub.after_id + 1 if first is None else first
        self.write(
            {
                "InstanceUUID": ring.instance_uuid,
                "LowestID": self.sub.lowest_id,
                "HighestID": self.sub.after_id,
                "HistoryFromID": start,
            }
        )
        self.last_sent = start - 1
        if not self.send_history(start):
            return
        self.send_live()

    def write(self, value: Mapping[str, Any]) -> None:
        self.out.write(json_line(value))

    def write_records(self, records: list[EventRecord]) -> None:
        if records:
            self.out.write(b"".join(json_line(r.to_json()) for r in records))
            self.last_sent = records[-1].id

    def end(self, message: str, description: str) -> None:
        body = error_body(503, message, description)
        self.write({"Error": body, "NextID": self.last_sent + 1})

    def send_history(self, start: int) -> bool:
        next_id = start
        until = self.sub.after_id
        while next_id <= until:
            count = min(HISTORY_PAGE, until - next_id + 1)
            page = self.publisher.ring.read(next_id, count, self.types)
            if next_id < page.lowest_id:  # overwritten while we were sending: say so, never skip silently
                self.end(
                    "history overwritten while being sent",
                    f"events from {next_id} are gone; resume with {BATCH_PATH}?start={page.lowest_id}",
                )
                return False
            records = [r for r in page.records if r.id <= until]
            self.write_records(records)
            if len(page.records) < count or len(records) < len(page.records):
                break  # nothing more of these types up to the subscription point
            next_id = records[-1].id + 1
        self.last_sent = until
        return True

    def send_live(self) -> None:
        heartbeat = self.limits.heartbeat_seconds
        while True:
            item = self.sub.get(timeout=heartbeat)
            if item is None:
                self.write({"Heartbeat": time.time_ns(), "LastID": self.last_sent})
            elif isinstance(item, Overflowed):
                self.end(
                    "slow consumer",
                    f"more than {self.limits.buffer_size} events waited for this stream; "
                    f"resume with {BATCH_PATH}?start={self.last_sent + 1}",
                )
                return
            elif isinstance(item, Closed):
                self.end("server shutting down", f"resume with {BATCH_PATH}?start={self.last_sent + 1}")
                return
            elif self.types and item.event.type not in self.types:
                self.last_sent = item.id
            else:
                self.write_records([item])


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], family: socket.AddressFamily, app: EventServer
    ) -> None:
        self.address_family = family
        self.app = app
        self._refused = 0  # connections refused since the last line that said so
        self._refused_logged = -math.inf
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, within ``ConnectionLimits``; beyond them a 503 at once, sent
        without waiting (the accepting thread must never block on a peer)."""
        slots = self.app.connection_slots
        refused = slots.acquire(client_address[0], self.app.connections)
        if refused is None:
            try:
                super().process_request(request, client_address)
            except BaseException:
                slots.release(client_address[0])  # no thread (out of them?): the slot is free again
                raise
            return
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= REFUSED_LOG_SECONDS:  # a flood makes one line a minute
            log.warning(
                "event API: %d connection(s) refused, the last from %s: %s", self._refused, client_address[0], refused
            )
            self._refused, self._refused_logged = 0, now
        body = json.dumps(error_body(503, "too many connections", refused)).encode()
        head = (
            f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        try:
            request.setblocking(False)
            request.send(head.encode() + body)
            request.recv(65536)  # what the peer sent already: closing over unread data would reset the 503
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that left mid-request or mid-answer (a reset, a broken pipe) is routine; anything
        else is a bug. Both go to the log: socketserver would print a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.debug("event API: connection from %s ended: %s", client_address[0], error)
        else:
            log.exception("event API: a request from %s failed", client_address[0])

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.app.connection_slots.release(client_address[0])


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    server_version = "clusterman-events"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.app.connections.timeout_seconds)  # a silent peer is let go

    def do_GET(self) -> None:
        app = self.server.app
        url = urllib.parse.urlsplit(self.path)
        params = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        try:
            if url.path == BATCH_PATH:
                self.send_json(200, app.batch(params))
            elif url.path == STREAM_PATH:
                app.stream(self, params)
            elif url.path == "/metrics" and app.metrics is not None:
                self.send_body(200, app.metrics.exposition(), CONTENT_TYPE_LATEST)
            elif url.path == "/healthz":
                self.send_json(*app.health())
            else:
                self.send_json(404, error_body(404, f"no such endpoint: {url.path}", _ENDPOINTS))
        except BadRequest as e:
            self.send_json(400, error_body(400, e.message, e.description))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client left, or stopped reading an answer
        except Exception as e:  # a bug: answer and keep serving, never take the autoscaler down
            log.exception("event API: %s failed", self.path)
            self.send_json(500, error_body(500, "internal error", f"{type(e).__name__}: {e}"))

    def _not_allowed(self) -> None:
        self.send_json(405, error_body(405, f"{self.command} is not supported", "every endpoint is GET only"))

    do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def send_json(self, status: int, body: Mapping[str, Any]) -> None:
        self.send_body(status, json.dumps(body, separators=(",", ":")).encode(), "application/json")

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


_ENDPOINTS: Final = f"endpoints: {BATCH_PATH}, {STREAM_PATH}, /metrics, /healthz"

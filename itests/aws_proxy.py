"""A loopback HTTP proxy in front of moto's server that answers chosen AWS calls with errors.

boto3 talks to the proxy as if it were AWS; the proxy forwards to moto and records every request
that reached it. A ``Fault`` turns matching requests into an AWS error response, either instead
of forwarding (the call never happened) or after forwarding (the call happened and the client
cannot know): the ambiguous case that retries must survive. A slow ``Fault`` answers moto's own
answer late instead: held before forwarding, or forwarded at once and its answer held.
"""

from __future__ import annotations

import http.client
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from types import TracebackType

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "content-length"}
SERVICE_IN_AUTH = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")


@dataclass
class Fault:
    action: str = ""  # e.g. "SetDesiredCapacity"; "" matches every action
    contains: str = ""  # text the request (path or body) must contain, e.g. a group name
    code: str = "Throttling"
    status: int = 400
    times: int | None = 1  # how many matching requests to answer with the error; None = all
    after: bool = False  # forward to moto first, then answer the error anyway
    message: str = "Rate exceeded"
    # > 0: no error, moto's own answer, late: the request is held this long before it is forwarded,
    # or with ``after``, forwarded at once and its answer held (the write landed, the caller waits)
    slow_seconds: float = 0.0
    hits: int = 0


@dataclass(frozen=True)
class Request:
    service: str
    action: str
    params: dict[str, str]
    reached_moto: bool


def error_body(service: str, code: str, message: str) -> bytes:
    if service == "ec2":
        xml = f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        return (xml + "<RequestID>proxy</RequestID></Response>").encode()
    if service == "s3":
        return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    xml = f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
    return (xml + "<RequestId>proxy</RequestId></ErrorResponse>").encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up on an answer held on purpose is routine: no traceback. One printed
        by a handler thread that outlived its test would land in a later test's captured stderr."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class FaultyProxy:
    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def calls(self, action: str, reached_moto: bool = True) -> list[dict[str, str]]:
        """Parameters of each ``action`` request (that reached moto, by default), in order."""
        with self._lock:
            return [r.params for r in self.requests if r.action == action and r.reached_moto == reached_moto]

    def _fault_for(self, action: str, text: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if (f.action in ("", action)) and f.contains in text and (f.times is None or f.hits < f.times):
                    f.hits += 1
                    return f
        return None

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                found = SERVICE_IN_AUTH.search(self.headers.get("Authorization", ""))
                service = found.group(1) if found else "s3"
                query = urllib.parse.urlsplit(self.path).query
                params = dict(urllib.parse.parse_qsl(body.decode(errors="replace") or query))
                action = params.get("Action", "")
                fault = proxy._fault_for(action, self.path + " " + body.decode(errors="replace"))
                reply: tuple[int, list[tuple[str, str]], bytes] | None = None
                slow = fault.slow_seconds if fault is not None else 0.0
                if slow and fault is not None and not fault.after:
                    time.sleep(slow)
                if fault is None or fault.after or slow:
                    reply = self._forward(body)
                if slow and fault is not None and fault.after:
                    time.sleep(slow)
                proxy._record(Request(service, action, params, reached_moto=reply is not None))
                if fault is not None and not slow:
                    reply = (
                        fault.status,
                        [("Content-Type", "text/xml")],
                        error_body(service, fault.code, fault.message),
                    )
                assert reply is not None
                status, headers, payload = reply
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    payload = response.read()
                    kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
                    return response.status, kept, payload
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        return Handler

    def start(self) -> FaultyProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

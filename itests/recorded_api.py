"""A small HTTP server on loopback that answers with recorded API JSON (Kubernetes, Mesos).

No Kubernetes API server or Mesos master can run on these machines, so the tests serve recorded
responses to the *real* client libraries (the ``kubernetes`` client, ``requests``) instead of
patching them. For Kubernetes list calls the server applies what the real API server would: the
equality ``labelSelector`` and ``fieldSelector`` the connector sends, and ``limit``/``continue``
pagination, so the client's query encoding and the connector's paging both run for real. A
``watch=true`` request to a recorded list is a watch on a cluster where nothing changes: a stream
that stays open, empty, for its ``timeoutSeconds``.

An answer's body is bytes, or an iterator of byte strings, sent as they come with chunked transfer
encoding (a watch stream); an iterator that raises ``DropConnection`` drops the connection
without ending the stream, as a dying server or a proxy does.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    method: str = "GET"
    body: bytes = b""
    # set when the server shuts down: a stream being sent for this request ends
    stopping: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    at: float = field(default_factory=time.monotonic, repr=False, compare=False)  # when it came

    def json(self) -> Any:
        return json.loads(self.body or b"null")


Body = bytes | Iterator[bytes]


class DropConnection(Exception):
    """Raised by a streamed body: the connection is dropped mid-stream."""


@dataclass
class Route:
    body: Any  # a recorded response; a Kubernetes list (``items``) is filtered and paged
    status: int = 200
    kubernetes_list: bool = False


@dataclass
class RecordedApi:
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def serve(self, path: str, body: Any, status: int = 200, *, kubernetes_list: bool = False) -> None:
        self.routes[path] = Route(body, status, kubernetes_list)

    def answer(self, request: Request) -> tuple[int, Body]:
        self.requests.append(request)
        if request.method != "GET":
            return 405, json.dumps(
                {"kind": "Status", "code": 405, "message": "recorded answers are read only"}
            ).encode()
        route = self.routes.get(request.path)
        if route is None:
            return 404, json.dumps({"kind": "Status", "code": 404, "message": f"{request.path} not found"}).encode()
        if isinstance(route.body, bytes):
            return route.status, route.body
        if not route.kubernetes_list or route.status != 200:
            return route.status, json.dumps(route.body).encode()
        if flag(request.query, "watch"):
            return 200, quiet_watch(float(request.query.get("timeoutSeconds") or 60), request.stopping)
        return 200, json.dumps(kubernetes_page(route.body, request.query)).encode()


def flag(query: dict[str, str], name: str) -> bool:
    """A boolean query parameter as the API server reads it (Go's ParseBool: the client sends "True")."""
    return query.get(name, "") in ("1", "t", "T", "TRUE", "true", "True")


def quiet_watch(seconds: float, stopping: threading.Event) -> Iterator[bytes]:
    """A watch stream of a cluster where nothing changes: open, empty, until its timeout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stopping.is_set():
        stopping.wait(0.05)
        yield b""


def lookup(obj: Any, dotted: str) -> str:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


def label(obj: dict[str, Any], key: str) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(key, ""))


def matches(requirements: str, value_of: Any) -> bool:
    """Equality-based selectors, as the API server reads them: ``a=b,c!=d``."""
    for requirement in filter(None, requirements.split(",")):
        if "!=" in requirement:
            key, wanted = requirement.split("!=", 1)
            if value_of(key) == wanted:
                return False
        else:
            key, wanted = requirement.replace("==", "=").split("=", 1)
            if value_of(key) != wanted:
                return False
    return True


def kubernetes_page(recorded: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
    items = [
        item
        for item in recorded["items"]
        if matches(query.get("labelSelector", ""), lambda k, i=item: label(i, k))
        and matches(query.get("fieldSelector", ""), lambda k, i=item: lookup(i, k))
    ]
    offset = int(base64.b64decode(query["continue"]).decode()) if query.get("continue") else 0
    limit = int(query.get("limit", 0)) or len(items)
    page = items[offset : offset + limit]
    metadata = {"resourceVersion": recorded.get("metadata", {}).get("resourceVersion", "1")}
    if offset + limit < len(items):
        metadata["continue"] = base64.b64encode(str(offset + limit).encode()).decode()
        metadata["remainingItemCount"] = len(items) - offset - limit
    return {**recorded, "metadata": metadata, "items": page}


def kubeconfig(path: Path, server: str) -> str:
    """A kubeconfig file like an operator's, pointing at ``server``, with a bearer token."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "recorded", "cluster": {"server": server}}],
                "users": [{"name": "collector", "user": {"token": "recorded-token"}}],
                "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "collector"}}],
                "current-context": "recorded",
            }
        )
    )
    return str(path)


class _TlsServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ssl.SSLError):  # a client refusing our certificate is a test's point
            super().handle_error(request, client_address)


class Port:
    """``answer`` served on one loopback port (any method), over TLS with ``tls``. The port can go
    down as a stopped server's does (new connections refused, open ones reset) and come back."""

    def __init__(self, answer: Callable[[Request], tuple[int, Body]], tls: ssl.SSLContext | None = None) -> None:
        self.answer, self.tls = answer, tls
        self.stopping = threading.Event()
        self.port = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def up(self) -> bool:
        return self._server is not None

    def come_up(self) -> None:
        """Listen (again, on the same port once it had one)."""
        port = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked streams; the client may keep the connection

            def setup(self) -> None:
                super().setup()
                with port._lock:
                    port._open.add(self.connection)

            def finish(self) -> None:
                with port._lock:
                    port._open.discard(self.connection)
                try:
                    super().finish()
                except OSError:  # reset when the port went down
                    pass

            def handle_any(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, reply = port.answer(Request(parts.path, query, headers, self.command, body, port.stopping))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    if isinstance(reply, bytes):
                        self.send_header("Content-Length", str(len(reply)))
                        self.end_headers()
                        self.wfile.write(reply)
                        return
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in reply:
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except DropConnection:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:  # the client went away (a test's silent server), or the port went down
                    self.close_connection = True

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = handle_any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = (ThreadingHTTPServer if self.tls is None else _TlsServer)(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def go_down(self) -> None:
        """Stop listening and reset every open connection, as a server process that stopped."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = self._thread = None
        server.shutdown()
        server.server_close()
        with self._lock:
            for connection in self._open:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        thread.join()

    def close(self) -> None:
        self.stopping.set()
        self.go_down()


@contextmanager
def serving_port(answer: Callable[[Request], tuple[int, Body]], tls: ssl.SSLContext | None = None) -> Iterator[Port]:
    port = Port(answer, tls)
    port.come_up()
    try:
        yield port
    finally:
        port.close()


@contextmanager
def http_server(answer: Callable[[Request], tuple[int, Body]], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve ``answer`` on a free loopback port (any method), over TLS with ``tls``; yields the base URL."""
    with serving_port(answer, tls) as port:
        yield port.url


@contextmanager
def recorded_api() -> Iterator[RecordedApi]:
    api = RecordedApi()
    with http_server(api.answer) as url:
        api.url = url
        yield api


class SilentServer:
    """An API server that accepts connections and never answers (a hung or stopped process behind
    a live port): ``connections`` counts the attempts the client made."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        return len(self._accepted)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._accepted.append(conn)

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(5)
        for conn in self._accepted:
            conn.close()


@contextmanager
def silent_api() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()

"""A loopback HTTP server that answers every request with one canned reply, and counts requests.

For faults no real server will produce on demand: DynamoDB throttling, a proxy's 503.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any

Reply = tuple[int, dict[str, str], bytes]


class CannedServer:
    def __init__(self, reply: Callable[[dict[str, Any] | None, dict[str, str]], Reply]) -> None:
        self.requests: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append(headers)
                status, reply_headers, payload = reply(body, headers)
                self.send_response(status)
                for name, value in reply_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> CannedServer:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()


def dynamodb_error(code: str, status: int = 400) -> Callable[[dict[str, Any] | None, dict[str, str]], Reply]:
    payload = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "canned"}).encode()
    return lambda body, headers: (status, {"Content-Type": "application/x-amz-json-1.0"}, payload)


def dynamodb_unprocessed(body: dict[str, Any] | None, headers: dict[str, str]) -> Reply:
    """BatchWriteItem that never takes anything: every item comes back unprocessed."""
    unprocessed = (body or {}).get("RequestItems", {})
    payload = json.dumps({"UnprocessedItems": unprocessed}).encode()
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, payload

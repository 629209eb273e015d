"""A tiny exporter of known values, for a real Prometheus (itests/prometheus_server.py) to scrape."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

# What the exporter serves: known gauges, so every value read back can be checked.
EXPOSITION = """\
# TYPE clusterman_test_cpus gauge
clusterman_test_cpus{cluster="c1",pool="web",scheduler="kubernetes"} 42
clusterman_test_cpus{cluster="c1",pool="other",scheduler="kubernetes"} 7
# TYPE clusterman_test_queue gauge
clusterman_test_queue{app="seagull"} 5
clusterman_test_queue{app="albatross"} 9
"""


class Exporter:
    """Serves ``EXPOSITION`` at ``/metrics`` on 127.0.0.1 from a thread of this process."""

    def __init__(self) -> None:
        body = EXPOSITION.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Exporter:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""A real Prometheus (Debian's package) on loopback, scraping a tiny exporter of known values."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

import requests

from clusterman.local.moto_server import free_port

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


class PrometheusServer:
    """``with PrometheusServer(tmp, targets) as prom: prom.url``; scrapes every ``interval`` seconds."""

    def __init__(self, directory: Path, targets: list[str], interval: str = "1s") -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets = targets
        self.interval = interval
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("no prometheus binary: `make test` installs Debian's package (system-packages.txt)")
        config = self.directory / "prometheus.yml"
        targets = ", ".join(f'"{t}"' for t in self.targets)
        config.write_text(
            f"global: {{scrape_interval: {self.interval}, evaluation_interval: {self.interval}}}\n"
            f"scrape_configs:\n  - job_name: known\n    static_configs: [{{targets: [{targets}]}}]\n"
        )
        log = open(self.directory / "prometheus.log", "ab")  # noqa: SIM115 - closed with the process
        self._proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}: see {self.directory}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus did not get ready on {self.url} within {timeout:g} s")

    def wait_for_samples(self, query: str, count: int, timeout: float = 30.0) -> None:
        """Until ``query`` has at least ``count`` one-second samples: the scrapes have landed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = time.time()
            params = {"query": query, "start": str(now - 60), "end": str(now), "step": "1"}
            body = requests.get(f"{self.url}/api/v1/query_range", params=params, timeout=5).json()
            results = body.get("data", {}).get("result", [])
            if results and len(results[0]["values"]) >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus had no {count} samples of {query} within {timeout:g} s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

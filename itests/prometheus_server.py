"""A real Prometheus (Debian's package) on loopback, scraping given targets every second."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from clusterman.local.moto_server import free_port
from clusterman.local.process import stop
from clusterman.local.process import wait_ready

CONFIG = """\
global:
  scrape_interval: {interval}
  scrape_timeout: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: clusterman
    static_configs:
      - targets: [{targets}]
"""


class PrometheusServer:
    """``with PrometheusServer(tmp, targets) as prom: prom.url``; scrapes every ``interval``."""

    def __init__(self, directory: Path, targets: list[str], interval: str = "1s") -> None:
        self.directory = directory
        self.targets = targets
        self.interval = interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = directory / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: `make test` installs it (system-packages.txt)")
        config = self.directory / "prometheus.yml"
        config.write_text(CONFIG.format(interval=self.interval, targets=", ".join(f'"{t}"' for t in self.targets)))
        with open(self.log_path, "ab") as log:
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
        try:
            wait_ready(self._proc, f"{self.url}/-/ready", "prometheus", timeout)
        except RuntimeError as e:
            raise RuntimeError(f"{e}: {self.log_path.read_text()}") from e
        return self

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query through the HTTP API: the list of ``{"metric", "value"}`` results."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for_samples(self, query: str, count: int, timeout: float = 30.0) -> None:
        """Until ``query`` has at least ``count`` one-second samples: the scrapes have landed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = time.time()
            params = {"query": query, "start": str(now - 60), "end": str(now), "step": "1"}
            url = f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
            with urllib.request.urlopen(url, timeout=5) as response:
                results = json.loads(response.read()).get("data", {}).get("result", [])
            if results and len(results[0]["values"]) >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"prometheus had no {count} samples of {query} within {timeout:g} s")

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        stop(self._proc)
        self._proc = None

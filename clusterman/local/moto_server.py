"""moto's server on loopback: a real HTTP endpoint that boto3 talks to as if it were AWS.

Used by ``make run``'s embedded stack and by the integration tests, so the real HTTP path of
boto3 runs (never an in-process patch).
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType

from clusterman.local.process import stop
from clusterman.local.process import wait_ready
from clusterman.tree.supervisor import die_with_parent

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``with MotoServer() as moto: boto3.client("s3", endpoint_url=moto.url)``."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> MotoServer:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
            env={**os.environ, **FAKE_CREDENTIALS},
            preexec_fn=functools.partial(die_with_parent, os.getpid()),  # never outlive whoever started it
        )
        wait_ready(self._proc, f"{self.url}/moto-api/", "moto server", timeout)
        return self

    def reset(self) -> None:
        """Forget every resource (between tests sharing one server)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        stop(self._proc)
        self._proc = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

"""Shared helpers for integration tests: real processes, real sockets, nothing patched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient

FIXTURES = Path(__file__).parent / "fixtures"

# Every AWS call of the integration tests goes to a loopback server; no test may ever find real
# credentials, and none may depend on a fixture having set fake ones first.
os.environ.update(FAKE_CREDENTIALS)


def unique_app() -> str:
    return f"itest{uuid.uuid4().hex[:10]}"


def wait_listening(address: SignalAddress, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"runner exited with {proc.returncode}")
        client = SignalClient(address, "c", "p", connect_timeout=0.2)
        try:
            client.connect()
            return
        except Exception:
            time.sleep(0.05)
        finally:
            client.close()
    raise RuntimeError(f"{address} never listened")


class Runners:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, namespace: str, name: str, app: str | None = None, *extra: str
    ) -> tuple[SignalAddress, subprocess.Popen[bytes]]:
        address = SignalAddress(namespace, name, app or unique_app())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen(
            [sys.executable, "-m", "clusterman_signals.run", namespace, name, address.app, *extra],
            env=env,
            stderr=subprocess.PIPE,
        )
        self.procs.append(proc)
        wait_listening(address, proc)
        return address, proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stderr:
                proc.stderr.close()


@pytest.fixture
def runners() -> Iterator[Runners]:
    r = Runners()
    yield r
    r.stop_all()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server per test session (per xdist worker); tests that need a clean slate reset it."""
    from clusterman.local.moto_server import MotoServer

    os.environ.update(FAKE_CREDENTIALS)
    with MotoServer() as server:
        yield server


@pytest.fixture(scope="session")
def signal_versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Tarballs of signal versions v1 and v2 built once per session (per xdist worker) from a git repo
    with real tags; tests upload them into buckets of their own (uploading costs milliseconds)."""
    from itests.tree_helpers import build_versions

    yield build_versions(tmp_path_factory.mktemp("signal-versions"), {"v1": 1.0, "v2": 2.0})

"""A signal whose module fails at import (a file or service it reads at import is missing) under a
real runner: the runner answers every evaluation with the import error, so nothing restarts it
(it is alive, and answers), and the app stayed on errors for good. It now imports the signal again,
at most every ``--reload-seconds``, on the same connection the autoscaler keeps open."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clusterman.core.resources import ResourceRequest
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.client import SignalError
from itests.conftest import wait_listening

METRICS = {"cpus_allocated": [[0, 3.0], [60, 4.0]]}


def fragile_signal(root: Path, namespace: str, needs: Path) -> Path:
    package = root / "clusterman_signals" / namespace
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"from pathlib import Path\n"
        f"CPUS = float(Path({str(needs)!r}).read_text())  # read at import: fails while it is missing\n"
        "from clusterman_signals.base_signal import BaseSignal\n"
        "from clusterman_signals.base_signal import SignalResources\n\n\n"
        "class Fragile(BaseSignal):\n"
        "    def value(self, metrics, timestamp):\n"
        "        return SignalResources(cpus=CPUS)\n"
    )
    return root


def test_a_signal_that_failed_to_import_is_imported_again_and_answers(tmp_path):
    namespace = f"fragile_{uuid.uuid4().hex[:8]}"
    needs = tmp_path / "cpus.txt"
    path = fragile_signal(tmp_path / "signals", namespace, needs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    address = SignalAddress(namespace, "Fragile", "web")
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterman_signals.run", namespace, "Fragile", "web", "--reload-seconds", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_listening(address, proc)
        with SignalClient(address, "c", "p", {}, read_timeout=10, connect_timeout=10) as client:
            with pytest.raises(SignalError, match=r"cannot import namespace .*FileNotFoundError"):
                client.evaluate(METRICS, 60)
            needs.write_text("3")
            with pytest.raises(SignalError, match="cannot import"):  # within --reload-seconds: not tried again
                client.evaluate(METRICS, 60)
            time.sleep(1.1)
            assert client.evaluate(METRICS, 60) == ResourceRequest(cpus=3.0)  # the same connection
        assert proc.poll() is None  # no restart was needed
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "imported on a later try" in err, err[-2000:]

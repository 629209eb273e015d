"""Real autoscaler processes for the run fault tests: their lines, as they come, with the time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO

import boto3

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.signals.client import SignalAddress
from itests.aws_world import REGION
from itests.aws_world import TAG_KEY
from itests.conftest import wait_listening
from itests.test_state_dynamodb import make_table

POOL = "web"


def write_config(
    tmp_path: Path, cluster: str, url: str, tasks: int, extra_main: str = "", pool_signal: str = ""
) -> str:
    """A simulated pool (its nodes the ASG's instances, ``tasks`` 1-cpu tasks) scaled in moto."""
    (tmp_path / "clusterman.yaml").write_text(
        f"clusters:\n  {cluster}: {{aws_region: {REGION}}}\n"
        f"cluster_config_directory: pools\nstate_directory: state\n"
        "events: {port: 0}\n"
        + (
            extra_main
            or f"aws: {{region: {REGION}, endpoint_url: '{url}'}}\n"
            "autoscale_signal: {name: MostRecentResources, branch_or_tag: v1, period_minutes: 1}\n"
        )
    )
    pools = tmp_path / "pools" / cluster
    pools.mkdir(parents=True, exist_ok=True)
    (pools / f"{POOL}.simulated").write_text(
        f"resource_groups: [{{asg: {{tag: '{TAG_KEY}'}}}}]\n".replace("'", "")
        + "scaling_limits: {min_capacity: 1, max_capacity: 10, max_weight_to_add: 10, max_weight_to_remove: 10}\n"
        + (pool_signal or "autoscale_signal: {internal: true, period_minutes: 1}\n")
        + "autoscaling: {setpoint: 0.7, target_capacity_margin: 0.05}\n"
        "simulation: {node_resources: {cpus: 2, mem: 8000}, join_delay_seconds: 0, "
        f"tasks: [{{count: {tasks}, cpus: 1}}]}}\n"
    )
    return str(tmp_path / "clusterman.yaml")


STEADY = """
from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.base_signal import SignalResources


class Steady(BaseSignal):
    def value(self, metrics, timestamp):
        return SignalResources(cpus=1.0)
"""


def steady_signal(tmp_path: Path, namespace: str, more: str = "") -> Path:
    """A signal namespace of this test's own (a unique socket name): ``Steady`` asks for 1 cpu;
    ``more`` is added to its module."""
    package = tmp_path / "signals" / "clusterman_signals" / namespace
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STEADY + more)
    return tmp_path / "signals"


def app_signal_config(tmp_path: Path, cluster: str, url: str, name: str, source: str) -> tuple[str, str, str, Path]:
    """``write_config`` with the default signal ``Steady`` and one app whose signal is ``name``
    (defined by ``source``, added to the module), in a namespace and for an app of the test's own
    (socket names no one else uses): the config, the namespace, the app, the signals' path."""
    namespace, app = f"ns{uuid.uuid4().hex[:10]}", f"app{uuid.uuid4().hex[:10]}"
    signals = steady_signal(tmp_path, namespace, source)
    main = (
        f"aws: {{region: {REGION}, endpoint_url: '{url}'}}\n"
        f"autoscale_signal: {{name: Steady, namespace: {namespace}, branch_or_tag: v1, period_minutes: 1}}\n"
    )
    pool = f"app_signals: {{{app}: {{name: {name}, namespace: {namespace}, branch_or_tag: v1, period_minutes: 1}}}}\n"
    return write_config(tmp_path, cluster, url, 1, extra_main=main, pool_signal=pool), namespace, app, signals


def start_runner(
    path: Path, namespace: str, app: str, name: str = "Steady", log: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """``log``: where the runner's log goes (default: nowhere)."""
    address = SignalAddress(namespace, name, app)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterman_signals.run", namespace, name, app],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log or subprocess.DEVNULL,
    )
    wait_listening(address, proc)
    return proc


def make_state_table(url: str, name: str) -> None:
    make_table(boto3.client("dynamodb", endpoint_url=url, region_name=REGION), name)


def dynamodb_config(tmp_path: Path, cluster: str, url: str, tasks: int) -> tuple[str, str]:
    """``write_config`` with the pool's state (lease, pauses, kept state) in a new DynamoDB table
    of moto's server; the config's path and the table's name."""
    table = f"state-{uuid.uuid4().hex[:8]}"
    make_state_table(url, table)
    main = (
        f"aws: {{region: {REGION}, endpoint_url: '{url}', state_table: {table}}}\n"
        "state: {backend: dynamodb}\n"
        "autoscale_signal: {name: MostRecentResources, branch_or_tag: v1, period_minutes: 1}\n"
    )
    return write_config(tmp_path, cluster, url, tasks=tasks, extra_main=main), table


def cli_command(config: str, cluster: str, command: str, *args: str) -> list[str]:
    """``clusterman COMMAND`` on this module's pool, as an operator types it."""
    return [sys.executable, "-m", "clusterman", "--env-config-path", config, command,
            "--cluster", cluster, "--pool", POOL, "--scheduler", "simulated", *args]  # fmt: skip


class Autoscaler:
    """``python -m clusterman.batch.autoscaler`` with its stdout and stderr lines collected."""

    def __init__(
        self,
        config: str,
        cluster: str,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
        scheduler: str = "simulated",
    ) -> None:
        """``prefix``: a command the autoscaler's is run under (one that execs it, keeping the pid)."""
        command = [*prefix, sys.executable, "-m", "clusterman.batch.autoscaler", "--env-config-path", config,
                   "--cluster", cluster, "--pool", POOL, "--scheduler", scheduler, *args]  # fmt: skip
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **FAKE_CREDENTIALS, **(env or {})},
        )
        self.started = time.monotonic()
        self.out: list[tuple[float, str]] = []
        self.err: list[tuple[float, str]] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[tuple[float, str]]) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            lines.append((time.monotonic(), line.rstrip("\n")))

    def lines(self) -> list[str]:
        return [line for _, line in self.out]

    def wait_for(self, test: Callable[[str], bool], timeout: float, after: float = 0.0) -> tuple[float, str]:
        """The first stdout line (printed at or after ``after``, monotonic) that passes ``test``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.out):
                if at >= after and test(line):
                    return at, line
            if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                break
            time.sleep(0.05)
        raise AssertionError(
            f"no such line within {timeout} s; stdout: {self.lines()}; stderr: {self.stderr()[-3000:]}"
        )

    def stderr(self) -> str:
        return "\n".join(line for _, line in self.err)

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=5)


def acted(line: str) -> bool:
    """A line of a run that decided and may have changed the pool (not standby, paused, held...)."""
    return "| target" in line and "(standby" not in line and "(overrun" not in line

"""``clusterman status``'s exit status, and each problem said once, rounded.

Before: status exited 0 when every part was unknown; against a stopped stack it printed each
error twice (the readers' warnings on stderr, then the report; the event API's for the last
decisions and again for the health), showed ``nodes: none; tasks: 0 running, 14 pending`` for a
pool whose nodes are its groups' instances and whose groups could not be read, and a signal's
wait as ``within 7.49903 s``. Now: 0 ok, 3 degraded, 4 unhealthy, 5 unknown.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterman.cli.status import exit_status
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.protocol import SignalError
from clusterman.wiring.pool_status import AutoscalerHealth
from clusterman.wiring.pool_status import PoolStatus
from clusterman.wiring.pool_status import Unavailable
from tests.test_cli_no_tracebacks import POOL
from tests.test_cli_no_tracebacks import world  # noqa: F401 - the fixture: AWS and the event API refuse


def test_status_against_a_stopped_stack_is_unknown_and_says_each_problem_once(world: Path) -> None:  # noqa: F811
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAN_")}
    command = [sys.executable, "-m", "clusterman", "--env-config-path", str(world / "clusterman.yaml"),
               "status", *POOL, "--timeout", "2"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 5, done
    said = done.stdout + done.stderr
    assert said.count("DescribeTags failed") == 1, said
    assert said.count("cannot reach the event API") == 1, said
    lines = done.stdout.splitlines()
    assert "nodes: unknown: its nodes are its groups' instances, and no group could be read" in lines, lines
    assert "autoscaler health: unknown (as last decisions)" in lines, lines
    assert not re.search(r"\d\.\d{4,} s\b", said), said


def test_a_signal_s_wait_is_said_rounded() -> None:
    client = SignalClient(SignalAddress("nobody", "Listens", f"app{os.getpid()}"), "c", "p", connect_timeout=0.249903)
    with pytest.raises(SignalError, match=r"within 0\.\d\d? s: nobody listens"):
        client.evaluate({}, 0, timeout=0.249903)


def status(health: AutoscalerHealth | Unavailable) -> PoolStatus:
    nothing = Unavailable("not read")
    return PoolStatus(
        pool="c/p.kubernetes", taken_at=0.0, pause=nothing, groups=(), group_errors=(), mistagged=(),
        nodes=nothing, utilisation=nothing, kept=nothing, decisions=nothing, health=health,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("health", "asked", "code"),
    [
        (AutoscalerHealth(()), True, 0),
        (AutoscalerHealth((), ("app web on its fallback signal",)), True, 3),
        (AutoscalerHealth(("no run finished for 400 s",)), True, 4),
        (Unavailable("cannot reach the event API"), True, 5),
        (Unavailable("no event API to ask"), False, 5),  # --no-events, and nothing of the pool read
    ],
)
def test_the_exit_status_says_the_autoscaler_s_health(
    health: AutoscalerHealth | Unavailable, asked: bool, code: int
) -> None:
    assert exit_status(status(health), asked) == code

"""The first hour's papercuts, each as a person meets it.

``clusterman --version``; ``disable --until -10m`` said only "expected one argument";
``status --decisions -3`` was accepted; a bare ``make`` said ``'.venv/bin/uv' is up to date.``;
``make test`` held pytest's progress back until the end (``--output-sync=target``). ``manage``
with nobody to answer, ``events`` with no match, the stack from the wheel and the distribution
count are checked beside their commands (itests/test_operator_cli.py, itests/test_events_cli.py,
itests/test_wheel_install.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import clusterman
from tests.test_cli_no_tracebacks import POOL
from tests.test_cli_no_tracebacks import run
from tests.test_cli_no_tracebacks import world  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "clusterman", "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"clusterman {clusterman.__version__}\n")


def test_a_negative_duration_is_given_to_its_check(world: Path) -> None:  # noqa: F811
    status, _, err = run(["disable", *POOL, "--until", "-10m"], world)
    assert status == 1 and err == (
        "clusterman disable: --until '-10m': a pause ends in the future: give a duration such as 30m, or an ISO time\n"
    )


def test_a_negative_count_is_refused(world: Path) -> None:  # noqa: F811
    status, _, err = run(["status", *POOL, "--decisions", "-3"], world)
    assert status == 2 and "argument --decisions: expected a number of at least 0, got -3" in err


def test_a_bare_make_lists_the_targets_and_builds_nothing() -> None:
    done = subprocess.run(["make", "-s"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("make TARGET, one of:\n"), done.stdout
    for target in ("run", "test", "lint", "bench"):
        assert f"\n  {target} " in done.stdout, done.stdout


def test_make_test_runs_its_jobs_side_by_side_and_shows_their_lines_as_they_come() -> None:
    done = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, timeout=60)
    (sub,) = [line for line in done.stdout.splitlines() if "test-suite" in line]
    assert "--output-sync=line" in sub and "-j3" in sub, sub  # not =target: that held pytest's output to the end
    assert all(job in sub.split() for job in ("lint", "typecheck", "test-suite")), sub
    assert "make test" in (REPO / ".ci" / "run").read_text()  # the CI still runs it

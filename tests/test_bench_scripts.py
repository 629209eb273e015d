"""The programs the benchmarks run as baselines still run: a renamed import must not surface only in `make bench`."""

from __future__ import annotations

import subprocess
import sys

from bench.cli_startup import EAGER
from bench.cli_startup import ROOT


def test_the_eager_cli_baseline_still_builds_every_command():
    done = subprocess.run(
        [sys.executable, "-c", EAGER, "signal", "evaluate", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--metrics" in done.stdout

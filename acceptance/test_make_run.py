"""`make run` for a bounded time: the whole tree comes up from nothing and capacity follows demand.

The local stack replays a day of demand in four minutes (config/workloads/local-dev-day.yaml:
quiet at night, busy in the afternoon). Over 150 s the pool must scale up with the morning's rise,
keep utilisation near the setpoint, stay within its limits, and leave no process behind.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\d\d:\d\d:\d\d demand cpus=(?P<demand>[\d.]+).*\| target (?P<old>\d+) -> (?P<new>\d+) \|")


@pytest.mark.timeout(420)
def test_make_run_follows_the_demand_trace():
    done = subprocess.run(["make", "-s", "run", "DURATION=150"], cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    decisions = [LINE.match(line) for line in done.stdout.splitlines()]
    runs = [(float(m["demand"]), int(m["new"])) for m in decisions if m]
    assert len(runs) >= 20, done.stdout[-3000:]  # one every 5 s, after the tree came up

    demand = [d for d, _ in runs]
    target = [t for _, t in runs]
    assert all(1 <= t <= 40 for t in target)  # the pool's min and max
    assert max(target) >= 2 * min(target[5:])  # it really scaled
    # capacity follows demand: strongly correlated, and sized near the 70% setpoint (2-cpu nodes)
    assert statistics.correlation(demand, target) > 0.8
    late = runs[len(runs) // 2 :]
    utilisation = [d / (2 * t) for d, t in late]
    assert 0.45 < statistics.median(utilisation) < 0.95
    assert "stopped: no process of the stack is left" in done.stdout

    leftovers = subprocess.run(["pgrep", "-f", str(REPO / ".local-stack")], capture_output=True, text=True)
    assert leftovers.stdout == "", f"processes left behind: {leftovers.stdout}"

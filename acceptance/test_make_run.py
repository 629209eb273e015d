"""`make run` for a bounded time: the whole tree comes up from nothing and capacity follows demand.

The local stack replays a day of demand in four minutes (config/workloads/local-dev-day.yaml:
quiet at night, busy in the afternoon). Over 150 s the pool must scale up with the morning's rise,
keep utilisation near the setpoint, stay within its limits, and leave no process behind. While it
runs, the operator commands it prints (through its env.sh) reach it, and a Spot interruption
warning sent with ``clusterman interrupt`` is handled: the node tainted, drained and replaced.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ demand cpus=(?P<demand>[\d.]+).*\| target (?P<old>\d+) -> (?P<new>\d+) \|"
)


ENV_FILE = re.compile(r"^  \. (?P<path>\S+/env\.sh)$")


@pytest.mark.timeout(420)
def test_make_run_follows_the_demand_trace():
    proc = subprocess.Popen(
        ["make", "-s", "run", "DURATION=150"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    deciding = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if sum(1 for seen in lines if LINE.match(seen)) >= 3:
                deciding.set()

    reader = threading.Thread(target=read)
    reader.start()
    status = None
    if deciding.wait(timeout=200):
        (env_file,) = [m["path"] for m in map(ENV_FILE.match, lines) if m]
        command = f". {env_file} && {REPO}/.venv/bin/clusterman status"
        status = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=120)
        # a signal author's publish through env.sh lands where this stack fetches versions from
        publish = f". {env_file} && {REPO}/.venv/bin/clusterman signal publish --worktree --version v0.1"
        published = subprocess.run(["bash", "-c", publish], cwd=REPO, capture_output=True, text=True, timeout=120)
        # a Spot interruption warning, as the stack prints how to send one
        warn = f". {env_file} && {REPO}/.venv/bin/clusterman interrupt"
        warned = subprocess.run(["bash", "-c", warn], cwd=REPO, capture_output=True, text=True, timeout=120)
    proc.wait(timeout=400)
    reader.join()
    stdout = "\n".join(lines)
    assert proc.returncode == 0, stdout[-3000:]
    assert status is not None, stdout[-3000:]
    assert status.returncode == 0, status.stdout + status.stderr
    assert "local-dev/default.simulated: enabled" in status.stdout
    assert "asg local-dev-default-asg: target" in status.stdout and "utilisation (last decision)" in status.stdout
    assert published.returncode == 0, published.stderr  # (env.sh did not say the codename: it went to bookworm/)
    assert published.stdout.startswith("published s3://clusterman-signals/local/clusterman_signals_v0.1.tar.gz ")
    assert warned.returncode == 0 and "Spot interruption warning put on the bus for" in warned.stdout, warned.stderr
    # the node is tainted, its pods evicted and its replacement asked in one run, then it goes
    handled = [line for line in lines if "spot_interruption: noticed, tainted, evicted" in line]
    assert handled and "replacing 1 (spot_interruption:" in handled[0], stdout[-3000:]
    assert any("spot_interruption: terminated" in line for line in lines), stdout[-3000:]
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, "")
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

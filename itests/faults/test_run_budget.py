"""A run's wall-clock budget, with a real autoscaler process and real signal runners.

A ``SIGSTOP``ped signal runner used to hold a run for the client's minute (twice, with the
reconnect) and the run then acted on the snapshot it took before the wait. Then each wait was
bounded by the budget: every run overran and held, so one stopped app signal stopped the
autoscaling of the whole pool until the runner was restarted by hand. Now the run's signals share
half the budget (a quarter of it kept for the default signal): the stopped app falls back to the
default signal, each run decides and acts within its budget, and the heartbeat file goes on
being written after every run. (The overrun guard itself: ``test_run_cloud_stopped.py``.)
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from itests.aws_world import REGION
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import start_runner
from itests.faults.autoscaler_procs import steady_signal
from itests.faults.autoscaler_procs import write_config

# The budget (the period's) is what the stopped runner must not overrun, so it is the subject; but a
# run's own work needs room beside the app's share (3/8 of it). Loaded (two cores, load 5-6), the runs
# with the runner stopped took 1.5-2.8 s of a 3 s budget; at 4 s the same work has a third more room,
# and a wait as long as the budget (the bug this guards) overruns whatever the budget.
PERIOD = 4.0


def test_a_stopped_app_runner_costs_its_app_the_fallback_not_the_run(tmp_path, moto_server):
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=1)
    namespace, app = f"ns{uuid.uuid4().hex[:10]}", f"app{uuid.uuid4().hex[:10]}"  # sockets no one else uses
    signals = steady_signal(tmp_path, namespace)
    main = (
        f"aws: {{region: {REGION}, endpoint_url: '{moto_server.url}'}}\n"
        f"autoscale_signal: {{name: Steady, namespace: {namespace}, branch_or_tag: v1, period_minutes: 1}}\n"
    )
    pool_signal = (
        f"app_signals: {{{app}: {{name: Steady, namespace: {namespace}, branch_or_tag: v1, period_minutes: 1}}}}\n"
    )
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=1, extra_main=main, pool_signal=pool_signal)
    fallback = f"signal {namespace}.Steady (app {app}): timed out"
    heartbeat = tmp_path / "run" / "heartbeat.json"
    runners = [start_runner(signals, namespace, name) for name in ("__default__", app)]
    autoscaler = Autoscaler(
        config,
        world.cluster,
        "--period-seconds",
        str(PERIOD),
        "--no-splay",
        env={"CMAN_HEARTBEAT_FILE": str(heartbeat)},
    )
    try:
        at, _ = autoscaler.wait_for(acted, timeout=60)
        printed = time.time() - (time.monotonic() - at)
        beat = next_beat(heartbeat, after=printed)  # written when that run ends (its overrun counted before)
        assert beat["period_seconds"] == PERIOD and abs(beat["finished_at"] - time.time()) < 30
        # counted from here: a new process's first runs (imports, cold clients) may overrun on a
        # loaded machine before anything is stopped (seen: 3.0 s > 3 s)
        overruns_before = overruns(autoscaler)

        stopped = time.monotonic()
        runners[1].send_signal(signal.SIGSTOP)
        autoscaler.wait_for(lambda line: True, timeout=3 * PERIOD, after=stopped + PERIOD)  # a run begun after it
        time.sleep(3 * PERIOD)
        during = [line for when, line in autoscaler.out if when > stopped + PERIOD]
        assert len(during) >= 3, during  # every run decides, within its budget
        assert all("| target" in line and "overrun" not in line for line in during), during
        assert autoscaler.stderr().count(fallback) >= 3
        assert world.desired(asg) == 1
        next_beat(heartbeat, after=beat["finished_at"])

        resumed = time.monotonic()
        runners[1].send_signal(signal.SIGCONT)
        autoscaler.wait_for(lambda line: True, timeout=3 * PERIOD, after=resumed + PERIOD)
        settled = time.monotonic()
        autoscaler.wait_for(lambda line: True, timeout=3 * PERIOD, after=settled)
        assert not [line for when, line in autoscaler.err if when > settled and fallback in line]  # answers again
        print(f"{len(during)} runs decided while the app's runner was stopped; its own signal answers again")
        assert overruns(autoscaler) == overruns_before, metrics_text(autoscaler)
    finally:
        autoscaler.stop()
        for proc in runners:
            proc.kill()
            proc.wait()


def next_beat(path: Path, after: float, timeout: float = 10.0) -> dict[str, Any]:
    """The heartbeat once it records a run finished later than ``after`` (Unix seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        beat: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        if beat.get("finished_at", 0.0) > after:
            return beat
        assert time.monotonic() < deadline, f"no heartbeat after {after} in {path}: {beat}"
        time.sleep(0.05)


def overruns(autoscaler: Autoscaler) -> float:
    """The autoscaler's count of runs that overran their budget, as /metrics says it (no sample
    before the first)."""
    text = metrics_text(autoscaler)
    assert "# TYPE clusterman_run_overruns_total counter" in text, text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("clusterman_run_overruns_total")
    )


def metrics_text(autoscaler: Autoscaler) -> str:
    """The autoscaler's /metrics, at the port its start-up line names."""
    import re
    import urllib.request

    match = re.search(r"http://([\d.]+):(\d+)", autoscaler.stderr())
    assert match, autoscaler.stderr()
    with urllib.request.urlopen(f"http://{match[1]}:{match[2]}/metrics", timeout=10) as response:
        return response.read().decode()

"""A run's wall-clock budget, with a real autoscaler process and real signal runners.

A ``SIGSTOP``ped signal runner used to hold a run for the client's minute (twice, with the
reconnect) and the run then acted on the snapshot it took before the wait. Now each wait on a
runner is bounded by the budget, a run whose snapshot is older than the budget when it would act
holds instead, the overrun is a line, an event and a metric, and the heartbeat file goes on being
written after every run.
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

PERIOD = 3.0


def test_a_stopped_runner_never_makes_a_run_act_on_an_old_snapshot(tmp_path, moto_server):
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
        autoscaler.wait_for(acted, timeout=60)
        beat = next_beat(heartbeat, after=0.0)  # written when the run ends, just after its decision line
        assert beat["period_seconds"] == PERIOD and abs(beat["finished_at"] - time.time()) < 30

        stopped = time.monotonic()
        runners[1].send_signal(signal.SIGSTOP)
        at, line = autoscaler.wait_for(lambda line: "(overrun:" in line, timeout=40, after=stopped)
        assert "old > budget 3 s: nothing changed" in line, line
        _, line = autoscaler.wait_for(lambda line: line.startswith("overrun:") or " overrun: the run took" in line,
                                      timeout=20, after=stopped)  # fmt: skip
        assert world.desired(asg) == 1
        next_beat(heartbeat, after=beat["finished_at"])

        resumed = time.monotonic()
        runners[1].send_signal(signal.SIGCONT)
        at, _ = autoscaler.wait_for(acted, timeout=40, after=resumed + 0.5)
        print(f"held {at - stopped:.1f} s after SIGSTOP; acting again {at - resumed:.1f} s after SIGCONT")
        assert "run_overruns_total" in metrics_text(autoscaler)
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


def metrics_text(autoscaler: Autoscaler) -> str:
    """The autoscaler's /metrics, at the port its start-up line names."""
    import re
    import urllib.request

    match = re.search(r"http://([\d.]+):(\d+)", autoscaler.stderr())
    assert match, autoscaler.stderr()
    with urllib.request.urlopen(f"http://{match[1]}:{match[2]}/metrics", timeout=10) as response:
        return response.read().decode()

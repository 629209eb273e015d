"""A cloud endpoint that stops answering (moto's server ``SIGSTOP``ped) under a real autoscaler.

Every AWS call, all its attempts together, is bounded by the run's budget (botocore bounds only
each attempt, 60 s by default, and retries five times with backoff: the run took 6.7 s on a budget
of 1 s, enough for a short period's heartbeat watch to restart the autoscaler first), so the run
ends within about the budget and says so: the overrun is a line, and the pool's target, unknown while no group can be
read, is printed as unknown rather than ``0 -> 0``. After ``SIGCONT`` the next run acts again.
"""

from __future__ import annotations

import re
import signal
import time

from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import write_config

PERIOD = 2.0


def test_a_stopped_cloud_endpoint_ends_the_run_within_its_attempts_and_says_what_is_unknown(tmp_path, moto_server):
    server = moto_server  # this worker's server: stopped for this test only, always continued
    world = World(server.url)
    world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, server.url, tasks=1)
    autoscaler = Autoscaler(
        config, world.cluster, "--period-seconds", str(PERIOD), "--budget-seconds", "1", "--no-splay"
    )
    try:
        autoscaler.wait_for(acted, timeout=60)
        stopped = time.monotonic()
        server._proc.send_signal(signal.SIGSTOP)
        # the budget bounds each call, retries included: no further attempt is sent past it
        at, line = autoscaler.wait_for(lambda line: " overrun: the run took" in line, timeout=60, after=stopped)
        assert "it held: nothing changed" in line, autoscaler.lines()
        took = float(re.search(r"the run took ([0-9.]+) s", line).group(1))  # type: ignore[union-attr]
        assert took < 3.0, f"a call ran past the budget (1 s) by more than one attempt: {line}"
        _, held = autoscaler.wait_for(lambda line: "(overrun: the snapshot is" in line, timeout=1, after=stopped)
        assert "target unknown (1 resource group(s) could not be read)" in held, autoscaler.lines()
        print(f"run ended {at - stopped:.1f} s after SIGSTOP: {line}")
        resumed = time.monotonic()
        server._proc.send_signal(signal.SIGCONT)
        at, _ = autoscaler.wait_for(acted, timeout=90, after=resumed)
        print(f"acting again {at - resumed:.1f} s after SIGCONT")
    finally:
        server._proc.send_signal(signal.SIGCONT)
        autoscaler.stop()

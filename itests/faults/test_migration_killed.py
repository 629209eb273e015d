"""A node migration whose autoscaler is killed (SIGKILL) mid-step: restarted, or the pool's lease
taken by a standby. Real autoscaler processes, their Auto Scaling group in moto's server, the
stateful fake API server, the cluster played around them (``itests/faults/migrations.py``).

The migration's record (its step, the step's nodes, the nodes done) is kept in the state store
before each run acts, and read at every run: the next process goes on with the same step, in its
first run, and no node is replaced twice; the resource ends with every old node counted once.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from itests.faults.autoscaler_procs import acted
from itests.faults.migrations import PERIOD
from itests.faults.migrations import autoscaler
from itests.faults.migrations import cluster
from itests.faults.migrations import configure
from itests.faults.migrations import label
from itests.faults.migrations import migrate
from itests.faults.migrations import old_pool
from itests.faults.migrations import record
from itests.faults.migrations import status
from itests.faults.migrations import wait_until


@pytest.mark.parametrize("how", ["restarted", "standby"])
def test_a_migration_goes_on_from_its_step_after_its_autoscaler_is_killed(tmp_path, moto_server, how):
    with old_pool(tmp_path, moto_server) as (world, asg, old, pool), cluster(pool, asg) as around:
        config = configure(pool)
        name = migrate(pool, config, "kernel", "ge", "5.15")
        first = autoscaler(config, world)
        standby = autoscaler(config, world) if how == "standby" else None
        second = standby
        try:
            in_step_2 = lambda: status(pool, name).get("step", "").startswith("step 2")  # noqa: E731
            wait_until(in_step_2, 120, "in step 2", first)
            kept = record(pool).active
            assert kept is not None and kept.step == 2 and kept.done == 2, kept
            first.signal(signal.SIGKILL)
            killed = time.monotonic()
            second = second or autoscaler(config, world)
            started = second.started if how == "restarted" else killed

            def going_on(line: str) -> bool:
                return acted(line) and f"| migration {name}: " in line

            at, line = second.wait_for(going_on, timeout=60, after=killed)
            step = int(re.search(rf"migration {name}: (?:step (\d+)|completed)", line)[1] or 0)
            assert step >= 2 and "step 1" not in line, line  # the same step (or a later one), not anew
            first_run, _ = second.wait_for(acted, timeout=5, after=killed)
            assert first_run == at, second.lines()  # in its first run that acted
            print(f"{how}: its first run went on with step {step}, {at - started:.1f} s after (period {PERIOD} s)")
            wait_until(lambda: label(pool, name) == "completed", 120, "completed", second)
        finally:
            first.stop()
            if second is not None:
                second.stop()
        final = status(pool, name)
    assert (final["state"], final["nodesDone"], final["nodesLeft"], final["failedDrains"]) == ("completed", 6, 0, 0)
    assert sorted(around.terminated) == sorted(old), around.terminated  # each old node once, no new one
    assert world.desired(asg) == 6

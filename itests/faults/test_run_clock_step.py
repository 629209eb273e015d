"""The wall clock stepped under a real autoscaler (NTP correcting a drifted VM, an operator setting
the time): runs go on once a period, and neither direction counts as a hang or an overrun.

The step is made in the autoscaler's process alone (``itests/faketime.py``).

Before the loop waited on the monotonic clock, a step back of an hour left the autoscaler waiting
for the hour to come round again: no run, a lease kept renewed (so no standby took over), and a
heartbeat whose last run looked an hour in the future to anyone judging it. And a simulated pool
(``scheduler: simulated``, as here and in the local stack) failed every run with "time went
backwards": in a live process its time now goes on from where it was.
"""

from __future__ import annotations

import re
import time

import pytest

from clusterman.core.timestamps import parse_time
from itests.aws_world import World
from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import write_config

PERIOD = 2.0
STEP = 3600


def stamp(line: str) -> float:
    """The run's time, from the front of its line."""
    return parse_time(line.split(" ", 1)[0])


@pytest.mark.parametrize("step", [-STEP, STEP], ids=["back", "forward"])
def test_a_stepped_wall_clock_keeps_runs_coming_once_a_period(tmp_path, moto_server, step):
    world = World(moto_server.url)
    world.asg("web", desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=1)
    offset = tmp_path / "faketime-offset"
    autoscaler = Autoscaler(
        config, world.cluster, "--period-seconds", str(PERIOD), "--no-splay", env=faked_clock(offset)
    )
    try:
        _, before = autoscaler.wait_for(acted, timeout=60)
        time.sleep(PERIOD / 2)  # into the wait for the next run: the wait must not last the step
        step_clock(offset, step)
        stepped = time.monotonic()
        at, line = autoscaler.wait_for(lambda line: acted(line) and abs(stamp(line) - stamp(before) - step) < 60,
                                       timeout=3 * PERIOD + 5, after=stepped)  # fmt: skip
        print(f"first run {at - stepped:.1f} s after a step of {step:+d} s: {line}")
        # and the ones after it, one a period, none of them an overrun
        at2, _ = autoscaler.wait_for(acted, timeout=2 * PERIOD + 5, after=at + 0.1)
        assert at2 - at < 2 * PERIOD + 1
        # a loaded machine may overrun a 2 s period by a second or two; the step, measured as a
        # run's time or an input's age, would be an overrun of about an hour
        lines = autoscaler.lines()
        overruns = [
            float(s) for line in lines if "overrun" in line for s in re.findall(r"(?:took|is) ([\d.]+) s", line)
        ]
        assert all(seconds < 60 for seconds in overruns), lines
    finally:
        autoscaler.stop()

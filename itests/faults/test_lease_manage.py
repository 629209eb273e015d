"""``clusterman manage`` beside a running autoscaler: the change is made under the pool's lease.

A real autoscaler process holds the pool's lease (SQLite state store) and scales an ASG in moto's
server. ``manage --wait 0`` is refused at once, naming the holder; ``manage --pause 1m`` asks the
autoscaler to hand the lease over after its run, sets the target, pauses the autoscaler and gives
the lease back: the autoscaler's later runs keep the operator's target (before this change the
next run overwrote it, and the two could interleave).
"""

from __future__ import annotations

import os
import subprocess
import time

from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import cli_command
from itests.faults.autoscaler_procs import write_config

PERIOD, TTL = 3.0, 2.0


def manage(config: str, cluster: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = cli_command(config, cluster, "manage", "--yes", *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **FAKE_CREDENTIALS})


def test_manage_takes_the_lease_from_a_running_autoscaler_and_pauses_it(tmp_path, moto_server):
    world = World(moto_server.url)
    asg = world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=10)
    args = ("--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay")
    autoscaler = Autoscaler(config, world.cluster, *args)
    try:
        autoscaler.wait_for(acted, timeout=60)
        scaled = world.desired(asg)
        assert scaled > 3, autoscaler.lines()

        refused = manage(config, world.cluster, "--target-capacity", "3", "--wait", "0")
        assert refused.returncode == 1, refused
        assert "nothing changed: the pool's lease is held by pid" in refused.stderr, refused.stderr
        assert f"pid {autoscaler.proc.pid} on " in refused.stderr and " until 20" in refused.stderr
        assert world.desired(asg) == scaled

        asked = time.monotonic()
        done = manage(config, world.cluster, "--target-capacity", "3", "--pause", "1m", "--wait", "30s")
        done_at = time.monotonic()
        took = done_at - asked
        assert done.returncode == 0, done
        assert "took the pool's lease after" in done.stdout, done.stdout
        assert "the autoscaler is paused until" in done.stdout, done.stdout
        assert world.desired(asg) == 3
        print(f"manage beside a running autoscaler: lease handed over and target set in {took:.2f} s")

        # the autoscaler takes the lease back and keeps the operator's target while paused
        after = time.monotonic()
        for _ in range(2):
            at, _ = autoscaler.wait_for(lambda line: "paused" in line, timeout=60, after=after)
            after = at + 1e-6
        # a run that started before manage asked finishes (it holds the lease); none acts after the change
        assert not any(acted(line) for t, line in autoscaler.out if t > done_at), autoscaler.lines()
        assert world.desired(asg) == 3
        assert "handing the pool's lease over between runs" in autoscaler.stderr(), autoscaler.stderr()[-2000:]
    finally:
        autoscaler.stop()

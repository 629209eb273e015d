"""The state directory's disk fills up under a real autoscaler, then is freed.

The autoscaler runs in a mount namespace of its own (``unshare -m``, as root) with its state
directory on a 4 MB tmpfs, which the test fills from inside that namespace (``nsenter``). Its
SQLite state store (the pool's lease, pauses, the state kept between runs) can no longer be
written: the lease cannot be renewed, so the autoscaler stops acting within a run and says why on
every run; the pool is left as it is. Once the disk is freed it takes the lease back and acts again,
without a restart.
"""

from __future__ import annotations

import subprocess
import time

from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import write_config

PERIOD, TTL = 4.0, 3.0


def inside(pid: int, *command: str) -> None:
    """Run ``command`` in the mount namespace of process ``pid``."""
    subprocess.run(["nsenter", "-t", str(pid), "-m", *command], check=False, capture_output=True, timeout=30)


def test_a_full_state_disk_stops_the_autoscaler_acting_and_freeing_it_brings_it_back(tmp_path, moto_server):
    world = World(moto_server.url)
    group = world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=10)  # wants 8 of 2 cpus
    state = tmp_path / "state"
    state.mkdir()
    mount = 'mount -t tmpfs -o size=4m tmpfs "$0" && exec "$@"'
    autoscaler = Autoscaler(
        config,
        world.cluster,
        "--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay",
        prefix=("unshare", "-m", "sh", "-c", mount, str(state)),
    )  # fmt: skip
    try:
        autoscaler.wait_for(acted, timeout=60)
        assert not any(state.iterdir()), "the state store is written on the tmpfs, not the test's directory"
        full = time.monotonic()
        inside(autoscaler.proc.pid, "dd", "if=/dev/zero", f"of={state}/fill", "bs=64k")
        # within the lease's TTL and a run, it stops acting, and every run says why
        at, line = autoscaler.wait_for(lambda line: "standby" in line, timeout=3 * PERIOD + TTL, after=full)
        assert "the pool's lease cannot be read or written: state store" in line, line
        assert "disk is full" in line or "disk I/O error" in line, line
        desired = world.desired(group)
        time.sleep(3 * PERIOD)
        during = [line for when, line in autoscaler.out if when > at]
        assert during and not any(acted(line) for line in during), during
        assert all("standby" in line for line in during if "| target" in line), during
        assert world.desired(group) == desired  # the pool left as it is
        assert autoscaler.proc.poll() is None, autoscaler.stderr()[-3000:]

        freed = time.monotonic()
        inside(autoscaler.proc.pid, "rm", f"{state}/fill")
        back, _ = autoscaler.wait_for(acted, timeout=3 * PERIOD + TTL, after=freed)
        print(f"standby {at - full:.1f} s after the disk filled, acting {back - freed:.1f} s after it was freed")
    finally:
        autoscaler.stop()

"""The SQLite state store damaged under a real autoscaler: one item, then the whole file.

A lease item whose payload is not JSON used to raise a bare JSONDecodeError out of every lease
claim: each run ended in a traceback and no autoscaler could ever act on the pool again. Now a
damaged lease is no valid lease (as one without an expiry always was) and the next claim writes
over it. A file that is not a database cannot be repaired safely (a pause set by an operator would
go with it), so the autoscaler stands by, leaving the pool as it is, and says what to do; once the
file is moved aside it acts again, without a restart.
"""

from __future__ import annotations

import sqlite3
import time

from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import write_config

PERIOD, TTL = 3.0, 2.0


def test_a_damaged_lease_is_written_over_and_a_damaged_file_stands_the_autoscaler_by(tmp_path, moto_server):
    world = World(moto_server.url)
    group = world.asg(POOL, desired=1)
    config = write_config(tmp_path, world.cluster, moto_server.url, tasks=10)  # wants 8 of 2 cpus
    autoscaler = Autoscaler(
        config, world.cluster, "--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay"
    )
    state = tmp_path / "state" / "state.sqlite"
    try:
        autoscaler.wait_for(acted, timeout=60)

        with sqlite3.connect(state) as conn:
            assert conn.execute("UPDATE state SET payload = '{not json' WHERE state = 'autoscaler_lease'").rowcount
        damaged = time.monotonic()
        time.sleep(2 * PERIOD)
        runs = [line for when, line in autoscaler.out if when > damaged and "| target" in line]
        assert runs and all(acted(line) for line in runs), runs  # the renewal wrote over it: no run lost
        assert "Traceback" not in autoscaler.stderr()
        with sqlite3.connect(state) as conn:
            (payload,) = conn.execute("SELECT payload FROM state WHERE state = 'autoscaler_lease'").fetchone()
        assert '"holder"' in payload

        state.write_bytes(b"not a database" * 1000)
        broken = time.monotonic()
        at, line = autoscaler.wait_for(lambda line: "standby" in line, timeout=2 * PERIOD + TTL, after=broken)
        assert "the pool's lease cannot be read or written: state store" in line, line
        assert "file is not a database (the file is damaged: move it aside to start afresh" in line, line
        desired = world.desired(group)
        time.sleep(2 * PERIOD)
        assert world.desired(group) == desired
        assert autoscaler.proc.poll() is None

        state.rename(state.with_name("state.sqlite.damaged"))
        moved = time.monotonic()
        back, _ = autoscaler.wait_for(acted, timeout=2 * PERIOD + TTL, after=moved)
        print(f"standby {at - broken:.1f} s after the file was damaged, acting {back - moved:.1f} s after it moved")
    finally:
        autoscaler.stop()

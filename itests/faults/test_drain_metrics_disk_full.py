"""The metrics directory's disk fills up while a node is being removed, then is freed.

The autoscaler writes the pool's metrics each run (``--collect-metrics``: a pool with no separate
collector) to an SQLite file of its own directory, on a 4 MB tmpfs in a mount namespace of its own
(``unshare -m``, as in ``test_drain_disk_full.py`` for the state directory). The event history has
no directory: it is a ring in memory. Real autoscaler, the stateful fake API server, an Auto Scaling
group in moto's server. The disk fills while the node's evictions go unanswered: the signals would
read older data, so scale-down is held and the run says why; the drain goes on (the node is
tainted, the target already lowered) but the emptied node is not terminated while the disk is
full. Freed, the metrics are written again, those written before are all there, and the node goes.
"""

from __future__ import annotations

import subprocess
import sys
import time

from itests.faults import drains
from itests.faults.test_run_disk_full import inside

TIMES = """
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(DISTINCT timestamp) FROM points").fetchone()[0])
"""


def test_a_full_metrics_disk_mid_drain_holds_the_termination_and_loses_no_point(tmp_path, moto_server):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, _, pods = drains.to_remove(pool, members)
        drains.metrics_in(config, metrics)
        pool.kube.hang("evictions")
        private = drains.on_tmpfs(metrics)
        with drains.running(config, world.cluster, prefix=private, args=("--collect-metrics",)) as autoscaler:

            def written() -> int:
                command = ["nsenter", "-t", str(autoscaler.proc.pid), "-m", sys.executable, "-c", TIMES]
                out = subprocess.run([*command, str(metrics / "metrics.sqlite3")], capture_output=True, text=True)
                return int(out.stdout.strip() or -1)

            drains.wait_for_unanswered(pool, autoscaler)
            deadline = time.monotonic() + 30  # a run that overran stopped before lowering it: a later one does
            while world.desired(asg) != 3:
                assert time.monotonic() < deadline, autoscaler.lines()
                time.sleep(0.2)
            before = written()
            full = time.monotonic()
            inside(autoscaler.proc.pid, "dd", "if=/dev/zero", f"of={metrics}/fill", "bs=64k")
            held, _ = autoscaler.wait_for(lambda line: "metrics could not be written" in line, timeout=20, after=full)
            pool.kube.answer_again()  # the drain can go on now
            deadline = time.monotonic() + 20  # a loaded machine's runs take longer than their period
            while [p for p in pods if pool.kube.pod("default", p)] and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2 * drains.PERIOD)  # runs that could terminate the emptied node, were it not held
            there, instance = [p for p in pods if pool.kube.pod("default", p)], world.ec2_state(members[2])
            freed = time.monotonic()
            inside(autoscaler.proc.pid, "rm", f"{metrics}/fill")
            done, _ = autoscaler.wait_for(lambda line: "terminate 1" in line, timeout=30, after=freed)
            after = written()
            stderr = autoscaler.stderr()
            print(f"held {held - full:.1f} s after the disk filled; terminated {done - freed:.1f} s after freed")
        assert metrics.exists() and not any(metrics.iterdir()), "the metrics are written on the tmpfs"
    assert there == [] and instance == "running", autoscaler.lines()  # drained, not terminated while full
    assert "cannot write the pool's metrics" in stderr and "full" in stderr, stderr[-3000:]
    assert before > 0 and after > before, (before, after)  # what was written stays; writing resumed
    assert world.ec2_state(members[2]) == "terminated" and world.desired(asg) == 3

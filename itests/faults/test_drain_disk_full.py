"""The state directory's disk fills up while a consolidation drain is in progress, then is freed.

The autoscaler runs in a mount namespace of its own with its state directory on a 4 MB tmpfs
(``unshare -m``, as in ``test_run_disk_full.py``), over the stateful fake API server and real Auto
Scaling groups in moto's server. A node is being drained to be kept (the API server does not answer
its evictions yet) when the disk fills: the lease cannot be renewed, so the autoscaler stands by and
the node stays tainted with its pods. Once the disk is freed it takes the lease back, reads what it
kept (the node and the budget it spent, kept before it acted) and finishes the drain.
"""

from __future__ import annotations

import subprocess
import sys
import time

from itests.faults import drains
from itests.faults.test_run_disk_full import inside
from itests.pool_harness import POOL

READ_KEPT = """
import sys
from clusterman.config.loader import load_main_config
from clusterman.wiring.state_store import open_state_store
main = load_main_config(sys.argv[1])
store = open_state_store(main)
print(sum(e[-1] for e in store.get("autoscaler_state", sys.argv[2]).payload["disruption"]["evictions"]))
"""


def test_a_full_state_disk_mid_drain_keeps_the_node_tainted_and_the_drain_ends_once_freed(tmp_path, moto_server):
    state = tmp_path / "state"
    state.mkdir()
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        pool.kube.hang("evictions")
        with drains.running(config, world.cluster, prefix=drains.on_tmpfs(state)) as autoscaler:
            drains.wait_for_unanswered(pool, autoscaler)
            full = time.monotonic()
            inside(autoscaler.proc.pid, "dd", "if=/dev/zero", f"of={state}/fill", "bs=64k")
            standby, _ = autoscaler.wait_for(lambda line: "standby" in line, timeout=6 * drains.PERIOD, after=full)
            pool.kube.answer_again()  # evictions would go through now: none is asked for
            time.sleep(2 * drains.PERIOD)
            tainted, there = pool.tainted(), [p for p in pods if pool.kube.pod("default", p)]

            freed = time.monotonic()
            inside(autoscaler.proc.pid, "rm", f"{state}/fill")
            done, _ = autoscaler.wait_for(lambda line: "untaint 1" in line, timeout=10 * drains.PERIOD, after=freed)
            print(f"standby {standby - full:.1f} s after the disk filled, untainted {done - freed:.1f} s after freed")
            identity = f"{world.cluster}.{POOL}.kubernetes"
            spent = subprocess.run(
                ["nsenter", "-t", str(autoscaler.proc.pid), "-m", sys.executable, "-c", READ_KEPT, config, identity],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        assert tainted == [nodes[3]] and there == pods, autoscaler.lines()  # nothing lost while full
        assert not any(pool.kube.pod("default", p) for p in pods)  # the drain finished once freed
        assert drains.untainted(pool, nodes[3])
        assert spent.stdout.strip() == "2", spent  # the budget it spent before the disk filled
    assert all(world.ec2_state(m) == "running" for m in members) and world.desired(asg) == 4

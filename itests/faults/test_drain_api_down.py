"""The Kubernetes API server stops in the middle of a consolidation drain, then starts again.

The neighbour of a silent server (``test_drain_api_silent.py``): the stateful fake API server
(``itests/stateful_api.py``) carries out the first of the node's two evictions and stops: its
port refuses connections and the open ones (the watches) are reset. It comes back on the same
port having lost what it kept in memory (the watches' history: they must list again). The real
autoscaler and its Auto Scaling group in moto's server: each run ends within its budget and says
why, the node is never terminated while its pod is on it, and the drain ends once the server is
back.
"""

from __future__ import annotations

import time

from itests.faults import drains
from itests.faults.test_drain_api_silent import overran

DOWN = 6.0  # three periods
# Once back, the watches are answered 410 Gone and list again after the reflector's backoff, grown
# by the outage's refused retries, or at the next run, which ends a wait that has lasted 0.8 s. Until
# then the cache shows the pod on its node and no run terminates it: 4.7 s at load 11 (10-18 s
# before a run ended the wait); the limit leaves room for a loaded machine.
RELIST = 60.0


def test_a_server_stopped_after_an_eviction_holds_the_removal_until_it_is_back(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, _, pods = drains.to_remove(pool, members)
        pool.kube.evicted_then_down = True
        with drains.running(config, world.cluster) as autoscaler:
            assert pool.kube.down.wait(30), autoscaler.lines()
            down = time.monotonic()
            time.sleep(DOWN)
            during = [line for at, line in autoscaler.out if at > down]
            there, instance = pool.kube.pod("default", pods[1]) is not None, world.ec2_state(members[2])
            back = time.monotonic()
            pool.kube.come_back()
            done, _ = autoscaler.wait_for(lambda line: "terminate 1" in line, timeout=RELIST, after=back)
            stderr = autoscaler.stderr()
            print(f"down {DOWN:g} s: {len(during)} lines; terminated {done - back:.1f} s after it was back")
        assert drains.evictions(pool) == pods  # the second once the server was back
    assert there and instance == "running", during  # never terminated with its pod on it
    runs = [line for line in during if "| target" in line]
    assert len(runs) >= 2 and not overran(during), "\n".join(during)
    assert "Connection refused" in stderr, stderr[-3000:]
    assert world.ec2_state(members[2]) == "terminated" and world.desired(asg) == 3

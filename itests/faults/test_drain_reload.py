"""The configuration changes in the middle of a consolidation drain.

A changed pool file is applied by restarting the autoscaler: the bootstrap sees the change,
stops the running tree (supervisord sends the autoscaler SIGTERM: it stops after its run) and
starts one with the new file (docs/deployment.md, "Watch and reload"). Here that is done by hand
on real autoscaler processes, over the stateful fake API server and an Auto Scaling group in
moto's server: the first process drains a node to keep it, evicts the first of its two pods and is
stopped; the second starts with consolidation turned off, its eviction budget lowered below what
was spent, or the pool's maximum lowered below its size. The tainted node is never forgotten: a
drain that consolidation may no longer make is given up (the node untainted at once, its other pod
left in place); under a lower maximum the drain goes on within the budget and the node is kept (a
pool above its maximum moves only when the rule asks for a change: Clusterman's rule,
docs/scaling.md "Limits").
"""

from __future__ import annotations

import signal

import pytest

from itests.faults import drains
from itests.faults.autoscaler_procs import acted

CHANGES = {
    "consolidation off": {"consolidation": {"enabled": False}},
    "budget lowered": {"consolidation": {"evictions_per_hour": 1}},  # 2 were spent
    "max lowered": {"max_capacity": 3},  # a pool of four
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_reload_mid_drain_gives_the_node_up_or_removes_it_by_the_new_rules(tmp_path, moto_server, change):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        pool.kube.evicted_then_hang = True  # the first eviction is carried out, then nothing answered
        with drains.running(config, world.cluster) as first:
            drains.wait_for_unanswered(pool, first)
            first.signal(signal.SIGTERM)  # as supervisord stops the old tree
            assert first.proc.wait(timeout=20) == 0, first.stderr()[-3000:]
        pool.kube.answer_again()
        assert drains.evictions(pool) == [pods[0]] and pool.tainted() == [nodes[3]]
        drains.configure(pool, reserve=3, **CHANGES[change])
        with drains.running(config, world.cluster) as second:
            at, line = second.wait_for(lambda line: acted(line) and "untaint 1" in line, timeout=30)
            print(f"{change}: untainted {at - second.started:.1f} s after the restart")
        kept = drains.kept(pool)
    assert kept.keeping == (), kept  # nothing left remembered as being kept
    # the other pod asked to leave once, or left in place when the drain is given up
    assert drains.evictions(pool) == (pods if change == "max lowered" else [pods[0]]), line
    assert pool.tainted() == [] and drains.untainted(pool, nodes[3])
    assert all(world.ec2_state(m) == "running" for m in members) and world.desired(asg) == 4

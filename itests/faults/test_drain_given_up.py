"""Issue 40, defect 2: a node chosen for removal whose pods a disruption budget protects for good.

Four 8-CPU nodes; consolidation chooses the third, and both its pods are covered by a budget that
refuses every eviction. The autoscaler's wall clock is moved on (+31, +61, +121 minutes, as the
audit did). Before: the node stayed tainted for good, 254 evictions were asked, and the line said
only ``none | target 3 -> 3``. Now the drain is given up past ``draining_time_threshold_seconds``
(1800 s): the node is untainted and back in the pool, the line and an event say which node and why,
a counter counts it, it is not chosen again while it rests, and the evictions asked of it stay few.
Real autoscaler, the stateful fake API server, an Auto Scaling group in moto's server.
"""

from __future__ import annotations

import time

from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.faults import drains
from itests.faults.autoscaler_procs import acted


def test_a_drain_a_budget_refuses_for_good_is_given_up(tmp_path, moto_server):
    offset = tmp_path / "clock-offset"
    with drains.four_nodes(tmp_path, moto_server) as (world, _, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        pool.kube.budget_refuses.update(f"default/{pod}" for pod in pods)
        with drains.running(config, world.cluster, env=faked_clock(offset)) as autoscaler:
            autoscaler.wait_for(lambda line: acted(line) and "taint 1" in line, timeout=30)
            time.sleep(2 * drains.PERIOD)
            assert pool.tainted() == [nodes[2]]
            step_clock(offset, 31 * 60)
            moved = time.monotonic()
            at, given_up = autoscaler.wait_for(lambda line: "drain given up" in line, timeout=30, after=moved)
            print(f"given up {at - moved:.1f} s after the clock moved")
            after_31 = drains.evictions(pool)
            for minutes in (61, 121):
                step_clock(offset, minutes * 60)
                time.sleep(3 * drains.PERIOD)
            lines = autoscaler.lines()
            stderr = autoscaler.stderr()
    why = "not drained within draining_time_threshold_seconds 1800s (2 pods left)"
    assert f"{nodes[2]} scaling_down: drain given up, {why}: back in the pool" in given_up, given_up
    assert drains.untainted(pool, nodes[2]), lines
    assert "target 3 -> 4" in given_up, given_up  # counted again in the same run: the group ends none
    # back, and kept (after its rest, consolidation may choose a node again: the target then moves)
    assert world.ec2_state(members[2]) == "running", lines
    # a step every 15 s at first, then an eighth of the drain's age: before, one a run (254 in all)
    assert len(after_31) <= 2 * 8, after_31
    assert len(drains.evictions(pool)) <= 2 * 12, drains.evictions(pool)
    assert "Traceback" not in stderr, stderr[-3000:]

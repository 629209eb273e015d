"""The autoscaler is stopped (``SIGSTOP``) between two evictions of a drain, and continued later.

Real autoscaler processes, their Auto Scaling group in moto's server, the stateful fake API server
(``itests/stateful_api.py``). The first process chooses a node to drain and keep and evicts one of
its two pods; it is stopped while the answer is on its way. It stays stopped for longer than its
lease and several periods: a second autoscaler takes the lease over, evicts the other pod and
untaints the emptied node, and a StatefulSet starts that pod again, same name, on another node.
Continued, the first process must not go on with what it read before the stop: it asks no pod
to leave (the pod of that name is a new one): the rest of its run is not done, and says why.

Alone, stopped past the kept node's 30 minutes (its wall clock stepped on by libfaketime while
it is stopped, ``itests/faketime.py``), it asks no more evictions either: its next run reads
afresh and gives the node up, as any drain to keep whose pods did not leave in time.
"""

from __future__ import annotations

import copy
import signal
import time

from clusterman.decision.consolidate import KEEP_GIVE_UP_SECONDS
from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.faults import drains
from itests.faults.autoscaler_procs import acted


def test_a_drain_stopped_past_its_lease_evicts_nothing_more_once_continued(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        again = copy.deepcopy(pool.kube.pod("default", pods[1]))
        again["spec"]["nodeName"] = nodes[0]  # where the StatefulSet's pod starts again
        pool.kube.evicted_then_hang = True  # the first eviction is carried out, its answer held
        with drains.running(config, world.cluster) as first:
            drains.wait_for_unanswered(pool, first)
            first.signal(signal.SIGSTOP)
            stopped = time.monotonic()
            pool.kube.answer_again()  # the answer waits in the stopped process's socket
            with drains.running(config, world.cluster) as second:
                second.wait_for(lambda line: acted(line) and "untaint 1" in line, timeout=30)
                took_over = time.monotonic() - stopped
                pool.kube.put("pods", again)
                continued = time.monotonic()
                first.signal(signal.SIGCONT)
                time.sleep(3 * drains.PERIOD)
                after = [line for at, line in first.out if at > continued]
                stderr = first.stderr()
            print(f"stopped {continued - stopped:.1f} s; the node untainted by the other after {took_over:.1f} s")
        assert first.proc.returncode == -9, stderr[-3000:]  # it ran on until stopped by the test
    assert drains.evictions(pool) == pods, after  # each asked to leave once, the second by the other process
    assert pool.kube.pod("default", pods[1]) is not None  # the pod started again is left alone
    # the run it was in says why it stopped; its next runs read afresh (and act only holding the lease)
    assert "1 not asked: the snapshot is" in stderr and "old > budget 3 s" in stderr, stderr[-3000:]
    assert pool.tainted() == [] and drains.untainted(pool, nodes[3])
    assert all(world.ec2_state(m) == "running" for m in members) and world.desired(asg) == 4


def test_a_drain_stopped_past_the_kept_nodes_30_minutes_gives_the_node_up(tmp_path, moto_server):
    offset = tmp_path / "faketime-offset"
    with drains.four_nodes(tmp_path, moto_server) as (world, _, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        pool.kube.evicted_then_hang = True
        with drains.running(config, world.cluster, env=faked_clock(offset)) as alone:
            drains.wait_for_unanswered(pool, alone)
            alone.signal(signal.SIGSTOP)
            step_clock(offset, int(KEEP_GIVE_UP_SECONDS) + 60)  # the half hour it stayed stopped
            pool.kube.answer_again()
            time.sleep(2 * drains.PERIOD)
            continued = time.monotonic()
            alone.signal(signal.SIGCONT)
            at, line = alone.wait_for(lambda line: acted(line) and "untaint 1" in line, timeout=30)
            print(f"untainted {at - continued:.1f} s after it was continued")
    assert drains.evictions(pool) == [pods[0]], line  # the other pod stays where it is
    assert pool.tainted() == [] and drains.untainted(pool, nodes[3])
    assert "consolidation:" not in line  # given up, not chosen again in the same run

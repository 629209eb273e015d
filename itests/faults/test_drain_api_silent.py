"""The Kubernetes API server falls silent in the middle of a consolidation drain.

The autoscaler is real, its Auto Scaling group is in moto's server, and the stateful fake API
server (``itests/stateful_api.py``) takes requests and answers none: every request after it
carried out an eviction (its open watches fall silent too), or only the evictions while the node
list and the watches still answer. Each run ends within its budget (an unanswered call costs one
timeout, a third of it, and the calls after it are not tried), says why on stderr, never
terminates the node while its pods are on it, and the drain goes on once the server answers.
"""

from __future__ import annotations

import itertools
import re
import time

from clusterman.cluster.kubernetes import ATTEMPTS
from itests.faults import drains
from itests.faults.autoscaler_procs import Autoscaler
from itests.pool_harness import PoolHarness
from itests.recorded_api import flag

SILENT = 8.0  # long enough for a few runs to meet the silence
# After the server answers again: a run within the silence's window (calls not tried), one that
# evicts, one that finishes; on a loaded machine any of them may lose its 1 s lease or overrun,
# and the next one does it (4-6 s at load 5-7, once 12.7 s)
FINISH = 30.0
TIMEOUT = drains.BUDGET / 3  # each call's


def overran(lines: list[str]) -> list[str]:
    """The runs that overran their budget, but the one the silence began in (the process's first,
    which also fills its watch cache: on a loaded machine it may overrun for that alone)."""
    first = lines[0].split()[0]
    return [line for line in lines if "overrun:" in line and not line.startswith(first)]


def unanswered_eviction(stderr: str) -> bool:
    """Whether the drain said an eviction went unanswered: its own failure, the read timed out.
    (The calls after it name it too, "not tried: ... did not answer evicting pod", but only within
    three timeouts of it: on a loaded machine its run may stop there, its lease lapsed in the
    wait, and the next run come later.)"""
    return re.search(r"evicting pod default/\S+: cannot reach the kubernetes API: .*Read timed out", stderr) is not None


def drain_calls_held(pool: PoolHarness) -> list[float]:
    """When (monotonic) the drain's own calls that the server held came: the node read and patched,
    the pods on it listed, the evictions (not the watch cache's lists and watches)."""
    assert pool.kube is not None
    held = [r for r in pool.kube.unanswered if not flag(r.query, "watch")]
    own = [
        r
        for r in held
        if r.method != "GET" or "/nodes/" in r.path or "spec.nodeName=" in r.query.get("fieldSelector", "")
    ]
    return [r.at for r in own]


def not_sent_again(pool: PoolHarness) -> list[float]:
    """The gaps (s) between the drain's calls the server held. After a call goes unanswered (one
    timeout) none is tried for ``ATTEMPTS`` timeouts; a call sent as soon as the one before it
    timed out would come one timeout after it (1.3-2.0 s apart, tried)."""
    held = drain_calls_held(pool)
    gaps = [later - earlier for earlier, later in itertools.pairwise(held)]
    assert held and all(gap >= ATTEMPTS * TIMEOUT for gap in gaps), (held, gaps)
    return gaps


def decided_since(autoscaler: Autoscaler, since: float) -> list[str]:
    """The lines of the runs that decided since ``since`` (monotonic)."""
    return [line for at, line in autoscaler.out if at > since and "| target" in line]


def test_a_server_silent_after_an_eviction_holds_the_removal_until_it_answers(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        pool.kube.evicted_then_hang = True  # takes the first eviction, then answers nothing
        with drains.running(config, world.cluster) as autoscaler:
            silent = drains.wait_for_unanswered(pool, autoscaler)
            time.sleep(SILENT)
            # three runs meet the silence (a loaded machine's runs may skip a period's slot: wait for them)
            deadline = time.monotonic() + 30
            while len(decided_since(autoscaler, silent)) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            during = [line for at, line in autoscaler.out if at > silent]
            assert pool.kube.pod("default", pods[1]) and world.ec2_state(members[2]) == "running", during
            answering = time.monotonic()
            pool.kube.answer_again()
            done, _ = autoscaler.wait_for(lambda line: "terminate 1" in line, timeout=FINISH, after=answering)
            stderr = autoscaler.stderr()
            print(f"silent {SILENT:g} s: {len(during)} lines; terminated {done - answering:.1f} s after it answered")
        assert drains.evictions(pool) == [pods[0], pods[1]]  # the second once the server answered
    runs = [line for line in during if "| target" in line]
    assert len(runs) >= 3, during
    # every run met the silence within its budget: the first unanswered call is not sent again
    assert not overran(during), "\n".join(during)
    gaps = not_sent_again(pool)
    print("the drain's calls held:", len(gaps) + 1, "apart (s):", " ".join(f"{gap:.1f}" for gap in gaps))
    assert unanswered_eviction(stderr), stderr[-3000:]
    assert f"drain: reading node {nodes[2]}: cannot reach the kubernetes API" in stderr, stderr[-3000:]
    assert world.ec2_state(members[2]) == "terminated" and world.desired(asg) == 3


def test_a_server_that_lists_but_never_answers_evictions_keeps_the_kept_node_tainted(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_keep(pool, members)
        pool.kube.hang("evictions")
        with drains.running(config, world.cluster) as autoscaler:
            silent = drains.wait_for_unanswered(pool, autoscaler)
            time.sleep(SILENT)
            during = [line for at, line in autoscaler.out if at > silent]
            tainted, there = pool.tainted(), [p for p in pods if pool.kube.pod("default", p)]
            answering = time.monotonic()
            pool.kube.answer_again()
            done, _ = autoscaler.wait_for(lambda line: "untaint 1" in line, timeout=FINISH, after=answering)
            stderr = autoscaler.stderr()
            print(f"evictions unanswered {SILENT:g} s; untainted {done - answering:.1f} s after they were")
        assert pool.tainted() == []
        assert not any(pool.kube.pod("default", p) for p in pods)
    assert tainted == [nodes[3]] and there == pods, during  # kept tainted, its pods in place
    assert not overran(during), "\n".join(during)
    gaps = not_sent_again(pool)
    print("the drain's calls held:", len(gaps) + 1, "apart (s):", " ".join(f"{gap:.1f}" for gap in gaps))
    assert unanswered_eviction(stderr), stderr[-3000:]
    assert all(world.ec2_state(m) == "running" for m in members) and world.desired(asg) == 4

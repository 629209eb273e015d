"""The Kubernetes API server falls silent in the middle of a consolidation drain.

The autoscaler is real, its Auto Scaling group is in moto's server, and the stateful fake API
server (``itests/stateful_api.py``) takes requests and answers none: every request after it
carried out an eviction (its open watches fall silent too), or only the evictions while the node
list and the watches still answer. Each run ends within its budget (an unanswered call costs one
timeout, a third of it, and the calls after it are not tried), says why on stderr, never
terminates the node while its pods are on it, and the drain goes on once the server answers.
"""

from __future__ import annotations

import time

from itests.faults import drains

SILENT = 8.0  # long enough for a few runs to meet the silence


def overran(lines: list[str]) -> list[str]:
    """The runs that overran their budget, but the one the silence began in (the process's first,
    which also fills its watch cache: on a loaded machine it may overrun for that alone)."""
    first = lines[0].split()[0]
    return [line for line in lines if "overrun:" in line and not line.startswith(first)]


def test_a_server_silent_after_an_eviction_holds_the_removal_until_it_answers(tmp_path, moto_server):
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        config, nodes, pods = drains.to_remove(pool, members)
        pool.kube.evicted_then_hang = True  # takes the first eviction, then answers nothing
        with drains.running(config, world.cluster) as autoscaler:
            silent = drains.wait_for_unanswered(pool, autoscaler)
            time.sleep(SILENT)
            during = [line for at, line in autoscaler.out if at > silent]
            assert pool.kube.pod("default", pods[1]) and world.ec2_state(members[2]) == "running", during
            answering = time.monotonic()
            pool.kube.answer_again()
            done, _ = autoscaler.wait_for(lambda line: "terminate 1" in line, timeout=20, after=answering)
            stderr = autoscaler.stderr()
            print(f"silent {SILENT:g} s: {len(during)} lines; terminated {done - answering:.1f} s after it answered")
        assert drains.evictions(pool) == [pods[0], pods[1]]  # the second once the server answered
    runs = [line for line in during if "| target" in line]
    assert len(runs) >= 3, during
    # every run met the silence within its budget: the first unanswered call is not sent again
    assert not overran(during), "\n".join(during)
    assert "the kubernetes API did not answer evicting pod default/" in stderr, stderr[-3000:]
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
            done, _ = autoscaler.wait_for(lambda line: "untaint 1" in line, timeout=20, after=answering)
            stderr = autoscaler.stderr()
            print(f"evictions unanswered {SILENT:g} s; untainted {done - answering:.1f} s after they were")
        assert pool.tainted() == []
        assert not any(pool.kube.pod("default", p) for p in pods)
    assert tainted == [nodes[3]] and there == pods, during  # kept tainted, its pods in place
    assert not overran(during), "\n".join(during)
    assert "the kubernetes API did not answer evicting pod default/" in stderr, stderr[-3000:]
    assert all(world.ec2_state(m) == "running" for m in members) and world.desired(asg) == 4

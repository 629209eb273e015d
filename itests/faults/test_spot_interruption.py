"""A Spot interruption warning handled end to end, and its faults: real processes all the way.

An EventBridge event put on moto's bus reaches the warning queue through the rule ``clusterman
setup`` made; the real drainer files it into the pool's inbox; the real autoscaler (Kubernetes, the
stateful fake API server, an Auto Scaling group in moto's server) taints the node at once, evicts
its pods (the slowest to start first) and asks for the replacement in the same run, then ends the
node. Faults: a budget that refuses every eviction for the two minutes (the node goes anyway, and
the pods lost are said and counted), and the autoscaler ``kill -9``ed between two evictions (the
next one goes on from the taint and the record: no second replacement, the other pods evicted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import boto3

from clusterman.local.moto_server import FAKE_CREDENTIALS
from itests.faketime import faked_clock
from itests.faketime import step_clock
from itests.faults import drains
from itests.faults.autoscaler_procs import acted

REGION = "us-west-2"


def aws(moto_server, service: str):
    keys = {"aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
    return boto3.client(service, endpoint_url=moto_server.url, region_name=REGION, **keys)


def started(pod: dict, seconds: int) -> None:
    """The pod started ``seconds`` before it was ready (what eviction order reads)."""
    pod["status"]["startTime"] = "2026-12-06T10:00:00Z"
    ready = f"2026-12-06T10:{seconds // 60:02d}:{seconds % 60:02d}Z"
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]


@contextmanager
def interrupted_pool(tmp_path, moto_server) -> Iterator[tuple]:
    """Four 8-CPU nodes with work on each; the second runs three pods that took 5, 95 and 40 s to
    start. The warning queue and its rules are made; the config reads it."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        nodes = pool.join(members, cpus=8)
        for node in nodes:
            if node != nodes[1]:
                pool.run_pods(node, 2, 2, prefix=f"{node}-web")
        pods = pool.run_pods(nodes[1], 3, 2, prefix="moving")
        for pod, seconds in zip(pods, (5, 95, 40), strict=True):
            started(pool.kube.pods[("default", pod)], seconds)
        url = f"{moto_server.url}/123456789012/{world.cluster}-warnings"
        config = pool.configure(
            draining=True,
            max_capacity=10,
            cluster_extra={"warning_queue_url": url},
            main_extra={"notices": {"poll_seconds": 0.2}},
            autoscaling={"setpoint": 0.7, "target_capacity_margin": 0.2},
        )
        env = {**os.environ, **FAKE_CREDENTIALS}
        made = subprocess.run([sys.executable, "-m", "clusterman", "--env-config-path", config, "setup"],
                              capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert made.returncode == 0, made.stderr
        yield world, asg, members, pool, nodes, pods, config, url


def warn(moto_server, config: str, cluster: str, instance: str) -> None:
    """The cloud warns; the drainer files it (one receive)."""
    detail = json.dumps({"instance-id": instance, "instance-action": "terminate"})
    entry = {"Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning", "Detail": detail}
    assert aws(moto_server, "events").put_events(Entries=[entry])["FailedEntryCount"] == 0
    drained = subprocess.run(
        [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", config, "--cluster", cluster,
         "--once", "--wait-seconds", "2"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **FAKE_CREDENTIALS},
    )  # fmt: skip
    assert "spot_interruption for" in drained.stderr and " filed " in drained.stderr, drained.stderr


def noticed(line: str) -> bool:
    return acted(line) and "spot_interruption: noticed, tainted" in line


def test_a_warning_taints_evicts_the_slowest_first_and_replaces_in_the_same_run(tmp_path, moto_server):
    with (
        interrupted_pool(tmp_path, moto_server) as (world, asg, members, pool, nodes, pods, config, _),
        drains.running(config, world.cluster, args=("--period-seconds", "30")) as autoscaler,
    ):
        autoscaler.wait_for(acted, timeout=60)
        warned = time.monotonic()
        warn(moto_server, config, world.cluster, members[1])
        at, line = autoscaler.wait_for(noticed, timeout=30, after=warned)
        print(f"tainted and replacement asked {at - warned:.1f} s after the warning was put on the bus")
        desired = world.desired(asg)
        _, ended = autoscaler.wait_for(lambda line: "spot_interruption: terminated" in line, timeout=60)
    assert f"{nodes[1]} spot_interruption: noticed, tainted, evicted 3" in line, line
    assert "target 4 -> 5" in line and desired == 5, line  # the replacement, in the same run
    assert at - warned < 30  # a run at once, not at the next one on the 30 s grid
    assert drains.evictions(pool) == [pods[1], pods[2], pods[0]]  # 95 s, 40 s, 5 s to start
    # gone, with the place kept for it: the three pods it ran left no copy (no ReplicaSet here), so
    # the 12 CPUs of the others want 3 nodes at the 70% setpoint
    assert world.ec2_state(members[1]) == "terminated" and world.desired(asg) == 3, ended


def test_a_budget_refusing_for_the_two_minutes_does_not_keep_the_node(tmp_path, moto_server):
    offset = tmp_path / "clock-offset"
    with interrupted_pool(tmp_path, moto_server) as (world, _, members, pool, nodes, pods, config, _):
        pool.kube.budget_refuses.update(f"default/{pod}" for pod in pods[:2])
        with drains.running(config, world.cluster, env=faked_clock(offset)) as autoscaler:
            autoscaler.wait_for(acted, timeout=60)
            warn(moto_server, config, world.cluster, members[1])
            autoscaler.wait_for(noticed, timeout=30)
            step_clock(offset, 60)  # a minute into the warning: asked again, refused again
            moved = time.monotonic()
            autoscaler.wait_for(lambda line: "spot_interruption: evicted 0, 2 left" in line, timeout=30, after=moved)
            step_clock(offset, 115)  # the warning's two minutes, but for 5 s
            moved = time.monotonic()
            _, ended = autoscaler.wait_for(lambda line: "terminated with" in line, timeout=30, after=moved)
            metrics = autoscaler.stderr()
    assert f"{nodes[1]} spot_interruption: terminated with 2 pod(s) not evicted" in ended, ended
    assert world.ec2_state(members[1]) == "terminated", ended
    assert f"{nodes[1]} went with 2 pod(s) not evicted" in metrics, metrics[-3000:]
    asked = drains.evictions(pool)
    assert asked.count(pods[1]) == 2 and pods[2] in asked  # asked again at its pace; the free one went


def test_killed_between_two_evictions_the_next_autoscaler_goes_on(tmp_path, moto_server):
    with interrupted_pool(tmp_path, moto_server) as (world, asg, members, pool, nodes, pods, config, _):
        with drains.running(config, world.cluster) as first:
            first.wait_for(acted, timeout=60)
            pool.kube.evicted_then_hang = True  # the first eviction is carried out, its answer held
            warn(moto_server, config, world.cluster, members[1])
            drains.wait_for_unanswered(pool, first)
            first.signal(signal.SIGKILL)
            first.proc.wait(timeout=10)
        pool.kube.answer_again()
        assert pool.tainted() == [nodes[1]] and world.desired(asg) == 5
        with drains.running(config, world.cluster) as second:
            second.wait_for(lambda line: "spot_interruption: terminated" in line, timeout=60)
            lines = second.lines()
    assert world.desired(asg) == 3 and world.ec2_state(members[1]) == "terminated", lines  # as the first test
    assert not any("target 5 -> 6" in line for line in lines), lines  # no second replacement
    assert sorted(drains.evictions(pool)) == sorted(pods), drains.evictions(pool)  # each asked once


def test_a_host_put_on_clustermans_drain_queue_is_drained_and_ended_by_its_pools_run(tmp_path, moto_server):
    """A tool written for Clusterman asks for a node to go (``scaling down``): no warning queue, no
    replacement; the pool's own run taints, evicts and ends it."""
    with drains.four_nodes(tmp_path, moto_server) as (world, asg, members, pool):
        nodes = pool.join(members, cpus=8)
        pods = pool.run_pods(nodes[2], 2, 1, prefix="leaving")
        url = aws(moto_server, "sqs").create_queue(QueueName=f"{world.cluster}-drain")["QueueUrl"]
        config = pool.configure(
            draining=True, max_capacity=10, min_capacity=1, cluster_extra={"drain_queue_url": url},
            main_extra={"notices": {"poll_seconds": 0.2}},
        )  # fmt: skip
        body = {"instance_id": members[2], "hostname": nodes[2], "group_id": asg, "pool": "web",
                "termination_reason": "scaling down", "draining_start_time": "2026-12-06T12:40:00-08:00"}  # fmt: skip
        sender = {"Sender": {"DataType": "String", "StringValue": "asg"}}
        aws(moto_server, "sqs").send_message(QueueUrl=url, MessageBody=json.dumps(body), MessageAttributes=sender)
        drained = subprocess.run(
            [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", config, "--cluster",
             world.cluster, "--once", "--wait-seconds", "1"],
            capture_output=True, text=True, timeout=120, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        assert f"scaling_down for {members[2]} filed (drain queue" in drained.stderr, drained.stderr
        with drains.running(config, world.cluster) as autoscaler:
            _, line = autoscaler.wait_for(lambda line: "scaling_down: noticed, tainted" in line, timeout=60)
            _, ended = autoscaler.wait_for(lambda line: "scaling_down: terminated" in line, timeout=60)
    assert f"{nodes[2]} scaling_down: noticed, tainted, evicted 2" in line and "replacing" not in line, line
    assert sorted(drains.evictions(pool)) == sorted(pods), ended
    assert world.ec2_state(members[2]) == "terminated", ended

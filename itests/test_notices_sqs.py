"""The cloud's notices end to end on moto's server: ``clusterman setup`` makes the warning queue and
the EventBridge rules, an event put on the bus reaches the queue through its rule, and the real
drainer (``python -m clusterman.batch.drainer``) files it into its pool's inbox, at least once and
idempotently: the same warning three times is one notice, a warning for no instance of the cluster
is deleted with a warning, a message that is not an event or keeps coming back is set aside."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import boto3

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.notices.inbox import Inbox
from clusterman.wiring.state_store import open_state_store
from itests.pool_harness import POOL
from itests.pool_harness import harness

REGION = "us-west-2"


def client(moto_server, service: str):
    return boto3.client(
        service,
        endpoint_url=moto_server.url,
        region_name=REGION,
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def spot_warning(instance: str) -> dict:
    return {
        "Source": "aws.ec2",
        "DetailType": "EC2 Spot Instance Interruption Warning",
        "Detail": json.dumps({"instance-id": instance, "instance-action": "terminate"}),
        "Resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance}"],
    }


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, env={**env} if env else None
    )


def queue_depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def test_a_warning_put_on_the_bus_is_filed_once_in_its_pools_inbox(tmp_path, moto_server):
    import os

    from itests.aws_world import World

    world = World(moto_server.url)
    asg = world.asg(POOL, desired=3)
    members = world.asg_members(asg)
    name = f"{world.cluster}-warnings"
    url = f"{moto_server.url}/123456789012/{name}"
    dead = client(moto_server, "sqs").create_queue(QueueName=f"{name}-set-aside")["QueueUrl"]
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure(
            cluster_extra={"warning_queue_url": url},
            main_extra={"notices": {"max_receives": 3, "dead_letter_queue_url": dead, "visibility_timeout_seconds": 1}},
        )
        env = {**os.environ, **FAKE_CREDENTIALS}
        made = run("clusterman", "--env-config-path", config, "setup", env=env)
        assert made.returncode == 0, made.stderr
        assert f"notices of {world.cluster}: queue {name}" in made.stdout, made.stdout
        assert f"rule clusterman-{world.cluster}-spot-interruption" in made.stdout
        again = run("clusterman", "--env-config-path", config, "setup", env=env)  # idempotent
        assert again.returncode == 0, again.stderr

        events = client(moto_server, "events")
        sqs = client(moto_server, "sqs")
        poison = {"detail-type": "EC2 Spot Instance Interruption Warning", "time": "2026-01-01T00:00:00Z",
                  "detail": {"instance-id": members[2]}}  # fmt: skip
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(poison))
        for _ in range(3):  # a reader that took it and died, three times over
            assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0).get("Messages")
        answer = events.put_events(Entries=[spot_warning(members[1])] * 3 + [spot_warning("i-0000elsewhere")])
        assert answer["FailedEntryCount"] == 0
        sqs.send_message(QueueUrl=url, MessageBody="{not an event")

        drained = ""
        for _ in range(6):  # a receive takes at most ten of them
            done = run(
                "clusterman.batch.drainer", "--env-config-path", config, "--cluster", world.cluster,
                "--once", "--wait-seconds", "1", env=env,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            drained += done.stderr
            if queue_depth(sqs, url) == 0:
                break
        setup = pool.setup()
        notices, _ = Inbox(open_state_store(setup.main), setup.identity).read(time.time())
    assert queue_depth(sqs, url) == 0, drained
    assert [(n.reason.value, n.instance_id) for n in notices] == [("spot_interruption", members[1])], drained
    assert "spot_interruption for i-0000elsewhere: no pool of cluster" in drained, drained
    assert "not an interruption event: not JSON" in drained and "received 4 times" in drained, drained
    aside = sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"][:5] for m in aside) == ['{"det', "{not "], aside


def host(instance: str, reason: str) -> str:
    """A host as Clusterman's DrainingClient puts it on its drain and termination queues."""
    return json.dumps({
        "agent_id": f"{instance}.internal", "attempt": 1, "draining_start_time": "2026-12-06T12:40:00-08:00",
        "group_id": "asg-web", "hostname": instance, "instance_id": instance, "ip": "10.0.1.7", "pool": POOL,
        "scheduler": "kubernetes", "termination_reason": reason,
    })  # fmt: skip


def test_hosts_on_clustermans_drain_and_termination_queues_are_filed_in_their_pools_inbox(tmp_path, moto_server):
    import os

    from clusterman.core.model import NO_TIME
    from itests.aws_world import World

    world = World(moto_server.url)
    members = world.asg_members(world.asg(POOL, desired=3))
    sqs = client(moto_server, "sqs")
    drain, terminate, dead = (
        sqs.create_queue(QueueName=f"{world.cluster}-{name}")["QueueUrl"] for name in ("drain", "terminate", "aside")
    )
    sender = {"Sender": {"DataType": "String", "StringValue": "asg"}}
    for body in (host(members[0], "scaling down"), host(members[0], "scaling down"),
                 host(members[1], "node migration"), host("i-0000elsewhere", "scaling down"),
                 host(members[1], "meteor")):  # fmt: skip
        sqs.send_message(QueueUrl=drain, MessageBody=body, MessageAttributes=sender)
    assert sqs.receive_message(QueueUrl=drain, VisibilityTimeout=0).get("Messages")  # a reader that died
    sqs.send_message(QueueUrl=terminate, MessageBody=host(members[2], "spot interruption"), MessageAttributes=sender)
    with harness(tmp_path, world, "kubernetes") as pool:
        config = pool.configure(  # no warning queue: Clusterman's two queues alone
            cluster_extra={"drain_queue_url": drain, "termination_queue_url": terminate},
            main_extra={"notices": {"dead_letter_queue_url": dead}},
        )
        drained = ""
        for _ in range(4):
            done = run(
                "clusterman.batch.drainer", "--env-config-path", config, "--cluster", world.cluster,
                "--once", "--wait-seconds", "1", env={**os.environ, **FAKE_CREDENTIALS},
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            drained += done.stderr
            if queue_depth(sqs, drain) + queue_depth(sqs, terminate) == 0:
                break
        setup = pool.setup()
        read_at = time.time()
        notices, _ = Inbox(open_state_store(setup.main), setup.identity).read(read_at)
    assert queue_depth(sqs, drain) + queue_depth(sqs, terminate) == 0, drained
    filed = sorted((n.instance_id, n.reason.value, n.replace, n.deadline == NO_TIME) for n in notices)
    assert filed == [
        (members[0], "scaling_down", False, True),  # sent twice: one notice, no replacement
        (members[1], "node_migration", True, True),
        (members[2], "spot_interruption", True, False),  # terminated when read
    ], drained
    (terminated,) = [n for n in notices if n.instance_id == members[2]]
    assert read_at - 60 < terminated.deadline <= read_at, drained
    assert f"filed (termination queue, message {terminated.key}, sent by asg for pool {POOL})" in drained, drained
    assert "scaling_down for i-0000elsewhere: no pool of cluster" in drained, drained
    (aside,) = sqs.receive_message(QueueUrl=dead, MessageAttributeNames=["All"])["Messages"]
    assert "meteor" in aside["Body"] and aside["MessageAttributes"]["Sender"]["StringValue"] == "asg"
    assert "termination_reason 'meteor' is none of" in aside["MessageAttributes"]["why"]["StringValue"]

"""The drainer while SQS refuses or hangs: it keeps running, waits longer between tries, and files
what came meanwhile once SQS answers again: no message is lost. The real drainer reads moto's SQS
through a proxy that fails its calls (``itests/aws_proxy.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import boto3
import pytest

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.notices.inbox import Inbox
from clusterman.wiring.state_store import open_state_store
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import World
from itests.pool_harness import POOL
from itests.pool_harness import harness

REGION = "us-west-2"


def sqs(moto_server):
    return boto3.client("sqs", endpoint_url=moto_server.url, region_name=REGION,
                        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])  # fmt: skip


def warning(instance: str) -> str:
    return json.dumps({
        "version": "0", "id": "e-1", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "region": REGION, "resources": [],
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    })  # fmt: skip


@pytest.mark.parametrize(
    "fault",
    [
        Fault(code="InternalError", status=500, message="We encountered an internal error", times=None),
        Fault(slow_seconds=600, times=None),  # a receive held for ten minutes: the drainer's read gives up
    ],
    ids=["refusing", "hanging"],
)
def test_sqs_refusing_or_hanging_loses_no_message(tmp_path, moto_server, fault):
    world = World(moto_server.url)
    members = world.asg_members(world.asg(POOL, desired=2))
    name = f"{world.cluster}-warnings"
    url = sqs(moto_server).create_queue(QueueName=name)["QueueUrl"]
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, "kubernetes", aws_url=proxy.url) as pool:
        config = pool.configure(cluster_extra={"warning_queue_url": url})
        failing = proxy.add(Fault(**{**fault.__dict__, "contains": name}))
        drainer = subprocess.Popen(
            [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", config, "--cluster", world.cluster,
             "--wait-seconds", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        try:
            sqs(moto_server).send_message(QueueUrl=url, MessageBody=warning(members[0]))
            time.sleep(30 if fault.slow_seconds else 8)  # SQS down for that long
            assert drainer.poll() is None  # still running
            failing.times = 0  # SQS answers again
            identity = pool.setup().identity
            store = open_state_store(pool.setup().main)
            deadline = time.monotonic() + 90
            notices: tuple = ()
            while not notices and time.monotonic() < deadline:
                notices, _ = Inbox(store, identity).read(time.time())
                time.sleep(0.2)
        finally:
            drainer.terminate()
            _, stderr = drainer.communicate(timeout=60)
    assert [n.instance_id for n in notices] == [members[0]], stderr[-3000:]
    assert "SQS did not answer for the warning queue (tried again in" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


def host(instance: str) -> str:
    return json.dumps({"instance_id": instance, "termination_reason": "node migration", "pool": POOL})


@pytest.mark.parametrize("hung", ["drain", "warnings"])
def test_a_queue_sqs_holds_does_not_delay_the_others(tmp_path, moto_server, hung):
    """Each queue is read in its own thread: a hung one costs the others nothing (read one after
    another, a hung drain queue held each Spot warning for up to a minute of its two)."""
    world = World(moto_server.url)
    members = world.asg_members(world.asg(POOL, desired=2))
    urls = {name: sqs(moto_server).create_queue(QueueName=f"{world.cluster}-{name}")["QueueUrl"]
            for name in ("drain", "warnings")}  # fmt: skip
    with FaultyProxy(moto_server.url) as proxy, harness(tmp_path, world, "kubernetes", aws_url=proxy.url) as pool:
        config = pool.configure(cluster_extra={"drain_queue_url": urls["drain"], "warning_queue_url": urls["warnings"]})
        proxy.add(Fault(slow_seconds=600, times=None, contains=f"{world.cluster}-{hung}"))
        identity, store = pool.setup().identity, open_state_store(pool.setup().main)
        drainer = subprocess.Popen(
            [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", config, "--cluster", world.cluster],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        try:
            time.sleep(3)  # reading both queues, one of them held
            sent = time.monotonic()
            if hung == "drain":
                sqs(moto_server).send_message(QueueUrl=urls["warnings"], MessageBody=warning(members[0]))
            else:
                sqs(moto_server).send_message(QueueUrl=urls["drain"], MessageBody=host(members[0]))
            notices: tuple = ()
            while not notices and time.monotonic() < sent + 60:
                notices, _ = Inbox(store, identity).read(time.time())
                time.sleep(0.2)
            filed_after = time.monotonic() - sent
        finally:
            drainer.terminate()
            _, stderr = drainer.communicate(timeout=60)
    assert [n.instance_id for n in notices] == [members[0]], stderr[-3000:]
    assert filed_after < 10, (filed_after, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]


def test_a_message_that_breaks_the_drainer_costs_only_itself(tmp_path, moto_server, monkeypatch):
    """A message whose handling raises (a bug) is left to come back, then set aside; the queue's
    thread goes on reading. In-process, so that the bug can be planted."""
    from clusterman.batch import drainer
    from clusterman.config.loader import load_main_config

    world = World(moto_server.url)
    members = world.asg_members(world.asg(POOL, desired=2))
    url = sqs(moto_server).create_queue(QueueName=f"{world.cluster}-warnings")["QueueUrl"]
    real = drainer.notices_of

    def planted(body, key, rebalance):
        if members[0] in body:
            raise KeyError("a bug")
        return real(body, key, rebalance)

    monkeypatch.setattr(drainer, "notices_of", planted)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with harness(tmp_path, world, "kubernetes") as pool:
        notices = {"max_receives": 2, "visibility_timeout_seconds": 1}
        config = pool.configure(cluster_extra={"warning_queue_url": url}, main_extra={"notices": notices})
        main = load_main_config(config)
        router, _ = drainer.build(main, world.cluster, str(main.cluster_config_directory), wait_seconds=1)
        stop = threading.Event()
        serving = threading.Thread(target=drainer.serve, args=(router, None, stop))
        serving.start()
        try:
            sqs(moto_server).send_message(QueueUrl=url, MessageBody=warning(members[0]))
            deadline = time.monotonic() + 60
            while router.tally.set_aside == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            sqs(moto_server).send_message(QueueUrl=url, MessageBody=warning(members[1]))
            while router.tally.filed == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop.set()
            serving.join(timeout=30)
        identity = str(pool.setup().identity)
    assert router.tally.set_aside == 1 and router.tally.filed == 1, router.tally
    assert router.tally.by_pool == {identity: 1}


def test_a_full_state_disk_loses_no_message_and_filing_resumes_once_freed(tmp_path, moto_server):
    """The drainer's state directory (its lease, the pools' inboxes) on a 4 MB tmpfs of its own,
    filled while a warning arrives: the warning is neither lost nor set aside, and is filed once the
    disk is freed."""
    from itests.faults.drains import on_tmpfs
    from itests.faults.test_run_disk_full import inside

    world = World(moto_server.url)
    members = world.asg_members(world.asg(POOL, desired=2))
    url = sqs(moto_server).create_queue(QueueName=f"{world.cluster}-warnings")["QueueUrl"]
    state = tmp_path / "state"
    state.mkdir()
    with harness(tmp_path, world, "kubernetes") as pool:
        notices = {"visibility_timeout_seconds": 2}
        config = pool.configure(cluster_extra={"warning_queue_url": url}, main_extra={"notices": notices})
        drainer = subprocess.Popen(
            [*on_tmpfs(state), sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", config,
             "--cluster", world.cluster, "--wait-seconds", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        try:
            time.sleep(3)  # the lease taken, the queue read
            inside(drainer.pid, "dd", "if=/dev/zero", f"of={state}/fill", "bs=64k")
            sqs(moto_server).send_message(QueueUrl=url, MessageBody=warning(members[0]))
            time.sleep(25)  # full: the lease is not renewed, nothing is filed
            assert drainer.poll() is None
            inside(drainer.pid, "rm", f"{state}/fill")
            deadline = time.monotonic() + 60
            while sqs_depth(moto_server, url) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(1)
        finally:
            drainer.terminate()
            _, stderr = drainer.communicate(timeout=60)
    assert f"spot_interruption for {members[0]} filed" in stderr, stderr[-3000:]
    assert "set aside" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    full = stderr[: stderr.index(" filed ")]
    assert "disk is full" in full or "cannot be read" in full or "cannot file" in full, full[-3000:]


def sqs_depth(moto_server, url: str) -> int:
    attributes = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    got = sqs(moto_server).get_queue_attributes(QueueUrl=url, AttributeNames=attributes)["Attributes"]
    return sum(int(got[a]) for a in attributes)

"""The drainer at scale: a 1,000-node pool and 1,000 Spot interruption warnings, each sent twice.

Real processes: moto's server (an Auto Scaling group of 1,000 instances, the warning queue), the
real drainer (``python -m clusterman.batch.drainer``) filing into a SQLite state store. The issue's
load is 1,000 warnings an hour; here they are all queued at once and the drainer drains the queue
as fast as it can. Measured: no message lost (every instance's notice in the pool's inbox), none
handled twice in effect (each duplicate filed as a repeat, which changes nothing), the seconds it
took, and its rate as a ratio to two baselines from the same run: the load's rate (1,000 an hour)
and a bare reader that only receives and deletes the same number of messages (the SQS floor).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import yaml

from clusterman.config.loader import load_main_config
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.moto_server import MotoServer
from clusterman.local.stack import create_pool_group
from clusterman.notices.inbox import Inbox
from clusterman.wiring.state_store import open_state_store

CLUSTER, POOL, REGION = "bench", "big", "us-west-2"
PER_HOUR = 1000  # the load


def _client(url: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=url, region_name=REGION,
                        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])  # fmt: skip


def _warning(instance: str) -> str:
    return json.dumps({
        "version": "0", "id": f"e-{instance}", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "region": REGION,
        "resources": [], "detail": {"instance-id": instance, "instance-action": "terminate"},
    })  # fmt: skip


def _send(sqs: Any, url: str, bodies: list[str]) -> None:
    for i in range(0, len(bodies), 10):
        entries = [{"Id": str(k), "MessageBody": b} for k, b in enumerate(bodies[i : i + 10])]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


def _depth(sqs: Any, url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


def _bare_reader(sqs: Any, url: str, count: int) -> float:
    """Seconds to receive and delete ``count`` messages with nothing else done: the SQS floor."""
    started = time.perf_counter()
    seen = 0
    while seen < count:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages") or []
        if got:
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]} for k, m in enumerate(got)]
            )
        seen += len(got)
    return time.perf_counter() - started


def run(quick: bool = False) -> dict[str, Any]:
    nodes = 100 if quick else 1000
    with (
        tempfile.TemporaryDirectory(prefix="bench-drainer-") as tmp,
        MotoServer(log_path=Path(tmp) / "moto.log") as moto,
    ):
        work = Path(tmp)
        group = create_pool_group(moto.url, CLUSTER, POOL, max_size=nodes)
        scaling = _client(moto.url, "autoscaling")
        scaling.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=nodes)
        described = scaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
        instances = sorted(i["InstanceId"] for i in described["Instances"])
        sqs = _client(moto.url, "sqs")
        url = sqs.create_queue(QueueName=f"{CLUSTER}-warnings")["QueueUrl"]
        floor_url = sqs.create_queue(QueueName=f"{CLUSTER}-floor")["QueueUrl"]
        main = {
            "clusters": {CLUSTER: {"aws_region": REGION, "warning_queue_url": url}},
            "aws": {"region": REGION, "endpoint_url": moto.url},
            "cluster_config_directory": "pools",
            "state_directory": "state",
            "autoscale_signal": {"name": "MostRecentResources", "branch_or_tag": "v1", "period_minutes": 1},
        }
        pool = {
            "resource_groups": [{"asg": {"tag": "clusterman:pool"}}],
            "scaling_limits": {"min_capacity": 1, "max_capacity": nodes, "max_weight_to_add": 10,
                               "max_weight_to_remove": 10},
        }  # fmt: skip
        (work / "pools" / CLUSTER).mkdir(parents=True)
        (work / "pools" / CLUSTER / f"{POOL}.kubernetes").write_text(yaml.safe_dump(pool))
        (work / "clusterman.yaml").write_text(yaml.safe_dump(main))

        _send(sqs, floor_url, [_warning(i) for i in instances] * 2)
        floor = _bare_reader(sqs, floor_url, 2 * nodes)

        _send(sqs, url, [_warning(i) for i in instances] * 2)  # each warning twice
        started = time.perf_counter()
        drainer = subprocess.Popen(
            [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", str(work / "clusterman.yaml"),
             "--cluster", CLUSTER, "--wait-seconds", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 1800
            while _depth(sqs, url) and time.monotonic() < deadline:
                time.sleep(0.5)
            seconds = time.perf_counter() - started
        finally:
            drainer.terminate()
            _, stderr = drainer.communicate(timeout=120)
        identity = PoolIdentity(CLUSTER, POOL, Scheduler.KUBERNETES)
        store = open_state_store(load_main_config(work / "clusterman.yaml"))
        notices, version = Inbox(store, identity).read(time.time())
    tally = re.search(r"stopped: Tally\(filed=(\d+), repeated=(\d+), unknown=(\d+), ignored=(\d+), set_aside=(\d+)",
                      stderr)  # fmt: skip
    filed, repeated, unknown, _, set_aside = (int(x) for x in tally.groups()) if tally else (-1,) * 5
    noticed = {n.instance_id for n in notices}
    rate = 2 * nodes / seconds
    return {
        "nodes": nodes,
        "messages": 2 * nodes,
        "lost": len(set(instances) - noticed),
        "filed": filed,
        "filed_twice": filed - len(noticed),
        "repeats_that_changed_nothing": repeated,
        "unknown": unknown,
        "set_aside": set_aside,
        "inbox_writes": version,
        "seconds": round(seconds, 2),
        "messages_per_second": round(rate, 1),
        "vs_load": round(rate / (PER_HOUR / 3600), 1),  # how many times the rate it keeps up with
        "sqs_floor_seconds": round(floor, 2),
        "vs_sqs_floor": round(seconds / floor, 2),  # the drainer's time over a bare reader's
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))

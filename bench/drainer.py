"""The drainer at scale: a 1,000-node pool and 1,000 Spot interruption warnings, each sent twice.

Real processes: moto's server (an Auto Scaling group of 1,000 instances, the warning queue), the
real drainer (``python -m clusterman.batch.drainer``) filing into a SQLite state store. The issue's
load is 1,000 warnings an hour. Measured: no message lost (every instance's notice in the pool's inbox), none
handled twice in effect (each duplicate filed as a repeat, which changes nothing), the seconds it
took, and whether it kept up: the messages are fed at 10 a second (36 times the load, bursts of
ten) and the figure is the time until the queue is empty over the time feeding it, from the same
run (1.0: done as the last one came), with the deepest the queue got. (Fed all at once, moto's SQS
itself is the bottleneck: a bare reader takes 196 s for 2,000 messages queued, 2.9 s for 200.)
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
FEED_PER_SECOND = 10.0  # the rate messages are queued at here: 36 times the load


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

        # every warning twice, the copy a little later, fed at FEED_PER_SECOND (bursts of ten)
        bodies = [_warning(i) for i in instances]
        order = [b for k in range(0, len(bodies), 5) for b in (bodies[k : k + 5] * 2)]
        log = (work / "drainer.log").open("w")  # a pipe nobody reads meanwhile would fill and stop it
        drainer = subprocess.Popen(
            [sys.executable, "-m", "clusterman.batch.drainer", "--env-config-path", str(work / "clusterman.yaml"),
             "--cluster", CLUSTER, "--wait-seconds", "1"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **FAKE_CREDENTIALS},
        )  # fmt: skip
        deepest = 0
        try:
            started = time.perf_counter()
            for k in range(0, len(order), 10):
                _send(sqs, url, order[k : k + 10])
                deepest = max(deepest, _depth(sqs, url))
                time.sleep(max(0.0, started + (k + 10) / FEED_PER_SECOND - time.perf_counter()))
            fed = time.perf_counter() - started
            deadline = time.monotonic() + 600
            while _depth(sqs, url) and time.monotonic() < deadline:
                time.sleep(0.2)
            seconds = time.perf_counter() - started
        finally:
            drainer.terminate()
            drainer.wait(timeout=120)
            log.close()
        stderr = (work / "drainer.log").read_text()
        identity = PoolIdentity(CLUSTER, POOL, Scheduler.KUBERNETES)
        store = open_state_store(load_main_config(work / "clusterman.yaml"))
        notices, version = Inbox(store, identity).read(time.time())
    tally = re.search(r"stopped: Tally\(filed=(\d+), repeated=(\d+), unknown=(\d+), ignored=(\d+), set_aside=(\d+)",
                      stderr)  # fmt: skip
    filed, repeated, unknown, _, set_aside = (int(x) for x in tally.groups()) if tally else (-1,) * 5
    noticed = {n.instance_id for n in notices}
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
        "fed_per_second": FEED_PER_SECOND,
        "fed_vs_load": round(FEED_PER_SECOND / (PER_HOUR / 3600), 1),  # times the rate
        "deepest_queue": deepest,  # the most messages waiting at once: it kept up when this stays small
        "seconds_feeding": round(fed, 2),
        "seconds_until_drained": round(seconds, 2),
        "vs_feeding": round(seconds / fed, 3),  # 1.0: done as the last message came
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))

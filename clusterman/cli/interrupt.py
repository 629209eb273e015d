"""``clusterman interrupt [--instance ID]``: put an EC2 Spot Instance Interruption Warning on the
EventBridge bus, in AWS's own shape, for one of the pool's instances (the oldest when none is
named: surely a node by now).

For the local stack and moto's server: the warning reaches the cluster's warning queue through the
rule ``clusterman setup`` made, and the pool's autoscaler handles it. AWS itself refuses events
whose source is ``aws.ec2`` from anyone but EC2; on AWS, interrupt a Spot instance with the Fault
Injection Service's ``aws:ec2:send-spot-instance-interruptions`` action instead.
"""

from __future__ import annotations

import argparse
import json
import time

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import resolve_pool
from clusterman.core.timestamps import format_time
from clusterman.errors import OperationalError
from clusterman.errors import UserError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("interrupt", help="send a Spot interruption warning for one of a pool's instances")
    add_pool_arguments(parser)
    parser.add_argument("--instance", default="", help="the instance (default: the pool's oldest)")
    parser.set_defaults(func=run_interrupt)


def run_interrupt(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError
    from botocore.exceptions import ClientError

    from clusterman.aws.session import AwsSettings
    from clusterman.aws.session import client
    from clusterman.notices.events import SPOT_WARNING
    from clusterman.wiring.build import cloud_for

    setup = resolve_pool(args)
    cluster = setup.main.clusters.get(setup.identity.cluster)
    region = cluster.aws_region if cluster is not None else None
    instance = args.instance
    if not instance:
        instances = cloud_for(setup).read(time.time()).view.instances
        if not instances:
            raise UserError(f"{setup.identity}: no instance to interrupt")
        instance = min(instances, key=lambda i: (i.launched_at, i.instance_id)).instance_id
    now = time.time()
    detail = {"instance-id": instance, "instance-action": "terminate"}
    entry = {
        "Source": "aws.ec2",
        "DetailType": SPOT_WARNING,
        "Detail": json.dumps(detail),
        "Resources": [f"arn:aws:ec2:{region or setup.main.aws.region}::instance/{instance}"],
        "Time": now,
    }
    events = client(AwsSettings.from_config(setup.main.aws, region), "events", retries={"max_attempts": 2})
    try:
        answer = events.put_events(Entries=[entry])
    except (BotoCoreError, ClientError) as e:
        raise OperationalError(f"cannot put the warning on the EventBridge bus: {e}") from None
    if answer.get("FailedEntryCount"):
        failed = answer["Entries"][0]
        raise UserError(f"EventBridge refused the warning: {failed.get('ErrorCode')}: {failed.get('ErrorMessage')}")
    print(f"{format_time(now)} Spot interruption warning put on the bus for {instance} (it goes in 120 s)")
    return 0

"""One autoscaler per pool: two real autoscaler processes on one pool, the lease in DynamoDB (moto's server).

Only the lease holder acts; the other says why on every run. ``kill -9`` of the holder: the other
takes the lease once the holder's TTL has run out (measured from the kill) and acts from then on.
"""

from __future__ import annotations

import signal
import time

import boto3

from itests.aws_world import REGION
from itests.aws_world import World
from itests.faults.autoscaler_procs import POOL
from itests.faults.autoscaler_procs import Autoscaler
from itests.faults.autoscaler_procs import acted
from itests.faults.autoscaler_procs import dynamodb_config

PERIOD, TTL = 4.0, 3.0  # renewed every second between runs, and as a run makes progress


def lease_holder(url: str, table: str, entity: str) -> str:
    client = boto3.client("dynamodb", endpoint_url=url, region_name=REGION)
    item = client.get_item(
        TableName=table, Key={"state": {"S": "autoscaler_lease"}, "entity": {"S": entity}}, ConsistentRead=True
    ).get("Item", {})
    return item.get("holder", {}).get("S", "")


def test_two_autoscalers_one_pool_only_the_lease_holder_acts(tmp_path, moto_server):
    world = World(moto_server.url)
    world.asg(POOL, desired=1)
    config, table = dynamodb_config(tmp_path, world.cluster, moto_server.url, tasks=10)
    args = ("--period-seconds", str(PERIOD), "--lease-seconds", str(TTL), "--no-splay")
    entity = f"{world.cluster}.{POOL}.simulated"
    first = Autoscaler(config, world.cluster, *args)
    second = None
    try:
        first.wait_for(acted, timeout=60)
        second = Autoscaler(config, world.cluster, *args)
        # the second one runs three times and never acts; the first goes on acting meanwhile
        for _ in range(2):
            second.wait_for(lambda line: True, timeout=60, after=(second.out or [(0, "")])[-1][0] + 1e-6)
        assert not any(acted(line) for line in second.lines()), second.lines()
        assert all("standby: not acting: the pool's lease is held by pid" in line for line in second.lines())
        assert sum(acted(line) for line in first.lines()) >= 2, first.lines()

        holder = lease_holder(moto_server.url, table, entity)
        assert f":{first.proc.pid}:" in holder
        killed = time.monotonic()
        first.signal(signal.SIGKILL)
        deadline = killed + 60
        while f":{second.proc.pid}:" not in lease_holder(moto_server.url, table, entity):
            assert time.monotonic() < deadline, second.lines()
            time.sleep(0.05)
        took_over = time.monotonic() - killed
        at, _ = second.wait_for(acted, timeout=60, after=killed)
        print(f"lease taken over {took_over:.2f} s after kill -9 (TTL {TTL} s); acting {at - killed:.2f} s after")
        # taken over once the dead holder's TTL ran out: not before (it renewed just before its death),
        # and soon after (the standby retries every tenth of the TTL); generous for a loaded machine
        assert took_over < TTL + 10, took_over

        stopping = time.monotonic()  # a clean stop gives the lease up at once
        second.signal(signal.SIGTERM)
        assert second.proc.wait(timeout=60) == 0, second.stderr()
        assert lease_holder(moto_server.url, table, entity) == ""
        print(f"lease released {time.monotonic() - stopping:.2f} s after SIGTERM")
    finally:
        first.stop()
        if second is not None:
            second.stop()

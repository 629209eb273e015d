"""``clusterman manage`` takes the pool's lease on request (``take_on_request``); a claim answered
after the lease it wrote ran out is not the lease taken. The lease in DynamoDB (moto's server):
manage's writes go through a loopback proxy that holds the answer to its claim past manage's TTL
(the write lands at once); the autoscaler, a standby between runs, leaves the lease to manage's
request and takes it once manage's lease and request have run out, talking to moto directly.

Before the fix ``take_on_request`` returned "held" with the autoscaler holding the lease: manage
would set the pool's target beside an autoscaler that acts. Now it claims again and returns held
only with the lease its own in the table.
"""

from __future__ import annotations

import threading
import time
import uuid

import boto3
from botocore.config import Config

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.state.lease import AUTOSCALER_LEASE
from clusterman.state.lease import Holder
from clusterman.state.lease import LeaseStatus
from clusterman.state.lease import PoolLease
from clusterman.state.lease import take_on_request
from clusterman.state.pause import entity
from clusterman.state.store import DynamoStateStore
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import REGION
from itests.faults.autoscaler_procs import make_state_table

POOL = PoolIdentity("norcal", "batch", Scheduler.KUBERNETES)
TTL = 1.0  # manage's lease and request; the autoscaler's too
LATE = TTL + 0.6


def test_a_lease_claim_answered_after_it_ran_out_is_not_taken_by_manage(moto_server):
    table = f"state-{uuid.uuid4().hex[:8]}"
    make_state_table(moto_server.url, table)
    direct = DynamoStateStore(boto3.client("dynamodb", endpoint_url=moto_server.url, region_name=REGION), table)
    autoscaler = PoolLease(direct, POOL, Holder("host-a", 1, 1000.0), TTL)  # standby: nobody holds it yet
    stop = threading.Event()

    def between_runs() -> None:  # leaves the lease to a live request, takes it when free
        while not stop.wait(0.05):
            autoscaler.claim(time.time(), hand_over=True)

    renewing = threading.Thread(target=between_runs, daemon=True)
    renewing.start()
    with FaultyProxy(moto_server.url) as proxy:
        config = Config(read_timeout=LATE + 5, retries={"max_attempts": 1})
        slow = boto3.client("dynamodb", endpoint_url=proxy.url, region_name=REGION, config=config)
        manage = PoolLease(DynamoStateStore(slow, table), POOL, Holder("ops", 2, 1000.0), TTL, purpose="manage")
        # the lease's payload says since when it is held; the request's does not
        fault = proxy.add(Fault(contains="since", slow_seconds=LATE, after=True))
        try:
            began = time.monotonic()
            status = take_on_request(manage, 10.0, poll_seconds=0.05, lapse_seconds=TTL)
            took = time.monotonic() - began
            stored = LeaseStatus.of(item) if (item := direct.get(AUTOSCALER_LEASE, entity(POOL))) else None
            now = time.time()
        finally:
            stop.set()
            renewing.join()
    print(f"manage: {status.describe()} after {took:.2f} s; in the table: {stored}")
    assert fault.hits == 1 and took >= LATE
    assert status.held
    assert stored is not None and stored.holder == manage.holder.id and now < stored.expires_at

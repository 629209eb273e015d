"""A run renews the pool's lease right before acting: a lease that lapsed before the renewal's answer
came is not ours to act on. The lease in DynamoDB (moto's server), behind a loopback proxy that
answers the holder's writes late (``itests/aws_proxy.py``); a second claimant talks to moto directly.

- ``answer late``: the renewal is written at once, its answer held past the TTL; meanwhile the
  other claimant takes the lease over (ours had run out) and holds it while we would act.
- ``request late``: the renewal reaches the table after the TTL it wrote has run out; the other
  claimant can take the lease the moment we would act.
- ``stopped``: the process stops (as under SIGSTOP) after deciding, past its TTL; an operator's
  command takes the lease, changes the pool and gives it back; the renewal right before acting
  then succeeds, on a decision made before the operator's change.

Before the fix the permit let the run act in all three; now each refuses, saying why.
"""

from __future__ import annotations

import threading
import time
import uuid

import boto3
import pytest
from botocore.config import Config

from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.run.permit import Permit
from clusterman.run.report import Outcome
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.store import DynamoStateStore
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy
from itests.aws_world import REGION
from itests.faults.autoscaler_procs import make_state_table

POOL = PoolIdentity("norcal", "batch", Scheduler.KUBERNETES)
TTL = 1.0
LATE = TTL + 0.6  # how long the proxy holds the renewal


@pytest.mark.parametrize("case", ["answer late", "request late", "stopped"])
def test_a_lease_that_lapsed_before_its_renewal_was_answered_is_not_acted_on(moto_server, case):
    table = f"state-{uuid.uuid4().hex[:8]}"
    make_state_table(moto_server.url, table)
    direct = DynamoStateStore(boto3.client("dynamodb", endpoint_url=moto_server.url, region_name=REGION), table)
    other = PoolLease(direct, POOL, Holder("host-b", 2, 1000.0), TTL, purpose="clusterman manage by ann")
    with FaultyProxy(moto_server.url) as proxy:
        config = Config(read_timeout=LATE + 5, retries={"max_attempts": 1})
        slow = boto3.client("dynamodb", endpoint_url=proxy.url, region_name=REGION, config=config)
        ours = PoolLease(DynamoStateStore(slow, table), POOL, Holder("host-a", 1, 1000.0), TTL)
        permit = Permit(
            time.time(), lease=ours, keep=lambda now, hand_over: ours.claim(now, hand_over), budget_seconds=30
        )
        assert permit.claim() is None  # ours until TTL from now
        taken, done = threading.Event(), threading.Event()

        def watch_and_take() -> None:
            """The other claimant watches the lease (it takes one it saw unchanged for its TTL)."""
            while not done.is_set():
                if other.claim(time.time()).held:
                    taken.set()
                    return
                time.sleep(0.05)

        watcher = threading.Thread(target=watch_and_take, daemon=True)
        watcher.start()
        try:
            if case == "stopped":
                # the process stood still past its TTL: the operator's command acts, and lets go
                assert taken.wait(TTL + 5)
                other.release()
            else:
                # "answer late": our renewal is written at once, its answer held: the other sees it
                # renewed and takes it a TTL later, before the answer comes; "request late": the
                # renewal is held before it reaches the table, and the other takes ours meanwhile
                proxy.add(Fault(contains="autoscaler_lease", slow_seconds=LATE, after=case == "answer late"))
            began = time.monotonic()
            refusal = permit.acting()
            took = time.monotonic() - began
        finally:
            done.set()
            watcher.join(10)
        print(f"{case}: renewal answered after {took:.2f} s (TTL {TTL} s): {refusal}")
        if case != "stopped":
            assert took >= LATE
            assert taken.is_set()  # the other holds the lease: acting now would be two autoscalers at once
        assert refusal is not None and refusal.outcome is Outcome.STANDBY, refusal
        assert "lease" in refusal.message
